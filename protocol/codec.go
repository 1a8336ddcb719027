package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// Errors callers tell apart with errors.Is.
var (
	ErrTooBig      = errors.New("message too big")
	ErrVersion     = errors.New("protocol version mismatch")
	ErrUnknownType = errors.New("unknown message type")
	ErrMalformed   = errors.New("malformed message")
)

// Floats is a float32 vector that travels as one msgpack bin of
// little-endian float32s.
type Floats []float32

// FirstNonFinite returns the index of the first NaN or Inf, or -1.
//
// Every result, snapshot and published version passes through it, so it
// scans branch-free, two values to a 64-bit word: an exponent field e
// (bits 23..30 of a value) is all ones exactly for NaN and ±Inf, and then
// e + 1<<23 is the first value to set the value's bit 31, without a carry
// into the other value of the word. OR-ing that into four independent
// accumulators tests a block with one branch; a block that fails is
// scanned again value by value for the index.
func (f Floats) FirstNonFinite() int {
	const block = 1024
	for start := 0; start < len(f); start += block {
		chunk := f[start:min(start+block, len(f))]
		if !allFinite(chunk) {
			for i, v := range chunk {
				if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
					return start + i
				}
			}
		}
	}
	return -1
}

// allFinite reports whether chunk holds no NaN or Inf (FirstNonFinite).
func allFinite(chunk []float32) bool {
	const (
		exp  = 0x7f800000_7f800000
		one  = 0x00800000_00800000
		sign = 0x80000000_80000000
	)
	var acc uint32
	i := 0
	// Words are read from an 8-byte boundary: an odd start goes alone.
	if len(chunk) > 0 && uintptr(unsafe.Pointer(&chunk[0]))%8 != 0 {
		acc |= math.Float32bits(chunk[0])&0x7f800000 + 0x00800000
		i = 1
	}
	var a0, a1, a2, a3 uint64
	if words := (len(chunk) - i) / 2; words > 0 {
		w := unsafe.Slice((*uint64)(unsafe.Pointer(&chunk[i])), words)
		j := 0
		for ; j+4 <= len(w); j += 4 {
			a0 |= w[j]&exp + one
			a1 |= w[j+1]&exp + one
			a2 |= w[j+2]&exp + one
			a3 |= w[j+3]&exp + one
		}
		for ; j < len(w); j++ {
			a0 |= w[j]&exp + one
		}
		i += 2 * words
	}
	for ; i < len(chunk); i++ {
		acc |= math.Float32bits(chunk[i])&0x7f800000 + 0x00800000
	}
	return (a0|a1|a2|a3)&sign == 0 && acc&0x80000000 == 0
}

// Norm returns the L2 norm, accumulated in float64 so that no finite
// vector overflows (a float32 sum of squares of 1e20s would be +Inf).
func (f Floats) Norm() float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(f); i += 4 {
		a, b, c, d := float64(f[i]), float64(f[i+1]), float64(f[i+2]), float64(f[i+3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; i < len(f); i++ {
		s0 += float64(f[i]) * float64(f[i])
	}
	return math.Sqrt(s0 + s1 + s2 + s3)
}

// littleEndian is true on every platform we ship (amd64, arm64, wasm); the
// copy loops are the portable fallback.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

func floatBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// EncodeMsgpack writes f as bin.
func (f Floats) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeBytesLen(4 * len(f)); err != nil {
		return err
	}
	if littleEndian {
		_, err := e.Writer().Write(floatBytes(f))
		return err
	}
	var b [4]byte
	for _, v := range f {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
		if _, err := e.Writer().Write(b[:]); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack reads a bin written by EncodeMsgpack. The length is checked
// against the bytes actually left in the frame before allocating.
func (f *Floats) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := d.DecodeBytesLen()
	if err != nil {
		return err
	}
	if n < 0 {
		*f = nil
		return nil
	}
	if n%4 != 0 {
		return fmt.Errorf("%w: float32 vector of %d bytes is not a multiple of 4", ErrMalformed, n)
	}
	if r, ok := d.Buffered().(*bytes.Reader); !ok || n > r.Len() {
		return fmt.Errorf("%w: float32 vector claims %d bytes, more than the frame holds", ErrMalformed, n)
	}
	// Reuse f's storage when it is large enough (see Decoder).
	out := *f
	if cap(out) >= n/4 {
		out = out[:n/4]
	} else {
		out = make([]float32, n/4)
	}
	if err := d.ReadFull(floatBytes(out)); err != nil {
		return err
	}
	if !littleEndian {
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(floatBytes(out[i : i+1])))
		}
	}
	*f = out
	return nil
}

