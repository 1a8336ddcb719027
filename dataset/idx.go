package dataset

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// IDX errors, for errors.Is. The returned error wraps one of these and says
// more (sizes, what to do).
var (
	ErrIDXMagic       = errors.New("not an IDX file")
	ErrIDXType        = errors.New("unsupported IDX element type")
	ErrIDXDims        = errors.New("bad IDX dimensions")
	ErrIDXTooManyDims = errors.New("too many IDX dimensions")
	ErrIDXTooLarge    = errors.New("IDX data too large")
	ErrIDXTruncated   = errors.New("IDX file truncated")
	ErrIDXTrailing    = errors.New("IDX file has trailing bytes")
	ErrIDXGzip        = errors.New("corrupt gzip stream")
)

// IDXMaxDims is the most dimensions ReadIDX accepts; MNIST uses 3 (images)
// and 1 (labels).
const IDXMaxDims = 4

// IDXFileMaxBytes is the data limit ReadIDXFile applies (1 GiB; MNIST train
// images are 47 MB).
const IDXFileMaxBytes = 1 << 30

const idxTypeUByte = 0x08

// IDX is a decoded IDX file (http://yann.lecun.com/exdb/mnist/ format). Only
// the unsigned-byte element type (0x08) is supported; others get an error
// saying so.
type IDX struct {
	Dims []int
	Data []byte
}

// idxTypeName names the IDX element types so the "unsupported" error says
// what the file holds.
func idxTypeName(t byte) string {
	switch t {
	case 0x08:
		return "unsigned byte"
	case 0x09:
		return "signed byte"
	case 0x0B:
		return "int16"
	case 0x0C:
		return "int32"
	case 0x0D:
		return "float32"
	case 0x0E:
		return "float64"
	}
	return "unknown"
}

// ReadIDX reads an IDX stream, raw or gzip (detected by the 0x1f 0x8b magic).
// It checks the header before allocating: at most 4 dims, each >= 1, total
// size <= maxBytes (error otherwise), and that the data is complete
// (truncated → error naming expected vs got). Bytes after the data are an
// error too: they mean the file is not what the header says (and reading to
// the end is what makes gzip verify its checksum).
func ReadIDX(r io.Reader, maxBytes int64) (*IDX, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("idx: maxBytes is %d; it must be positive", maxBytes)
	}
	maxBytes = min(maxBytes, math.MaxInt) // so int(total) fits on 32-bit targets
	br := bufio.NewReader(r)
	peek, err := br.Peek(2)
	if len(peek) == 0 {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("idx: %w: the input is empty", ErrIDXMagic)
		}
		return nil, fmt.Errorf("idx: reading: %w", err)
	}
	var src io.Reader = br
	gz := len(peek) == 2 && peek[0] == 0x1f && peek[1] == 0x8b
	if gz {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, gzipErr("gzip header", err)
		}
		src = zr
	}
	rd := func(what string, err error) error {
		if gz { // a short or damaged gzip stream, possibly in its trailer
			return gzipErr(what, err)
		}
		return fmt.Errorf("idx: reading %s: %w", what, err)
	}

	var head [4]byte
	if n, err := io.ReadFull(src, head[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("idx: %w: header needs 4 magic bytes, got %d; the file is incomplete, fetch it again", ErrIDXTruncated, n)
		}
		return nil, rd("header", err)
	}
	if head[0] != 0 || head[1] != 0 {
		return nil, fmt.Errorf("idx: %w: magic starts 0x%02x 0x%02x, want 0x00 0x00 (is it an HTML page or another format? use the MNIST *-idx?-ubyte[.gz] files)",
			ErrIDXMagic, head[0], head[1])
	}
	if head[2] != idxTypeUByte {
		return nil, fmt.Errorf("idx: %w: 0x%02x (%s); only 0x08 (unsigned byte) is supported",
			ErrIDXType, head[2], idxTypeName(head[2]))
	}
	nd := int(head[3])
	if nd == 0 {
		return nil, fmt.Errorf("idx: %w: the header declares 0 dimensions; need 1 to %d", ErrIDXDims, IDXMaxDims)
	}
	if nd > IDXMaxDims {
		return nil, fmt.Errorf("idx: %w: the header declares %d dimensions; at most %d are supported", ErrIDXTooManyDims, nd, IDXMaxDims)
	}
	var db [4 * IDXMaxDims]byte
	if n, err := io.ReadFull(src, db[:4*nd]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("idx: %w: header needs %d bytes of dimension sizes, got %d; the file is incomplete, fetch it again", ErrIDXTruncated, 4*nd, n)
		}
		return nil, rd("dimensions", err)
	}
	dims := make([]int, nd)
	total := int64(1)
	for i := range dims {
		d := int64(binary.BigEndian.Uint32(db[4*i:]))
		if d == 0 {
			return nil, fmt.Errorf("idx: %w: dimension %d is 0; every dimension must be >= 1", ErrIDXDims, i)
		}
		// Divide before multiplying: 4 dims of up to 2^32-1 overflow int64.
		if d > maxBytes/total {
			return nil, fmt.Errorf("idx: %w: dimensions %v need more than the limit of %d bytes; the file is corrupt, or raise the limit if it is really that big",
				ErrIDXTooLarge, idxDimsString(db[:4*nd]), maxBytes)
		}
		total *= d
		dims[i] = int(d)
	}

	data, got, err := readUpTo(src, int(total))
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("idx: %w: dimensions %v promise %d data bytes, got %d; the file is incomplete, fetch it again",
				ErrIDXTruncated, dims, total, got)
		}
		return nil, rd("data", err)
	}
	var one [1]byte
	switch n, err := io.ReadFull(src, one[:]); {
	case n > 0:
		return nil, fmt.Errorf("idx: %w after the %d data bytes that dimensions %v describe; the header does not match the file",
			ErrIDXTrailing, total, dims)
	case errors.Is(err, io.EOF):
	default:
		return nil, rd("past the data", err)
	}
	return &IDX{Dims: dims, Data: data}, nil
}

func gzipErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("idx: %w: gzip stream ends early (reading %s); the file is incomplete, fetch it again", ErrIDXTruncated, what)
	}
	return fmt.Errorf("idx: %w (%w) reading %s; the file is damaged, fetch it again", ErrIDXGzip, err, what)
}

// idxDimsString formats raw big-endian dims for errors before they are
// known to fit in int.
func idxDimsString(b []byte) string {
	s := "["
	for i := 0; i+4 <= len(b); i += 4 {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprint(binary.BigEndian.Uint32(b[i:]))
	}
	return s + "]"
}

// readChunk is the first allocation readUpTo makes; it then doubles. A
// header that lies about the size costs at most twice the bytes actually
// sent, not the size it claims (a 40-byte gzip must not allocate 1 GiB).
const readChunk = 1 << 20

// readUpTo reads exactly n bytes, growing its buffer as data arrives. On
// error it reports how many bytes it got.
func readUpTo(r io.Reader, n int) ([]byte, int, error) {
	buf := make([]byte, min(n, readChunk))
	got, err := io.ReadFull(r, buf)
	for err == nil && len(buf) < n {
		old := len(buf)
		size := min(n, 2*old)
		buf = slices.Grow(buf, size-old)[:size]
		var m int
		m, err = io.ReadFull(r, buf[old:])
		got += m
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // EOF at a chunk boundary is still short
		}
		return nil, got, err
	}
	return buf[:n:n], n, nil
}

// ReadIDXFile reads an IDX file (raw or gzip) with a 1 GiB data limit.
// Errors include the path.
func ReadIDXFile(path string) (*IDX, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err) // *PathError names the path
	}
	defer f.Close()
	x, err := ReadIDX(f, IDXFileMaxBytes)
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", path, err)
	}
	return x, nil
}

// EncodeIDX returns x as a raw (uncompressed) unsigned-byte IDX file. It
// errors if Dims has 0 or more than 4 entries, any dim is outside
// 1..2^32-1, or len(Data) is not their product.
func EncodeIDX(x *IDX) ([]byte, error) {
	if len(x.Dims) == 0 || len(x.Dims) > IDXMaxDims {
		return nil, fmt.Errorf("dataset: EncodeIDX: %d dims; need 1 to %d", len(x.Dims), IDXMaxDims)
	}
	total := 1
	for i, d := range x.Dims {
		if d < 1 || uint64(d) > math.MaxUint32 {
			return nil, fmt.Errorf("dataset: EncodeIDX: dim %d is %d; need 1..%d", i, d, uint32(math.MaxUint32))
		}
		if d > len(x.Data)/total {
			return nil, fmt.Errorf("dataset: EncodeIDX: dims %v need more than the %d data bytes given", x.Dims, len(x.Data))
		}
		total *= d
	}
	if total != len(x.Data) {
		return nil, fmt.Errorf("dataset: EncodeIDX: dims %v need %d data bytes, have %d", x.Dims, total, len(x.Data))
	}
	b := make([]byte, 4+4*len(x.Dims), 4+4*len(x.Dims)+len(x.Data))
	b[2], b[3] = idxTypeUByte, byte(len(x.Dims))
	for i, d := range x.Dims {
		binary.BigEndian.PutUint32(b[4+4*i:], uint32(d))
	}
	return append(b, x.Data...), nil
}
