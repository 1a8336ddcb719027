package dataset

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadIDXRawAndGzipAgree(t *testing.T) {
	p := mnistFile(mnistDir(t), MNISTTestLabels)
	file, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	raw, gz := file, file
	if strings.HasSuffix(p, ".gz") {
		raw = gunzipFile(t, p)
	} else { // the directory holds gunzipped files: make the gzip ourselves
		gz = gzipBytes(t, raw)
	}
	fromFile, err := ReadIDXFile(p)
	if err != nil {
		t.Fatal(err)
	}
	fromRaw, err := ReadIDX(bytes.NewReader(raw), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	fromGz, err := ReadIDX(bytes.NewReader(gz), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromGz, fromRaw) || !reflect.DeepEqual(fromFile, fromRaw) {
		t.Fatalf("gzip and raw decode differ: dims %v vs %v", fromGz.Dims, fromRaw.Dims)
	}
	if !reflect.DeepEqual(fromRaw.Dims, []int{10000}) || fromRaw.Data[0] != 7 {
		t.Fatalf("dims %v, first label %d; want [10000] and 7", fromRaw.Dims, fromRaw.Data[0])
	}
	if enc := mustEncodeIDX(t, fromRaw); !bytes.Equal(enc, raw) {
		t.Fatal("EncodeIDX does not reproduce the raw file")
	}
}

func TestReadIDXSynthetic(t *testing.T) {
	x := &IDX{Dims: []int{2, 3, 4}, Data: make([]byte, 24)}
	for i := range x.Data {
		x.Data[i] = byte(i * 11)
	}
	raw := mustEncodeIDX(t, x)
	gz := gzipBytes(t, raw)
	for name, r := range map[string]io.Reader{
		"raw":          bytes.NewReader(raw),
		"gzip":         bytes.NewReader(gz),
		"raw-1byte":    iotest.OneByteReader(bytes.NewReader(raw)),
		"gzip-1byte":   iotest.OneByteReader(bytes.NewReader(gz)),
		"gzip-halves":  io.MultiReader(bytes.NewReader(gz[:len(gz)/2]), bytes.NewReader(gz[len(gz)/2:])),
		"raw-data-err": iotest.DataErrReader(bytes.NewReader(raw)),
	} {
		got, err := ReadIDX(r, 24)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, x) {
			t.Fatalf("%s: got %+v, want %+v", name, got, x)
		}
	}
}

func idxHeader(typ byte, dims ...uint32) []byte {
	b := []byte{0, 0, typ, byte(len(dims))}
	for _, d := range dims {
		b = append(b, byte(d>>24), byte(d>>16), byte(d>>8), byte(d))
	}
	return b
}