// Packed is an update in a codec other than CodecF32 (DecodeUpdate): one
// msgpack bin whose storage a Decoder reuses like a Floats'.
type Packed []byte

// DecodeMsgpack reads a bin, checking its length against the bytes left
// in the frame before allocating, and reusing p's storage.
func (p *Packed) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := d.DecodeBytesLen()
	if err != nil {
		return err
	}
	if n < 0 {
		*p = (*p)[:0]
		return nil
	}
	if r, ok := d.Buffered().(*bytes.Reader); !ok || n > r.Len() {
		return fmt.Errorf("%w: packed update claims %d bytes, more than the frame holds", ErrMalformed, n)
	}
	out := *p
	if cap(out) >= n {
		out = out[:n]
	} else {
		out = make([]byte, n)
	}
	if err := d.ReadFull(out); err != nil {
		return err
	}
	*p = out
	return nil
}

// EncodeMsgpack writes p as bin.
func (p Packed) EncodeMsgpack(e *msgpack.Encoder) error { return e.EncodeBytes(p) }

// Encode writes m as one frame: [Version, type, body].
func Encode(m Message) ([]byte, error) {
	return AppendEncode(nil, m)
}

// AppendEncode is Encode into dst's storage (from dst[:0]), so a sender
// that reuses its buffer allocates nothing per frame once it is large
// enough. The browser worker depends on that to keep its heap flat.
func AppendEncode(dst []byte, m Message) ([]byte, error) {
	buf := bytes.NewBuffer(dst[:0])
	if r, ok := m.(*Result); ok {
		buf.Grow(4*len(r.Update) + len(r.Packed) + 256)
	}
	enc := msgpack.NewEncoder(buf)
	if err := enc.EncodeArrayLen(3); err != nil {
		return nil, err
	}
	if err := enc.EncodeInt(Version); err != nil {
		return nil, err
	}
	if err := enc.EncodeString(string(m.MessageType())); err != nil {
		return nil, err
	}
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("failed to encode %s: %w", m.MessageType(), err)
	}
	return buf.Bytes(), nil
}

// Decoder decodes frames like Decode but keeps one float buffer across
// calls: a decoded Result's Update is valid only until the next Decode.
// A connection that handles each result before reading the next one
// allocates nothing per update this way. Not safe for concurrent use.
type Decoder struct {
	MaxBytes int
	// Bounds limit the frame's shape; zero fields take DefaultBounds'.
	Bounds Bounds
	floats Floats
	packed Packed
}

// Decode is Decode(b, d.MaxBytes) with buffer reuse and d.Bounds.
func (d *Decoder) Decode(b []byte) (Message, error) {
	m, err := decode(b, d.MaxBytes, d.Bounds, d.floats[:0], d.packed[:0])
	if r, ok := m.(*Result); ok {
		if cap(r.Update) > cap(d.floats) {
			d.floats = r.Update[:0]
		}
		if cap(r.Packed) > cap(d.packed) {
			d.packed = r.Packed[:0]
		}
	}
	return m, err
}

// Decode checks b's size against maxBytes and its shape against
// DefaultBounds (see CheckFrame), decodes one frame and validates
// its body. The returned message never aliases b. When the frame decodes
// but its body fails validation, Decode returns the message together with a
// *ValidationError, so a receiver can answer it (a rejected result is
// acknowledged, not ignored); it must not act on the message otherwise.
func Decode(b []byte, maxBytes int) (Message, error) {
	return decode(b, maxBytes, DefaultBounds, nil, nil)
}

