package protocol

import (
	"encoding/binary"
	"math"
)

// IEEE-754 binary16 ("half") conversion, for the f16 update codec and
// f16 snapshots. Go has no float16 type; these are the bit-exact
// conversions every peer must agree on.

// MaxHalf is the largest finite half: 65504.
const MaxHalf = 65504

// HalfFromFloat32 rounds f to the nearest half, ties to even. A finite
// value beyond ±65504 (after rounding) becomes ±Inf, NaN stays NaN: a
// sender that must not produce Inf clamps first (ClampHalf).
func HalfFromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp == 0 && mant == 0:
		return sign
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00 // overflow
	}
	if e <= 0 {
		// Subnormal half (or zero): shift the implicit 1 in.
		if e < -10 {
			return sign // underflows to ±0
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, up to Inf: correct rounding
	}
	return sign | uint16(h)
}

// Float32FromHalf is the exact float32 of half h.
func Float32FromHalf(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: normalise.
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// ClampHalf bounds f to the finite half range, so that HalfFromFloat32
// never makes Inf of a finite value.
func ClampHalf(f float32) float32 { return max(-MaxHalf, min(MaxHalf, f)) }

// putHalves writes src as halves into dst (2 bytes each, little-endian),
// each clamped to the finite half range first (ClampHalf), rounded to
// nearest even: with F16C where the CPU has it, bit for bit what the Go
// conversion gives (TestHalvesAgreeWithTheGoConversion).
func putHalves(dst []byte, src []float32) {
	n := 0
	if useF16C {
		if n = len(src) &^ 7; n > 0 && !f16cEncode(dst[:2*n], src[:n]) {
			n = 0 // a NaN: the Go loop writes its canonical bits
		}
	}
	for i := n; i < len(src); i++ {
		binary.LittleEndian.PutUint16(dst[2*i:], HalfFromFloat32(ClampHalf(src[i])))
	}
}

// getHalves decodes the halves of src into dst and returns the index of
// the first one that is Inf or NaN, or -1 when all are finite (dst then
// holds them all).
func getHalves(dst []float32, src []byte) int {
	n := 0
	if useF16C {
		if n = len(dst) &^ 7; n > 0 && !f16cDecode(dst[:n], src[:2*n]) {
			n = 0 // find which in Go
		}
	}
	for i := n; i < len(dst); i++ {
		h := binary.LittleEndian.Uint16(src[2*i:])
		if h&0x7c00 == 0x7c00 {
			return i
		}
		dst[i] = Float32FromHalf(h)
	}
	return -1
}
