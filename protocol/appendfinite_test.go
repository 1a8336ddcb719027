package protocol

import (
	"bytes"
	"math"
	"testing"
)

// TestAppendFiniteFloatsCopiesAndFindsTheFirstNonFinite: the bytes are
// AppendFloats', and the index is the first NaN or Inf's, across block
// boundaries, or -1.
func TestAppendFiniteFloatsCopiesAndFindsTheFirstNonFinite(t *testing.T) {
	f := make([]float32, 2500)
	for i := range f {
		f[i] = float32(i) * 0.25
	}
	prefix := []byte{7, 7}
	got, bad := AppendFiniteFloats(bytes.Clone(prefix), f)
	if want := AppendFloats(bytes.Clone(prefix), f); !bytes.Equal(got, want) || bad != -1 {
		t.Fatalf("finite input: equal bytes %v, index %d; want equal bytes and -1", bytes.Equal(got, want), bad)
	}
	for _, at := range []int{0, 1023, 1024, 2047, 2499} {
		for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			g := append([]float32(nil), f...)
			g[at] = v
			g[len(g)-1] = float32(math.NaN()) // a later one does not hide it
			got, bad := AppendFiniteFloats(nil, g)
			if bad != at {
				t.Errorf("%v at %d: index %d", v, at, bad)
			}
			if want := AppendFloats(nil, g); !bytes.Equal(got, want) {
				t.Errorf("%v at %d: the bytes differ from AppendFloats'", v, at)
			}
		}
	}
}
