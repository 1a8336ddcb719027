package engine

import (
	"math"
	"testing"
)

// TestFiniteFindsNaNAndInfAnywhere puts each non-finite value at every
// position of vectors whose lengths cover the four-lane body and the
// tail, among the extreme finite values.
func TestFiniteFindsNaNAndInfAnywhere(t *testing.T) {
	finite := []float32{0, float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32,
		math.SmallestNonzeroFloat32, 1, -1e-30}
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for n := 1; n <= 11; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = finite[i%len(finite)]
		}
		if !Finite(x) {
			t.Fatalf("Finite(%v) = false; every value is finite", x)
		}
		for i := range x {
			for _, b := range bad {
				keep := x[i]
				x[i] = b
				if Finite(x) {
					t.Errorf("Finite of %d values with %v at %d = true", n, b, i)
				}
				x[i] = keep
			}
		}
	}
	if !Finite(nil) {
		t.Error("Finite(nil) = false")
	}
}
