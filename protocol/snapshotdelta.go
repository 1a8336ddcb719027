package protocol

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Snapshot deltas: the bytes that turn a held snapshot body into a newer
// one of the same codec, bit for bit (docs/PROTOCOL.md, "Snapshot deltas").
//
//	offset size
//	0      4    magic "CTDL"
//	4      1    format version, 1
//	5      1    kind: DeltaXOR (1) or DeltaFull (2)
//	6      1    element size: 4 (f32 body) or 2 (f16 body)
//	7      1    reserved, 0
//	8      4    body length in bytes, little-endian uint32
//	12     ...  raw DEFLATE (RFC 1951) of the planes
//
// The planes are the XOR of the two bodies (DeltaXOR), or the new body
// itself (DeltaFull), with its bytes transposed: byte 0 of every element,
// then byte 1 of every element, and so on. A training step moves the low
// mantissa bits and leaves sign, exponent and high mantissa mostly alone,
// so the XOR's high planes are long runs of zeros that DEFLATE shrinks.

const (
	// DeltaXOR: the planes are held XOR new; the held body must have the
	// stated length.
	DeltaXOR = 1
	// DeltaFull: the planes are the new body; nothing held is read. A
	// coordinator sends it when an XOR delta would not be smaller.
	DeltaFull = 2

	deltaVersion    = 1
	deltaHeaderSize = 12
	// DeltaLevel is the DEFLATE level deltas are compressed at. On
	// mnist-mlp bodies BestSpeed gives nearly the size of the default
	// level in a fraction of the time (TestDeltaSizes reports both).
	DeltaLevel = flate.BestSpeed
)

var deltaMagic = [4]byte{'C', 'T', 'D', 'L'}

// ErrDelta is wrapped by every error ApplyDelta returns for bad input.
var ErrDelta = errors.New("bad snapshot delta")

// EncodeDelta appends to dst the delta that turns the body from into the
// body to, both of elements of elemSize bytes (4 for f32, 2 for f16). It
// is an XOR delta unless that would not be smaller than the body itself,
// or from is nil: then it carries the full body, compressed, if that is
// smaller.
func EncodeDelta(dst []byte, from, to []byte, elemSize int) ([]byte, error) {
	return encodeDelta(dst, from, to, elemSize, DeltaLevel)
}

func encodeDelta(dst []byte, from, to []byte, elemSize, level int) ([]byte, error) {
	if elemSize != 2 && elemSize != 4 {
		return nil, fmt.Errorf("snapshot delta: element size %d, want 2 or 4", elemSize)
	}
	if len(to)%elemSize != 0 {
		return nil, fmt.Errorf("snapshot delta: body of %d bytes is not a whole number of %d-byte elements", len(to), elemSize)
	}
	if uint64(len(to)) > 1<<32-1 {
		return nil, fmt.Errorf("snapshot delta: body of %d bytes is too large", len(to))
	}
	if from != nil && len(from) != len(to) {
		return nil, fmt.Errorf("snapshot delta: bodies of %d and %d bytes", len(from), len(to))
	}
	planes := make([]byte, len(to))
	kind := byte(DeltaXOR)
	var payload []byte
	if from != nil {
		transpose(planes, to, from, elemSize)
		var err error
		if payload, err = deflateBody(planes, level); err != nil {
			return nil, err
		}
	}
	// The alternative to a delta is the full body as the snapshot URL
	// serves it, uncompressed: an XOR delta no smaller than that is
	// replaced by the body compressed on its own.
	if from == nil || len(payload) >= len(to) {
		transpose(planes, to, nil, elemSize)
		full, err := deflateBody(planes, level)
		if err != nil {
			return nil, err
		}
		if payload == nil || len(full) < len(payload) {
			kind, payload = DeltaFull, full
		}
	}
	dst = append(dst, deltaMagic[:]...)
	dst = append(dst, deltaVersion, kind, byte(elemSize), 0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(to)))
	return append(dst, payload...), nil
}

// transpose writes body (XOR mask, when mask is not nil) into planes,
// byte p of element i at p*n+i.
func transpose(planes, body, mask []byte, es int) {
	n := len(body) / es
	for i := range n {
		for p := range es {
			b := body[i*es+p]
			if mask != nil {
				b ^= mask[i*es+p]
			}
			planes[p*n+i] = b
		}
	}
}

// deltaWriters keeps DEFLATE writers at DeltaLevel: a writer holds
// hundreds of KB of tables, and a coordinator makes a delta per lease.
var deltaWriters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(io.Discard, DeltaLevel)
	return w
}}

