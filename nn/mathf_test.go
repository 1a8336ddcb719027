package nn

import (
	"math"
	"testing"
)

func TestExpf32(t *testing.T) {
	worst := 0.0
	for x := -87.0; x < 88; x += 0.001237 {
		got, want := float64(expf32(float32(x))), math.Exp(float64(float32(x)))
		worst = max(worst, math.Abs(got-want)/want)
	}
	t.Logf("worst relative error %.3g", worst)
	if worst > 3e-7 {
		t.Errorf("expf32: worst relative error %.3g, want < 3e-7", worst)
	}
	if expf32(-100) != 0 || !math.IsInf(float64(expf32(100)), 1) || expf32(0) != 1 {
		t.Errorf("expf32 edges: %v %v %v", expf32(-100), expf32(100), expf32(0))
	}
}

func TestNormCDF(t *testing.T) {
	var worstC, worstP float64
	for x := -12.0; x < 12; x += 0.000913 {
		c, p := normCDF(float32(x))
		x64 := float64(float32(x))
		wantC := 0.5 * math.Erfc(-x64/math.Sqrt2)
		wantP := math.Exp(-x64*x64/2) / math.Sqrt(2*math.Pi)
		worstC = max(worstC, math.Abs(float64(c)-wantC))
		worstP = max(worstP, math.Abs(float64(p)-wantP))
	}
	t.Logf("worst absolute error: cdf %.3g, pdf %.3g", worstC, worstP)
	if worstC > 3e-7 || worstP > 2e-7 {
		t.Errorf("normCDF: worst absolute errors cdf %.3g, pdf %.3g; want < 3e-7, 2e-7", worstC, worstP)
	}
}
