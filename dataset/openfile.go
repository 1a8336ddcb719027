package dataset

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// NotRegularError is a data path that names something other than a
// regular file (or, for text, a directory): a named pipe, a device, a
// socket. Reading one could block for ever (a FIFO with no writer) or
// never end (/dev/zero), so it is refused before it is opened.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, describeMode(e.Mode))
}

// describeMode names a file's type in words.
func describeMode(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeSymlink != 0:
		return "a symlink"
	case t&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return "not a regular file (mode " + m.String() + ")"
}

// CheckRegular returns a *NotRegularError unless path (symlinks followed)
// is a regular file, or a directory where dirOK. It never opens path.
func CheckRegular(path string, dirOK bool) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().IsRegular() || dirOK && fi.IsDir() {
		return nil
	}
	return &NotRegularError{Path: path, Mode: fi.Mode()}
}

// openRegular opens path for reading only if it is a regular file: it
// checks before opening, opens without blocking (O_NONBLOCK where there
// is one: a FIFO put in its place meanwhile does not wait for a writer),
// and checks the file it opened again.
func openRegular(path string) (*os.File, error) {
	if err := CheckRegular(path, false); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: path, Mode: fi.Mode()}
	}
	return f, nil
}

// readRegular is os.ReadFile for a regular file only (openRegular).
func readRegular(path string) ([]byte, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// OpenRegular opens path for reading only if it is a regular file, without
// blocking on a FIFO put in its place (see openRegular): for the files a
// job spec names outside a data set (a model's starting parameters).
func OpenRegular(path string) (*os.File, error) { return openRegular(path) }
