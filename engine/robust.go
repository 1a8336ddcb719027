package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Robust aggregation methods (the job spec's robust.method).
const (
	RobustCenteredClip = "centered_clip"
	RobustTrimmedMean  = "trimmed_mean"
	RobustMedian       = "median"
	RobustNone         = "none"
)

// Robust is how results are combined so that a minority of hostile ones
// cannot move the model far.
//
// Centered clipping (Karimireddy, He, Jaggi 2021) starts from the previous
// aggregate v and repeats Iterations times
//
//	v ← v + (1/n) Σ (x_i − v)·min(1, r/‖x_i − v‖)
//
// with the radius r = Tau × the median of ‖x_i − v‖: with fewer than half
// the results hostile the median distance is an honest one, so a hostile
// result moves the aggregate by at most r/n per iteration whatever its
// size. Bucket > 1 first averages random buckets of Bucket results
// (Karimireddy et al. 2022), which brings non-iid honest results closer
// together before clipping. TrimmedMean drops the Trim fraction of the
// values at each end of every coordinate; Median takes every
// coordinate's median.
type Robust struct {
	Method     string
	Tau        float64
	Iterations int
	Bucket     int
	Trim       float64
}

// Check reports a setting that cannot work.
func (r Robust) Check() error {
	switch r.Method {
	case RobustCenteredClip:
		if !(r.Tau > 0) || math.IsInf(r.Tau, 0) {
			return fmt.Errorf("tau must be a finite number > 0, got %v", r.Tau)
		}
		if r.Iterations < 1 || r.Iterations > 100 {
			return fmt.Errorf("iterations must be 1 to 100, got %d", r.Iterations)
		}
	case RobustTrimmedMean:
		if !(r.Trim >= 0 && r.Trim < 0.5) {
			return fmt.Errorf("trim must be a fraction >= 0 and < 0.5, got %v", r.Trim)
		}
	case RobustMedian, RobustNone:
	default:
		return fmt.Errorf("method must be one of centered_clip, trimmed_mean, median, none, got %q", r.Method)
	}
	if r.Bucket < 1 {
		return fmt.Errorf("bucket must be >= 1, got %d", r.Bucket)
	}
	return nil
}

// ErrNonFinite is returned for a vector holding NaN or Inf.
var ErrNonFinite = errors.New("update holds NaN or Inf")

// Finite reports whether every value of x is finite. It runs on every
// result in the job's loop, so it tests bits, not float64 conversions: a
// float32's exponent (bits 23..30) is all ones exactly for NaN and ±Inf,
// and then adding 1<<23 to it carries into bit 31; four accumulators keep
// the loop free of branches (protocol.Floats.FirstNonFinite does the same).
func Finite(x []float32) bool {
	var a0, a1, a2, a3 uint32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		a0 |= math.Float32bits(x[i])&0x7f800000 + 0x00800000
		a1 |= math.Float32bits(x[i+1])&0x7f800000 + 0x00800000
		a2 |= math.Float32bits(x[i+2])&0x7f800000 + 0x00800000
		a3 |= math.Float32bits(x[i+3])&0x7f800000 + 0x00800000
	}
	for ; i < len(x); i++ {
		a0 |= math.Float32bits(x[i])&0x7f800000 + 0x00800000
	}
	return (a0|a1|a2|a3)&0x80000000 == 0
}

// l2norm is ‖x‖₂, accumulated in float64.
func l2norm(x []float32) float64 {
	s := 0.0
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s)
}

