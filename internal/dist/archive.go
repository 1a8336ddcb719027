package dist

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"io"
	"os"
	"time"
)

// file is one entry of an archive.
type file struct {
	name string
	mode os.FileMode
	data []byte
}

// writeArchive writes files, in the order given, to path: a zip for
// Windows, a gzipped tar elsewhere. Nothing of the machine gets in: every
// entry has the time at, owner 0 and no owner names, and the gzip header
// no name or time.
func writeArchive(path string, t Target, files []file, at time.Time) error {
	var buf bytes.Buffer
	var err error
	if t.OS == "windows" {
		err = writeZip(&buf, files, at)
	} else {
		err = writeTarGz(&buf, files, at)
	}
	if err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func writeTarGz(w io.Writer, files []file, at time.Time) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, f := range files {
		h := &tar.Header{
			Typeflag: tar.TypeReg, Name: f.name, Size: int64(len(f.data)),
			Mode: int64(f.mode.Perm()), ModTime: at.UTC().Truncate(time.Second),
			Format: tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func writeZip(w io.Writer, files []file, at time.Time) error {
	zw := zip.NewWriter(w)
	zw.RegisterCompressor(zip.Deflate, func(out io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(out, flate.BestCompression)
	})
	for _, f := range files {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: at.UTC().Truncate(2 * time.Second)}
		h.SetMode(f.mode.Perm())
		fw, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		if _, err := fw.Write(f.data); err != nil {
			return err
		}
	}
	return zw.Close()
}
