package protocol

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"
)

// Every half converts to float32 and back to itself, and rounding a
// float32 lands on the nearest half (ties to even).
func TestHalfRoundTripsEveryValue(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := Float32FromHalf(uint16(h))
		back := HalfFromFloat32(f)
		if math.IsNaN(float64(f)) {
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN half %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("half %#04x -> %v -> %#04x", h, f, back)
		}
	}
}

func TestHalfRounding(t *testing.T) {
	cases := []struct {
		in   float32
		want float32
	}{
		{1, 1},
		{1 + 1.0/2048, 1},            // a tie: to even (1)
		{1 + 3.0/2048, 1 + 2.0/1024}, // a tie: to even (1+2/1024)
		{1 + 1.0/2048 + 1.0/65536, 1 + 1.0/1024},
		{65504, 65504},
		{65519, 65504},                        // rounds down to max
		{-3e-8, -float32(math.Ldexp(1, -24))}, // nearest subnormal... rounds to the smallest
		{1e-9, 0},
		{6.1035156e-05, 6.1035156e-05}, // smallest normal
	}
	for _, c := range cases {
		if got := Float32FromHalf(HalfFromFloat32(c.in)); got != c.want {
			t.Errorf("half(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if h := HalfFromFloat32(70000); h != 0x7c00 {
		t.Errorf("70000 -> %#04x, want +Inf", h)
	}
	if h := HalfFromFloat32(ClampHalf(70000)); Float32FromHalf(h) != 65504 {
		t.Errorf("clamped 70000 -> %v", Float32FromHalf(h))
	}
}

// The codecs' conversions (putHalves, getHalves: F16C where the CPU has
// it, else the Go loop) give bit for bit what HalfFromFloat32(ClampHalf)
// and Float32FromHalf give, one value at a time: every half, and float32
// bit patterns across the whole range (a stride through all 2^32, and
// the edges: zeros, subnormals, ties, the clamp, Inf, NaN), at every
// offset of a block of eight and in a tail.
func TestHalvesAgreeWithTheGoConversion(t *testing.T) {
	t.Logf("F16C: %v", useF16C)
	var bits []uint32
	for b := uint64(0); b < 1<<32; b += 4099 {
		bits = append(bits, uint32(b))
	}
	for _, f := range []float32{0, MaxHalf, MaxHalf + 8, MaxHalf + 16, 65520, 1e9, 5.9604645e-8, 2.9802322e-8, 2.9802326e-8, 6.1035156e-5, 1 + 1.0/2048, 1 + 3.0/2048} {
		bits = append(bits, math.Float32bits(f), math.Float32bits(-f))
	}
	bits = append(bits, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffc00001, 1, 0x807fffff)
	src := make([]float32, len(bits)+5) // a tail past the blocks of eight
	for i := range src {
		src[i] = math.Float32frombits(bits[i%len(bits)])
	}
	got := make([]byte, 2*len(src))
	putHalves(got, src)
	for i, f := range src {
		if h, want := binary.LittleEndian.Uint16(got[2*i:]), HalfFromFloat32(ClampHalf(f)); h != want {
			t.Fatalf("float32 %#08x (%v): %#04x, the Go conversion %#04x", math.Float32bits(f), f, h, want)
		}
	}
	// Without NaN (the fast path in every block), the same.
	finite := slices.DeleteFunc(slices.Clone(src), func(f float32) bool { return f != f })
	got = got[:2*len(finite)]
	putHalves(got, finite)
	for i, f := range finite {
		if h, want := binary.LittleEndian.Uint16(got[2*i:]), HalfFromFloat32(ClampHalf(f)); h != want {
			t.Fatalf("float32 %#08x (%v), no NaN in the run: %#04x, the Go conversion %#04x", math.Float32bits(f), f, h, want)
		}
	}

	var halves []byte
	for h := range 1 << 16 {
		if h&0x7c00 != 0x7c00 {
			halves = binary.LittleEndian.AppendUint16(halves, uint16(h))
		}
	}
	halves = append(halves, 0, 0x3c, 0, 0xbc) // a tail: 0, 1, -2
	dst := make([]float32, len(halves)/2)
	if i := getHalves(dst, halves); i >= 0 {
		t.Fatalf("every finite half: reported value %d as not finite", i)
	}
	for i, f := range dst {
		h := binary.LittleEndian.Uint16(halves[2*i:])
		if want := Float32FromHalf(h); math.Float32bits(f) != math.Float32bits(want) {
			t.Fatalf("half %#04x: %v, the Go conversion %v", h, f, want)
		}
	}
	for _, bad := range []int{0, 7, 8, 13, len(dst) - 1} {
		b := slices.Clone(halves)
		binary.LittleEndian.PutUint16(b[2*bad:], 0x7c00|uint16(bad&1)) // Inf, or a NaN
		if i := getHalves(dst, b); i != bad {
			t.Errorf("a non-finite half at %d: reported %d", bad, i)
		}
	}
}

func BenchmarkHalves(b *testing.B) {
	const n = 235146 // mnist-mlp
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i%1000-500) * 1e-3
	}
	buf := make([]byte, 2*n)
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			putHalves(buf, src)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			getHalves(src, buf)
		}
	})
}

// RoundBodyToHalves leaves each value of an f32 body as the f16 body of
// the same values decodes it, across blocks and a tail.
func TestRoundBodyToHalves(t *testing.T) {
	p := make([]float32, 2500)
	for i := range p {
		p[i] = float32(i-1250) * 0.0137
	}
	p[7], p[2400] = 1e6, -1e6 // clamped
	body := AppendFloats(nil, p)
	RoundBodyToHalves(body)
	for i, v := range p {
		want := Float32FromHalf(HalfFromFloat32(ClampHalf(v)))
		if got := math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:])); got != want {
			t.Fatalf("value %d (%v): %v, want %v", i, v, got, want)
		}
	}
}
