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
// φ(x), its density, with absolute errors under 3e-7 (Abramowitz and
// Stegun 7.1.26 for erfc, with expf32).
func normCDF(x float32) (cdf, pdf float32) {
	const (
		p  = 0.3275911
		a1 = 0.254829592
		a2 = -0.284496736
		a3 = 1.421413741
		a4 = -1.453152027
		a5 = 1.061405429
	)
	z := x * float32(1/math.Sqrt2)
	if z < 0 {
		z = -z
	}
	e := expf32(-float32(z * z))
	pdf = e * float32(1/math.Sqrt(2*math.Pi))
	t := 1 / (1 + float32(p*z))
	q := float32(a5)
	q = float32(q*t) + a4
	q = float32(q*t) + a3
	q = float32(q*t) + a2
	q = float32(q*t) + a1
	half := 0.5 * float32(float32(q*t)*e) // erfc(|z|)/2
	if x < 0 {
		return half, pdf
	}
	return 1 - half, pdf
}
