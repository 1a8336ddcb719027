package protocol

import (
	"math"
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
