package protocol

import (
	"math"
	"math/rand/v2"
	"testing"
)

// FuzzDecodeUpdate: DecodeUpdate never panics, and what it accepts is n
// finite values. The seeds (run by every `go test`) are valid encodings
// of each codec and the malformed cases.
func FuzzDecodeUpdate(f *testing.F) {
	r := rand.New(rand.NewPCG(13, 14))
	for ci, codec := range UpdateCodecs {
		for _, n := range []int{1, 4, 300} {
			u := randUpdate(r, n, 0.5)
			e := &UpdateEncoder{Codec: codec, TopKFraction: 0.1}
			b, err := e.Encode(nil, u, true)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(ci), uint16(n), b)
		}
	}
	for _, c := range malformedUpdates {
		for ci, codec := range UpdateCodecs {
			if codec == c.codec {
				f.Add(uint8(ci), uint16(4), c.packed)
			}
		}
	}
	f.Fuzz(func(t *testing.T, ci uint8, n16 uint16, packed []byte) {
		codec := UpdateCodecs[int(ci)%len(UpdateCodecs)]
		n := int(n16)
		dst := make([]float32, 0, 3) // too short for most: DecodeUpdate grows it
		out, err := DecodeUpdate(codec, packed, n, dst)
		slack := UpdateSlack(codec, packed)
		if math.IsNaN(slack) || slack < 0 {
			t.Fatalf("%s: slack %v", codec, slack)
		}
		if err != nil {
			return
		}
		if len(out) != n {
			t.Fatalf("%s: %d values decoded, want %d", codec, len(out), n)
		}
		for i, v := range out {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s: accepted value %d = %v", codec, i, v)
			}
		}
		if codec == CodecI8 && math.IsInf(slack, 0) {
			t.Fatalf("i8: an accepted update has slack %v", slack)
		}
	})
}