func decode(b []byte, maxBytes int, bounds Bounds, floats Floats, packed Packed) (Message, error) {
	if len(b) > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooBig, len(b), maxBytes)
	}
	// Untrusted bytes reach msgpack/v5 only once their shape is known to
	// be bounded: its skipping of unknown keys recurses.
	if err := CheckFrame(b, bounds); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	n, err := dec.DecodeArrayLen()
	if err != nil || n != 3 {
		return nil, fmt.Errorf("%w: a frame is the array [version, type, body]", ErrMalformed)
	}
	v, err := dec.DecodeInt()
	if err != nil {
		return nil, fmt.Errorf("%w: version: %v", ErrMalformed, err)
	}
	if v != Version {
		return nil, fmt.Errorf("%w: peer speaks protocol %d, this side speaks %d: upgrade the older side", ErrVersion, v, Version)
	}
	t, err := dec.DecodeString()
	if err != nil {
		return nil, fmt.Errorf("%w: type: %v", ErrMalformed, err)
	}
	m := newMessage(Type(t))
	if m == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, truncate(t, 32))
	}
	if r, ok := m.(*Result); ok {
		r.Update, r.Packed = floats, packed
	}
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("%w: %s body: %v", ErrMalformed, t, err)
	}
	if res, ok := m.(*Result); ok {
		// A reused buffer the frame left empty (a rollout result's
		// update, a packed result's) decodes as absent, as without reuse.
		if len(res.Update) == 0 {
			res.Update = nil
		}
		if len(res.Packed) == 0 {
			res.Packed = nil
		}
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the %s body", ErrMalformed, r.Len(), t)
	}
	if err := m.Validate(); err != nil {
		return m, err
	}
	return m, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// EncodeFloats returns f as little-endian float32 bytes: the body of a
// snapshot resource.
func EncodeFloats(f []float32) []byte {
	return AppendFloats(make([]byte, 0, 4*len(f)), f)
}

// AppendFloats appends f to dst as little-endian float32 bytes; with room
// in dst it allocates nothing.
func AppendFloats(dst []byte, f []float32) []byte {
	if littleEndian {
		return append(dst, floatBytes(f)...)
	}
	for _, v := range f {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
	}
	return dst
}

// putFloats writes f into dst as little-endian float32 bytes.
func putFloats(dst []byte, f []float32) {
	if littleEndian {
		copy(dst, floatBytes(f))
		return
	}
	for i, v := range f {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

// AppendFiniteFloats is AppendFloats that also finds the first NaN or
// ±Inf of f (its index, or -1). It checks each block of f while the copy
// has it in cache, so the check costs no second pass over memory.
func AppendFiniteFloats(dst []byte, f []float32) ([]byte, int) {
	const block = 1024
	bad := -1
	for start := 0; start < len(f); start += block {
		chunk := f[start:min(start+block, len(f))]
		if bad < 0 {
			if i := Floats(chunk).FirstNonFinite(); i >= 0 {
				bad = start + i
			}
		}
		dst = AppendFloats(dst, chunk)
	}
	return dst, bad
}

// CopyFloats copies little-endian float32 bytes into dst, which must hold
// exactly len(b)/4 values, without checking them: for data this process
// wrote itself. Untrusted bytes go through DecodeFloatsInto.
func CopyFloats(dst []float32, b []byte) {
	if len(b) != 4*len(dst) {
		panic(fmt.Sprintf("protocol.CopyFloats: %d bytes for %d float32s", len(b), len(dst)))
	}
	if littleEndian {
		copy(floatBytes(dst), b)
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

// DecodeFloatsInto decodes a snapshot body into dst, which must have exactly
// the length the body holds; every value must be finite.
func DecodeFloatsInto(dst []float32, b []byte) error {
	if len(b) != 4*len(dst) {
		return fmt.Errorf("%w: snapshot of %d bytes, want %d (%d float32s)", ErrMalformed, len(b), 4*len(dst), len(dst))
	}
	CopyFloats(dst, b)
	if i := Floats(dst).FirstNonFinite(); i >= 0 {
		return fmt.Errorf("%w: snapshot value %d is %v", ErrMalformed, i, dst[i])
	}
	return nil
}