func deflateBody(b []byte, level int) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(b)/2 + 64)
	var w *flate.Writer
	if level == DeltaLevel {
		w = deltaWriters.Get().(*flate.Writer)
		defer deltaWriters.Put(w)
		w.Reset(&buf)
	} else {
		var err error
		if w, err = flate.NewWriter(&buf, level); err != nil {
			return nil, err
		}
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DeltaHeader is the fixed part of a delta.
type DeltaHeader struct {
	Kind     int
	ElemSize int
	Length   int // bytes of the body the delta makes
}

// ParseDeltaHeader checks a delta's fixed header.
func ParseDeltaHeader(delta []byte) (DeltaHeader, error) {
	if len(delta) < deltaHeaderSize {
		return DeltaHeader{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrDelta, len(delta), deltaHeaderSize)
	}
	if !bytes.Equal(delta[:4], deltaMagic[:]) {
		return DeltaHeader{}, fmt.Errorf("%w: magic %q, want %q", ErrDelta, delta[:4], deltaMagic[:])
	}
	if delta[4] != deltaVersion {
		return DeltaHeader{}, fmt.Errorf("%w: format version %d, this reader knows %d", ErrDelta, delta[4], deltaVersion)
	}
	h := DeltaHeader{Kind: int(delta[5]), ElemSize: int(delta[6]), Length: int(binary.LittleEndian.Uint32(delta[8:]))}
	if h.Kind != DeltaXOR && h.Kind != DeltaFull {
		return DeltaHeader{}, fmt.Errorf("%w: kind %d, want %d (xor) or %d (full)", ErrDelta, h.Kind, DeltaXOR, DeltaFull)
	}
	if h.ElemSize != 2 && h.ElemSize != 4 {
		return DeltaHeader{}, fmt.Errorf("%w: element size %d, want 2 or 4", ErrDelta, h.ElemSize)
	}
	if delta[7] != 0 {
		return DeltaHeader{}, fmt.Errorf("%w: reserved byte is %d, want 0", ErrDelta, delta[7])
	}
	if h.Length%h.ElemSize != 0 {
		return DeltaHeader{}, fmt.Errorf("%w: length %d is not a whole number of %d-byte elements", ErrDelta, h.Length, h.ElemSize)
	}
	return h, nil
}

// DeltaDecoder applies deltas, reusing its decompressor and buffers: once
// warm, Apply allocates no buffer of the body's size (compress/flate still
// makes small Huffman tables per block). The zero value is ready; it is
// not safe for concurrent use.
type DeltaDecoder struct {
	src    bytes.Reader
	fr     io.ReadCloser
	planes []byte
}

// ApplyDelta is DeltaDecoder.Apply with a fresh decoder.
func ApplyDelta(dst []byte, held []byte, delta []byte, maxBody int) ([]byte, error) {
	var d DeltaDecoder
	return d.Apply(dst, held, delta, maxBody)
}

// Apply writes into dst (reused when large enough) the body delta makes
// from held, and returns it. held and dst must not overlap. It rejects a
// delta whose header is wrong, whose XOR length is not len(held), whose
// body would exceed maxBody bytes, whose compressed data would inflate to
// more or fewer bytes than stated (it never inflates past the stated
// length), or that has bytes after its compressed stream.
func (d *DeltaDecoder) Apply(dst []byte, held []byte, delta []byte, maxBody int) ([]byte, error) {
	h, err := ParseDeltaHeader(delta)
	if err != nil {
		return nil, err
	}
	if h.Length > maxBody {
		return nil, fmt.Errorf("%w: body of %d bytes, at most %d allowed", ErrDelta, h.Length, maxBody)
	}
	if h.Kind == DeltaXOR && h.Length != len(held) {
		return nil, fmt.Errorf("%w: xor delta against a %d-byte body, the held one has %d", ErrDelta, h.Length, len(held))
	}
	d.src.Reset(delta[deltaHeaderSize:])
	if d.fr == nil {
		d.fr = flate.NewReader(&d.src)
	} else if err := d.fr.(flate.Resetter).Reset(&d.src, nil); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDelta, err)
	}
	if cap(d.planes) < h.Length {
		d.planes = make([]byte, h.Length)
	}
	planes := d.planes[:h.Length]
	if _, err := io.ReadFull(d.fr, planes); err != nil {
		return nil, fmt.Errorf("%w: compressed data ends before %d bytes: %v", ErrDelta, h.Length, err)
	}
	var probe [1]byte
	if n, err := d.fr.Read(probe[:]); n != 0 || err != io.EOF {
		if n != 0 {
			return nil, fmt.Errorf("%w: compressed data inflates past the stated %d bytes", ErrDelta, h.Length)
		}
		return nil, fmt.Errorf("%w: compressed data after %d bytes: %v", ErrDelta, h.Length, err)
	}
	if d.src.Len() != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the compressed data", ErrDelta, d.src.Len())
	}
	if cap(dst) < h.Length {
		dst = make([]byte, h.Length)
	}
	dst = dst[:h.Length]
	es, n := h.ElemSize, h.Length/h.ElemSize
	for p := range es {
		plane := planes[p*n : (p+1)*n]
		if h.Kind == DeltaXOR {
			for i, b := range plane {
				dst[i*es+p] = held[i*es+p] ^ b
			}
		} else {
			for i, b := range plane {
				dst[i*es+p] = b
			}
		}
	}
	return dst, nil
}

// EncodeDeltaLevel is EncodeDelta at another DEFLATE level, to measure.
func EncodeDeltaLevel(dst []byte, from, to []byte, elemSize, level int) ([]byte, error) {
	return encodeDelta(dst, from, to, elemSize, level)
}
