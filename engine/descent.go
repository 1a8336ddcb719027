package engine

import (
	"math"
	"slices"
)

// Climbing results in a round. A sign-flipping volunteer sends the
// negation of an honest delta: the same norm, and late in training no
// more alike the others than honest deltas of different data are (their
// cosines fall to about 0.05 by round 8 on mnist-mlp), so neither the
// robust clip nor the collusion check (collusion.go) tells it apart. The
// loss does: on the coordinator's held-out batch, each honest delta's
// step descends and a negated one's climbs about as much. Measured on
// mnist-mlp in DiLoCo (H=16), 4 sign-flippers of 9 volunteers, the
// descent score relative to the loss (Zeno's, at one inner step of the
// delta): honest results +0.02 to +0.04 in rounds 2 to 7, the flipped
// ones −0.02 to −0.05, each group within a few thousandths of itself;
// near the target, honest results alone spread from −0.01 to +0.016.
//
// climbing marks the results whose score is below −climbShare times the
// median score of the round's descending results (a step that undoes at
// least that share of what a typical honest one gains), when they stand
// apart from the rest: the gap between the highest of them and the
// lowest of the others exceeds climbGap robust standard deviations of
// the others' scores (1.4826 × their median absolute deviation). Honest
// scores near the target form one continuum with a tail below zero;
// the flipped ones, a cluster of their own. Measured in the same runs:
// the flipped clusters stood 20 to 120 deviations apart, the honest
// tails at most 2.2, and a first version without the gap test left out
// honest tails too, and clean runs needed 15% more versions.
// A round needs climbOver results or more, one of them descending;
// copies of a mean (a relay's sum, a restored partial round; noOrigin)
// are never left out. Left-out results stay accepted and credited.
//
// The climbing results may be the round's majority: attackers that
// arrive first take the first round's places (7 of 8 in the measured
// runs, from 4 of 9 volunteers), and their mean, −0.75 of an honest
// step, then lived on in the outer Nesterov momentum for ten rounds:
// 65 versions to 97% against 37 to 42 clean. A majority is left out
// only under stricter tests, as the minority is all the round has to go
// by: every kept result descends, the gap stands climbGap robust
// deviations apart from each cluster's own spread, and (the caller's
// part) the mean of the whole round climbs on the batch too, which an
// honest round's mean, averaging its noise away, does not.

const (
	// climbShare is the share of a typical honest result's descent that
	// a result must undo to be left out.
	climbShare = 0.5
	// climbGap is how many robust deviations of the others' scores the
	// climbing results must stand apart by.
	climbGap = 3.0
	// climbOver is the fewest results a round judges.
	climbOver = 3
	// climbSpread is the fewest scores whose robust deviation is taken
	// for a cluster's spread: the kept ones', or for a climbing
	// majority the climbing ones'. The deviation of two is half their
	// difference, and in rounds of three (one attacker of four) honest
	// noise near the target then stood "apart" in one round in four:
	// one honest result of three was left out again and again (with the
	// collusion check's like fault, collusion.go, the cells of one
	// attacker of four needed 1.8x and 2.9x the clean versions).
	climbSpread = 4
)

// climbing reports, for each result of a round by its descent score and
// origin, whether it is left out (above); nil when none is. majority
// says those left out are most of the round: the caller leaves them out
// only if the round's mean climbs too.
func climbing(scores []float64, origin []int) (out []bool, majority bool) {
	if len(scores) < climbOver || len(origin) < len(scores) {
		return nil, false
	}
	var up []float64
	for _, s := range scores {
		if s > 0 {
			up = append(up, s)
		}
	}
	if len(up) == 0 {
		return nil, false
	}
	floor := -climbShare * median(up)
	out = make([]bool, len(scores))
	var kept, left []float64
	for k, s := range scores {
		if s < floor && origin[k] != noOrigin {
			out[k] = true
			left = append(left, s)
		} else {
			kept = append(kept, s)
		}
	}
	if len(left) == 0 {
		return nil, false
	}
	majority = 2*len(kept) < len(scores)
	spread := deviation(kept)
	switch {
	case !majority && len(kept) < climbSpread, majority && len(left) < climbSpread:
		return nil, false // too few to tell a cluster's spread
	case majority && slices.Min(kept) <= 0:
		return nil, false // the minority does not all descend either
	case majority:
		spread = max(spread, deviation(left))
	}
	if slices.Min(kept)-slices.Max(left) <= climbGap*spread {
		return nil, false // one continuum: an honest tail
	}
	return out, majority
}

// deviation is the robust standard deviation of xs: 1.4826 times their
// median absolute deviation.
func deviation(xs []float64) float64 {
	m := median(xs)
	dev := make([]float64, len(xs))
	for i, x := range xs {
		dev[i] = math.Abs(x - m)
	}
	return 1.4826 * median(dev)
}