// dist is ‖a − b‖₂, accumulated in float64.
func dist(a, b []float32) float64 {
	// Four sums side by side: one would wait on each add before the next
	// (the clip measures every result this way on the job's loop).
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		d0 := float64(a[i]) - float64(b[i])
		d1 := float64(a[i+1]) - float64(b[i+1])
		d2 := float64(a[i+2]) - float64(b[i+2])
		d3 := float64(a[i+3]) - float64(b[i+3])
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for ; i < len(a); i++ {
		d := float64(a[i]) - float64(b[i])
		s0 += d * d
	}
	return math.Sqrt((s0 + s1) + (s2 + s3))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Bucketize averages xs in random buckets of size s (the last may be
// smaller), shuffled by rng. With s <= 1 it returns xs.
func Bucketize(xs [][]float32, s int, rng *rand.Rand) [][]float32 {
	if s <= 1 || len(xs) <= 1 {
		return xs
	}
	idx := rng.Perm(len(xs))
	var out [][]float32
	for lo := 0; lo < len(idx); lo += s {
		hi := min(lo+s, len(idx))
		b := make([]float32, len(xs[0]))
		for _, k := range idx[lo:hi] {
			for i, v := range xs[k] {
				b[i] += v
			}
		}
		inv := 1 / float32(hi-lo)
		for i := range b {
			b[i] *= inv
		}
		out = append(out, b)
	}
	return out
}

// CenteredClip writes into out the centred clip of xs starting from v0
// (the previous aggregate; zeros if nil), with radius tau times the median
// distance of xs from the current centre, iters times. It returns how many
// of xs were clipped in the last iteration.
func CenteredClip(out []float32, xs [][]float32, v0 []float32, tau float64, iters int) int {
	if v0 == nil {
		clear(out)
	} else {
		copy(out, v0)
	}
	if len(xs) == 0 {
		return 0
	}
	ds := make([]float64, len(xs))
	acc := make([]float64, len(out))
	clipped := 0
	for it := 0; it < iters; it++ {
		for k, x := range xs {
			ds[k] = dist(x, out)
		}
		r := tau * median(ds)
		clear(acc)
		clipped = 0
		for k, x := range xs {
			w := 1.0
			if ds[k] > r {
				w = r / ds[k]
				clipped++
			}
			for i, v := range x {
				acc[i] += (float64(v) - float64(out[i])) * w
			}
		}
		inv := 1 / float64(len(xs))
		for i := range out {
			out[i] += float32(acc[i] * inv)
		}
	}
	return clipped
}

// TrimmedMean writes into out, for each coordinate, the mean of xs's
// values without the floor(trim·n) smallest and largest.
func TrimmedMean(out []float32, xs [][]float32, trim float64) {
	n := len(xs)
	k := int(math.Floor(trim * float64(n)))
	if 2*k >= n {
		k = (n - 1) / 2
	}
	col := make([]float32, n)
	for i := range out {
		for j, x := range xs {
			col[j] = x[i]
		}
		slices.Sort(col)
		s := 0.0
		for _, v := range col[k : n-k] {
			s += float64(v)
		}
		out[i] = float32(s / float64(n-2*k))
	}
}

// Median writes into out the coordinate-wise median of xs.
func Median(out []float32, xs [][]float32) {
	n := len(xs)
	col := make([]float32, n)
	for i := range out {
		for j, x := range xs {
			col[j] = x[i]
		}
		slices.Sort(col)
		if n%2 == 1 {
			out[i] = col[n/2]
		} else {
			out[i] = (col[n/2-1] + col[n/2]) / 2
		}
	}
}

// Aggregate combines xs into out by r's method; prev is the previous
// aggregate (centered clipping starts from it; nil for none). It returns
// how many inputs (buckets, with bucketing) were clipped.
func (r Robust) Aggregate(out []float32, xs [][]float32, prev []float32, rng *rand.Rand) int {
	if len(xs) == 0 {
		clear(out)
		return 0
	}
	if r.Method == RobustNone || r.Method == "" || len(xs) < 3 {
		// With fewer than 3 results there is no majority to trust: the
		// mean.
		mean(out, xs)
		return 0
	}
	// Buckets only where at least 4 remain: with fewer, one hostile
	// result would spoil too large a share of them.
	b := Bucketize(xs, min(r.Bucket, max(1, len(xs)/4)), rng)
	switch r.Method {
	case RobustCenteredClip:
		return CenteredClip(out, b, prev, r.Tau, r.Iterations)
	case RobustTrimmedMean:
		TrimmedMean(out, b, r.Trim)
	case RobustMedian:
		Median(out, b)
	default:
		panic("engine: unknown robust method " + r.Method)
	}
	return 0
}

func mean(out []float32, xs [][]float32) {
	acc := make([]float64, len(out))
	for _, x := range xs {
		for i, v := range x {
			acc[i] += float64(v)
		}
	}
	inv := 1 / float64(len(xs))
	for i := range out {
		out[i] = float32(acc[i] * inv)
	}
}
