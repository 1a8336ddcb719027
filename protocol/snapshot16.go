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
	putHalves(dst[n:], params)
	return dst
}

// DecodeHalvesInto decodes an f16 snapshot body into dst, which must have
// exactly the length the body holds; every value must be finite.
func DecodeHalvesInto(dst []float32, b []byte) error {
	if len(b) != 2*len(dst) {
		return fmt.Errorf("%w: f16 snapshot of %d bytes, want %d (%d halves)", ErrMalformed, len(b), 2*len(dst), len(dst))
	}
	if i := getHalves(dst, b); i >= 0 {
		return fmt.Errorf("%w: f16 snapshot value %d is not finite (bits %#04x)", ErrMalformed, i, binary.LittleEndian.Uint16(b[2*i:]))
	}
	return nil
}

// RoundBodyToHalves rounds every value of body, little-endian float32s
// that this process wrote and all finite, to the nearest half (clamped to
// its finite range) and back, in place: what a worker that reads the f16
// body of the same snapshot computes from.
func RoundBodyToHalves(body []byte) {
	const block = 1024
	var f [block]float32
	var h [2 * block]byte
	for start := 0; start < len(body); start += 4 * block {
		chunk := body[start:min(start+4*block, len(body))]
		p := f[:len(chunk)/4]
		CopyFloats(p, chunk)
		putHalves(h[:2*len(p)], p)
		getHalves(p, h[:2*len(p)])
		putFloats(chunk, p)
	}
}
