package nn

import "math"

// Elementwise math in float32 for the transformer's layers: the exact
// GELU x·Φ(x) with a rational erf, and exp, both far cheaper than
// float64's math.Erf and math.Exp. On amd64 with AVX-512 the GELU runs 16
// values at a time (kernel_math_amd64.s, the same formulas with fused
// multiply-adds, so the last bit may differ); elsewhere, and for the tail,
// the scalar functions below.

// erf32 is erf for float32 (absolute error under 5e-7): the input clamped
// to [-4, 4] (erf is ±1 in float32 beyond), then x·P(x²)/Q(x²) with the
// minimax coefficients Eigen uses for its float erf.
func erf32(x float32) float32 {
	x = min(max(x, -4), 4)
	x2 := x * x
	p := x2*-2.72614225801306e-10 + 2.77068142495902e-08
	p = x2*p + -2.10102402082508e-06
	p = x2*p + -5.69250639462346e-05
	p = x2*p + -7.34990630326855e-04
	p = x2*p + -2.95459980854025e-03
	p = x2*p + -1.60960333262415e-02
	p = x * p
	q := x2*-1.45660718464996e-05 + -2.13374055278905e-04
	q = x2*q + -1.68282697438203e-03
	q = x2*q + -7.37332916720468e-03
	q = x2*q + -1.42647390514189e-02
	return p / q
}

// exp32 is exp for float32 (relative error under 1e-7) for x <= 88.3
// (callers pass non-positive values: softmax, the GELU's gradient); below
// -87.3 it returns exp(-87.3), about 1e-38. Cephes' expf: x = n·ln2 + r,
// a degree-7 polynomial for e^r, times 2^n.
func exp32(x float32) float32 {
	x = min(max(x, -87.33654), 88.3762626647949)
	// n = floor(fx) without math.Floor (a function call below GOAMD64=v2).
	fx := x*1.44269504088896341 + 0.5
	n := float32(int32(fx))
	if n > fx {
		n--
	}
	x = x - n*0.693359375
	x = x - n*-2.12194440e-4
	z := x * x
	y := float32(1.9875691500e-4)
	y = y*x + 1.3981999507e-3
	y = y*x + 8.3334519073e-3
	y = y*x + 4.1665795894e-2
	y = y*x + 1.6666665459e-1
	y = y*x + 5.0000001201e-1
	y = y*z + x + 1
	return y * math.Float32frombits(uint32(int32(n)+127)<<23)
}

const (
	geluInvSqrt2   = 0.7071067811865476
	geluInvSqrt2Pi = 0.3989422804014327
)

// geluForward writes x·Φ(x) of each in to out.
func geluForward(in, out []float32) {
	out = out[:len(in)]
	i := 0
	switch {
	case mathAVX512:
		i = len(in) &^ 15
		geluFwd16(i, in, out)
	case mathAVX2:
		i = len(in) &^ 7
		geluFwd8(i, in, out)
	}
	for ; i < len(in); i++ {
		x := in[i]
		out[i] = x * (0.5 * (1 + erf32(x*geluInvSqrt2)))
	}
}

// geluBackward writes dOut·(Φ(x) + x·φ(x)) to dIn, x from in.
func geluBackward(in, dOut, dIn []float32) {
	dOut = dOut[:len(in)]
	dIn = dIn[:len(in)]
	i := 0
	switch {
	case mathAVX512:
		i = len(in) &^ 15
		geluBwd16(i, in, dOut, dIn)
	case mathAVX2:
		i = len(in) &^ 7
		geluBwd8(i, in, dOut, dIn)
	}
	for ; i < len(in); i++ {
		x := in[i]
		phi := 0.5 * (1 + erf32(x*geluInvSqrt2))
		d := (x*geluInvSqrt2Pi)*exp32(-(x*x)*0.5) + phi
		dIn[i] = dOut[i] * d
	}
}

// expSub replaces each x by exp32(x - m) (m at least the largest x, as in
// a softmax).
func expSub(x []float32, m float32) {
	i := 0
	switch {
	case mathAVX512:
		i = len(x) &^ 15
		expSub16(i, x, m)
	case mathAVX2:
		i = len(x) &^ 7
		expSub8(i, x, m)
	}
	for ; i < len(x); i++ {
		x[i] = exp32(x[i] - m)
	}
}
