package protocol

import (
	"encoding/binary"
	"fmt"
)

// f16 snapshots (SnapshotF16): the parameter vector as little-endian IEEE
// half floats, 2 bytes a parameter, in the layout of the f32 body.

// EncodeHalves appends params to dst as little-endian halves, each first
// clamped to ±MaxHalf (ClampHalf) so that a finite parameter never becomes
// Inf; with room in dst it allocates nothing.
func EncodeHalves(dst []byte, params []float32) []byte {
	n := len(dst)
	if cap(dst)-n < 2*len(params) {
		dst = append(make([]byte, 0, n+2*len(params)), dst...)
	}
	dst = dst[:n+2*len(params)]
	out := dst[n:]
	for i, v := range params {
		binary.LittleEndian.PutUint16(out[2*i:], HalfFromFloat32(ClampHalf(v)))
	}
	return dst
}

// DecodeHalvesInto decodes an f16 snapshot body into dst, which must have
// exactly the length the body holds; every value must be finite.
func DecodeHalvesInto(dst []float32, b []byte) error {
	if len(b) != 2*len(dst) {
		return fmt.Errorf("%w: f16 snapshot of %d bytes, want %d (%d halves)", ErrMalformed, len(b), 2*len(dst), len(dst))
	}
	for i := range dst {
		h := binary.LittleEndian.Uint16(b[2*i:])
		if h&0x7c00 == 0x7c00 {
			return fmt.Errorf("%w: f16 snapshot value %d is not finite (bits %#04x)", ErrMalformed, i, h)
		}
		dst[i] = Float32FromHalf(h)
	}
	return nil
}
