package nn

import "math"

// float32 elementary functions for the layers' elementwise passes (GELU,
// softmax). They are polynomial approximations accurate to a few units in
// the last place of float32, several times faster than going through
// float64 math, and written with an explicit float32 conversion around
// every product that feeds a sum: Go may fuse a*b+c into one FMA on some
// GOARCHes (arm64) and not on others (amd64, wasm), and a conversion
// forbids it, so every platform computes the same bits.

const (
	log2e32  = float32(math.Log2E)
	ln2Hi32  = float32(0.693145751953125)          // ln 2 to 16 bits: k*ln2Hi is exact
	ln2Lo32  = float32(1.42860682030941723212e-06) // ln 2 - ln2Hi
	roundMag = float32(12582912)                   // 1.5*2^23: x+roundMag-roundMag rounds x to an integer
)

// expf32 returns e^x for x in float32, with a relative error under 2e-7.
// Below -87 it returns 0, above 88 +Inf.
func expf32(x float32) float32 {
	if x < -87 {
		return 0
	}
	if x > 88 {
		return float32(math.Inf(1))
	}
	// x = k*ln2 + r with |r| <= ln2/2, k rounded to nearest.
	t := float32(x*log2e32) + roundMag
	k := int32(math.Float32bits(t)) - 0x4b400000
	kf := t - roundMag
	r := x - float32(kf*ln2Hi32)
	r -= float32(kf * ln2Lo32)
	// e^r by its Taylor series to r^7 (remainder < 6e-9 for |r| <= 0.35).
	p := float32(1.0 / 5040)
	p = float32(p*r) + 1.0/720
	p = float32(p*r) + 1.0/120
	p = float32(p*r) + 1.0/24
	p = float32(p*r) + 1.0/6
	p = float32(p*r) + 0.5
	p = float32(p*r) + 1
	p = float32(p*r) + 1
	return p * math.Float32frombits(uint32(k+127)<<23)
}

// normCDF returns Φ(x), the standard normal distribution function, and
// φ(x), its density: cubic Hermite interpolation between nodes every 1/32
// on [-8, 8] of both (whose derivatives φ and -x·φ are known), 0 or 1 and 0
// outside. The interpolation errs by under 1e-8; float32 rounding of the
// sums brings the absolute error to at most 3e-7. Twice as fast as
// computing an exponential.
func normCDF(x float32) (cdf, pdf float32) {
	u := float32(x*normStepsPerUnit) + normSpan*normStepsPerUnit
	if !(u >= 0 && u < 2*normSpan*normStepsPerUnit) { // NaN goes here too
		if x > 0 {
			return 1, 0
		}
		return 0, 0
	}
	i := int(u)
	f := u - float32(i)
	n := &normTable[i]
	// Hermite basis on [0, 1]; the derivative terms are scaled by the
	// step h.
	g := 1 - f
	f2, g2 := float32(f*f), float32(g*g)
	h00 := float32((1 + 2*f) * g2)
	h01 := float32((3 - 2*f) * f2)
	h10 := float32(f * g2)
	h11 := -float32(f2 * g)
	cdf = float32(h00*n.cdf) + float32(h01*n.cdf1) + float32(h10*n.hpdf) + float32(h11*n.hpdf1)
	pdf = float32(h00*n.pdf) + float32(h01*n.pdf1) + float32(h10*n.hdpdf) + float32(h11*n.hdpdf1)
	return cdf, pdf
}

const (
	normSpan         = 8  // the table covers [-normSpan, normSpan)
	normStepsPerUnit = 32 // nodes per unit
)

// normNode holds Φ, φ and h·φ, h·φ' at a node and at the next one, so one
// lookup reads one cache line.
type normNode struct {
	cdf, pdf, hpdf, hdpdf     float32
	cdf1, pdf1, hpdf1, hdpdf1 float32
}

var normTable = func() (t [2 * normSpan * normStepsPerUnit]normNode) {
	const h = 1.0 / normStepsPerUnit
	at := func(i int) (cdf, pdf, hpdf, hdpdf float32) {
		x := float64(i)*h - normSpan
		p := math.Exp(-x*x/2) / math.Sqrt(2*math.Pi)
		return float32(0.5 * math.Erfc(-x/math.Sqrt2)), float32(p), float32(h * p), float32(-h * x * p)
	}
	for i := range t {
		n := &t[i]
		n.cdf, n.pdf, n.hpdf, n.hdpdf = at(i)
		n.cdf1, n.pdf1, n.hpdf1, n.hdpdf1 = at(i + 1)
	}
	return t
}()
