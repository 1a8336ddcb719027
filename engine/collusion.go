package engine

import (
	"math"
	"slices"
)

// Colluding results in a round. Volunteers that coordinate (ALIE and IPM
// pool their honest updates and each send a function of the pool; a
// sybil's copies) send updates far more alike than honest volunteers do,
// whose updates come from different data. Measured on mnist-mlp in
// DiLoCo (H=16) with 4 ALIE attackers among 8 results a round: the
// honest pairs' cosine fell from 0.77 in round 1 to 0.2 by round 5 and
// about 0.05 after, while the attackers' pairs stayed at 0.81 to 0.98.
// Such results are inside the honest spread one by one, so the robust
// clip keeps them, and together they steer the step.
//
// colluding marks the results whose angular distance (1 − cos) to a
// result of another origin is under collusionRatio times the round's
// typical distance (the median over results of each one's median
// distance to the others), with a cosine over collusionMinCos: the
// honest pairs' smallest distance was 0.9 to 0.95 times the median
// pairwise distance in every round of a clean run, the attackers' at
// most 0.4 times. They are
// left out of the round's aggregate, unless they are more than half of
// it. A round needs three results of two origins or more to have a
// median to compare with. Copies of a mean (a
// relay's sum, a restored partial round; noOrigin) are never compared:
// a relay's mean of many honest results lies closer to another relay's
// than two results do, and its relay has bounded each of them.

const (
	// collusionRatio is the share of the round's typical distance
	// (colluding) under which two results are too alike.
	collusionRatio = 0.35
	// collusionMinCos keeps rounds whose results are nearly orthogonal
	// (a median distance near 1) from marking merely related results.
	collusionMinCos = 0.5
	// maxCollusionCheck bounds the results compared: the pairs grow
	// with the square of the round's size.
	maxCollusionCheck = 64
)

// noOrigin marks a held copy of a mean, which colluding leaves alone.
const noOrigin = 0

// colluding reports, for each of held, whether it is too alike another
// result of a different origin (above). nil when the round cannot be
// judged (fewer than three results, one origin, or too many).
func colluding(held [][]float32, origin []int) []bool {
	n := len(held)
	if n < 3 || n > maxCollusionCheck || len(origin) != n {
		return nil
	}
	norms := make([]float64, n)
	for k, x := range held {
		norms[k] = math.Sqrt(dot(x, x))
	}
	compared := func(a, b int) bool {
		return origin[a] != origin[b] && origin[a] != noOrigin && origin[b] != noOrigin && norms[a] > 0 && norms[b] > 0
	}
	d := make([][]float64, n)
	for a := range n {
		d[a] = make([]float64, n)
	}
	for a := range n {
		for b := a + 1; b < n; b++ {
			if compared(a, b) {
				d[a][b] = 1 - dot(held[a], held[b])/(norms[a]*norms[b])
				d[b][a] = d[a][b]
			}
		}
	}
	// The round's typical distance: each result's median distance to
	// the others, and the median of those. A median over all pairs is
	// not it: one result pointing against the rest (an IPM attacker
	// among four) puts half of four results' pairs far apart, and the
	// honest pairs, close beside those, would look alike.
	var typical []float64
	for a := range n {
		var ds []float64
		for b := range n {
			if a != b && compared(a, b) {
				ds = append(ds, d[a][b])
			}
		}
		if len(ds) >= 2 {
			slices.Sort(ds)
			typical = append(typical, ds[len(ds)/2])
		}
	}
	if len(typical) < 3 {
		return nil
	}
	slices.Sort(typical)
	limit := collusionRatio * typical[len(typical)/2]
	var out []bool
	marked := 0
	for a := range n {
		for b := a + 1; b < n; b++ {
			if compared(a, b) && d[a][b] < limit && 1-d[a][b] > collusionMinCos {
				if out == nil {
					out = make([]bool, n)
				}
				for _, k := range [2]int{a, b} {
					if !out[k] {
						out[k] = true
						marked++
					}
				}
			}
		}
	}
	if 2*marked > n {
		// Most of the round alike is the crowd agreeing, not a
		// collusion: in a round of three (one attacker of four) the
		// two honest deltas of an early round stand close beside an
		// IPM or sign-flipped third, and leaving them out applied the
		// attacker's result alone.
		return nil
	}
	return out
}

// dot is the dot product of a and b in float64, four lanes.
func dot(a, b []float32) float64 {
	var s0, s1, s2, s3 float64
	b = b[:len(a)]
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += float64(a[i]) * float64(b[i])
		s1 += float64(a[i+1]) * float64(b[i+1])
		s2 += float64(a[i+2]) * float64(b[i+2])
		s3 += float64(a[i+3]) * float64(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float64(a[i]) * float64(b[i])
	}
	return s0 + s1 + s2 + s3
}