func TestReadIDXErrors(t *testing.T) {
	valid := mustEncodeIDX(t, &IDX{Dims: []int{2, 2, 2}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}})
	gz := gzipBytes(t, valid)
	badCRC := bytes.Clone(gz)
	badCRC[len(badCRC)-8] ^= 0xff // gzip trailer: CRC-32, then size
	cases := []struct {
		name    string
		in      []byte
		max     int64
		want    error
		message []string // substrings the message must contain
	}{
		{"empty", nil, 1 << 20, ErrIDXMagic, []string{"empty"}},
		{"truncated header", valid[:3], 1 << 20, ErrIDXTruncated, []string{"header", "got 3"}},
		{"truncated dims", valid[:9], 1 << 20, ErrIDXTruncated, []string{"12 bytes of dimension sizes", "got 5"}},
		{"truncated data", valid[:len(valid)-3], 1 << 20, ErrIDXTruncated, []string{"promise 8 data bytes, got 5", "[2 2 2]"}},
		{"truncated gzip", gz[:len(gz)-12], 1 << 20, ErrIDXTruncated, []string{"incomplete"}},
		{"gzip checksum", badCRC, 1 << 20, ErrIDXGzip, []string{"checksum", "damaged"}},
		{"trailing", append(bytes.Clone(valid), 0), 1 << 20, ErrIDXTrailing, []string{"8 data bytes", "[2 2 2]"}},
		{"bad magic", []byte("<html><body>404</body></html>"), 1 << 20, ErrIDXMagic, []string{"0x3c 0x68", "want 0x00 0x00"}},
		{"too many dims", idxHeader(0x08, 1, 1, 1, 1, 1), 1 << 20, ErrIDXTooManyDims, []string{"5 dimensions", "at most 4"}},
		{"zero dims", idxHeader(0x08), 1 << 20, ErrIDXDims, []string{"0 dimensions"}},
		{"zero dim", idxHeader(0x08, 3, 0), 1 << 20, ErrIDXDims, []string{"dimension 1 is 0"}},
		{"float type", idxHeader(0x0D, 1), 1 << 20, ErrIDXType, []string{"0x0d", "float32", "only 0x08"}},
		{"int type", idxHeader(0x0C, 1), 1 << 20, ErrIDXType, []string{"int32"}},
		{"over maxBytes", idxHeader(0x08, 1000, 1000), 999_999, ErrIDXTooLarge, []string{"[1000 1000]", "999999"}},
		{"int64 overflow", idxHeader(0x08, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff), 1 << 62, ErrIDXTooLarge, []string{"4294967295"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x, err := ReadIDX(bytes.NewReader(c.in), c.max)
			if err == nil {
				t.Fatalf("got %+v, want error", x)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("error %q does not wrap %q", err, c.want)
			}
			for _, s := range c.message {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	if _, err := ReadIDX(bytes.NewReader(valid), 0); err == nil || !strings.Contains(err.Error(), "maxBytes") {
		t.Errorf("maxBytes 0: got %v, want an error about maxBytes", err)
	}
}

// A header that claims a lot of data must not make ReadIDX allocate it
// before the data arrives: a tiny (gzip) file would otherwise be a memory
// bomb on the coordinator.
func TestReadIDXDoesNotTrustHeaderSize(t *testing.T) {
	claim := idxHeader(0x08, 1<<14, 1<<14, 1) // 256 MiB of data, none sent
	for name, in := range map[string][]byte{"raw": claim, "gzip": gzipBytes(t, claim)} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := ReadIDX(bytes.NewReader(in), 1<<30)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrIDXTruncated) || !strings.Contains(err.Error(), "promise 268435456 data bytes, got 0") {
			t.Fatalf("%s: err = %v, want truncation naming expected and got", name, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
			t.Errorf("%s: allocated %d bytes for a header-only file", name, alloc)
		}
	}
}

func TestReadIDXFileErrorsNamePath(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope-idx1-ubyte")
	if _, err := ReadIDXFile(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: err = %v, want it to name %s", err, missing)
	}
	bad := filepath.Join(dir, "bad-idx1-ubyte")
	writeFile(t, bad, []byte("not idx"))
	if _, err := ReadIDXFile(bad); !errors.Is(err, ErrIDXMagic) || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad file: err = %v, want ErrIDXMagic naming %s", err, bad)
	}
}

func TestEncodeIDXRejects(t *testing.T) {
	for _, x := range []*IDX{
		{},
		{Dims: []int{1, 1, 1, 1, 1}, Data: []byte{1}},
		{Dims: []int{0}, Data: nil},
		{Dims: []int{2}, Data: []byte{1}},
		{Dims: []int{2}, Data: []byte{1, 2, 3}},
		{Dims: []int{math.MaxInt, math.MaxInt}, Data: []byte{1}},
	} {
		if _, err := EncodeIDX(x); err == nil {
			t.Errorf("EncodeIDX(%v dims, %d bytes) = nil error", x.Dims, len(x.Data))
		}
	}
}

func TestLoadIDXPairMismatches(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	lab := filepath.Join(dir, "lab")
	lab2 := filepath.Join(dir, "lab2")
	writeFile(t, img, mustEncodeIDX(t, &IDX{Dims: []int{3, 2, 2}, Data: make([]byte, 12)}))
	writeFile(t, lab, mustEncodeIDX(t, &IDX{Dims: []int{2}, Data: []byte{0, 1}}))
	writeFile(t, lab2, mustEncodeIDX(t, &IDX{Dims: []int{3}, Data: []byte{0, 1, 0}}))

	if _, err := LoadIDXPair("x", img, lab); err == nil || !strings.Contains(err.Error(), "3 images") || !strings.Contains(err.Error(), "2 labels") {
		t.Errorf("count mismatch: err = %v", err)
	}
	if _, err := LoadIDXPair("x", lab2, img); err == nil || !strings.Contains(err.Error(), "labels file?") {
		t.Errorf("swapped files: err = %v", err)
	}
	s, err := LoadIDXPair("x", img, lab2)
	if err != nil {
		t.Fatal(err)
	}
	if s.N != 3 || !slices.Equal(s.Shape, []int{1, 2, 2}) || s.Classes != 2 {
		t.Errorf("got %+v; Classes must be at least 2 even when labels are only 0 and 1", s)
	}
}
