package engine

import (
	"fmt"
	"math"
)

// ReasonQuarantined is the reason a result's ack carries when validation
// refused it (the protocol's "quarantined").
const ReasonQuarantined = "quarantined"

// Zeno validates an update on the coordinator's own data (after Zeno++,
// Xie, Koyejo, Gupta 2020): with L the mean loss on a fixed held-out
// batch of the training set, w the model and u the update, the descent
// score is
//
//	s = L(w) − L(w − Gamma·u) − Rho·‖Gamma·u‖²
//
// where w − Gamma·u is where the worker says its steps took the model
// (Gamma is the inner rate for a gradient, 1 for a delta). An update whose
// step raises the loss by more than Margin × L(w) (s < −Margin·L(w)) is
// refused: an honest one descends on any fair sample of the data, a
// sign-flipped, scaled or huge one climbs. It costs two forward passes of
// the batch (one when L(w) is cached for the version), so the caller
// runs it only on the updates a clip flags. A model where honest steps
// climb too (diverging) would have every one refused: the callers stop
// validating while most volunteers are being refused (refusals).
type Zeno struct {
	// Loss is the mean loss of params on the held-out batch.
	Loss   func(params []float32) float64
	Gamma  float64
	Rho    float64
	Margin float64

	// Checked and Refused count the validations.
	Checked, Refused int64

	trial     []float32
	version   int64
	before    float64
	hasBefore bool

	// honest holds the relative scores (s/|L(w)|) of a sample of accepted
	// updates (Observe): what honest steps do to the held-out loss here.
	honest  [zenoWindow]float64
	nHonest int
	pos     int
}

// The noise floor. One honest batch's step may raise the loss on other
// data: near convergence (on mnist-cnn at loss 0.084, 7% of honest
// gradients raised the held-out loss by more than 10%, 1% by more than
// 21%), and early on a CNN, whose honest gradients at the inner rate
// climbed by 23% in the median after 40 steps. A bound of Margin × L
// alone refused them (one honest result in five on mnist-cnn with spot
// checks; the async warm-up held for lack of accepted results). So the
// bound also follows the scores seen: every update validated (Check)
// and a sample of the accepted ones, flagged or not (Observe, one in
// SampleEvery): below their median by zenoSpread robust standard
// deviations (1.4826 × the median absolute deviation; the honest scores'
// lower tail is heavy: at 6 deviations 0.75% of honest mnist-cnn
// gradients near convergence fell below, at 8 0.4%). A median and MAD
// over a window are not moved far by a hostile minority. The bound never
// allows more than zenoMaxRise × L: an update whose step triples the
// loss is refused however noisy the honest ones are.
const (
	zenoWindow     = 64
	zenoMinSamples = 16
	zenoSpread     = 8.0
	zenoMaxRise    = 2.0
	// zenoSampleEarly and zenoSampleLate: the caller gives Observe one
	// accepted update in this many (SampleEvery), often until the window
	// is full (the floor is wanted early), then rarely (each costs two
	// forward passes of the batch on the job's loop).
	zenoSampleEarly = 4
	zenoSampleLate  = 32
)

// SampleEvery is how many accepted updates the caller lets pass between
// two it gives Observe.
func (z *Zeno) SampleEvery() int64 {
	if z.nHonest < zenoWindow {
		return zenoSampleEarly
	}
	return zenoSampleLate
}

// Observe records the descent score of u, an update accepted at params
// (the model at version), for the noise floor.
func (z *Zeno) Observe(version int64, params, u []float32) {
	s, before, _ := z.Score(version, params, u)
	z.record(s, before)
}

// Record keeps score s at a loss of before, from Score of an accepted
// update elsewhere, in the window of honest scores: Observe, where the
// scoring runs apart from the checks.
func (z *Zeno) Record(s, before float64) { z.record(s, before) }

// Samples is how many honest scores the window holds.
func (z *Zeno) Samples() int { return z.nHonest }

// Scores returns a copy of the window of honest scores (relative to the
// loss), oldest first once it has wrapped.
func (z *Zeno) Scores() []float64 {
	if z.nHonest < zenoWindow {
		return append([]float64(nil), z.honest[:z.nHonest]...)
	}
	return append(append([]float64(nil), z.honest[z.pos:]...), z.honest[:z.pos]...)
}

// record keeps score s at a loss of before in the window.
func (z *Zeno) record(s, before float64) {
	if math.IsNaN(s) || math.IsInf(s, 0) || before == 0 || math.IsNaN(before) || math.IsInf(before, 0) {
		return
	}
	z.honest[z.pos] = s / math.Abs(before)
	z.pos = (z.pos + 1) % zenoWindow
	z.nHonest = min(z.nHonest+1, zenoWindow)
}

// Floor is the lowest descent score allowed, relative to |L(w)|: −Margin,
// or lower where the observed honest scores spread wider.
func (z *Zeno) Floor() float64 {
	f := -z.Margin
	if z.nHonest < zenoMinSamples {
		return f
	}
	xs := z.honest[:z.nHonest]
	med := median(xs)
	dev := make([]float64, len(xs))
	for i, v := range xs {
		dev[i] = math.Abs(v - med)
	}
	return max(min(f, med-zenoSpread*1.4826*median(dev)), -zenoMaxRise)
}

// Zeno defaults: the norm penalty per squared step length, and the loss
// rise allowed, as a fraction of the loss.
const (
	DefaultZenoRho    = 1e-3
	DefaultZenoMargin = 0.1
)

// Score returns the descent score of u at params (the model at version),
// with the losses before and after the step.
func (z *Zeno) Score(version int64, params, u []float32) (score, before, after float64) {
	if !z.hasBefore || z.version != version {
		z.before, z.version, z.hasBefore = z.Loss(params), version, true
	}
	if len(z.trial) != len(params) {
		z.trial = make([]float32, len(params))
	}
	g := float32(z.Gamma)
	sq := 0.0
	for i, p := range params {
		s := g * u[i]
		z.trial[i] = p - s
		sq += float64(s) * float64(s)
	}
	after = z.Loss(z.trial)
	return z.before - after - z.Rho*sq, z.before, after
}

// Check validates u at params (the model at version): "" when it may be
// applied, else a detail saying why it is refused.
func (z *Zeno) Check(version int64, params, u []float32) string {
	z.Checked++
	s, before, after := z.Score(version, params, u)
	if math.IsNaN(before) || math.IsInf(before, 0) {
		// The model itself is broken: the divergence check's business,
		// and no yardstick for the update.
		return ""
	}
	floor := z.Floor() * math.Abs(before)
	z.record(s, before) // after the floor: a score does not vouch for itself
	if !math.IsNaN(s) && s >= floor {
		return ""
	}
	z.Refused++
	return fmt.Sprintf("the coordinator's validation refused it: on its own held-out batch the update's step takes the loss from %.4g to %.4g (descent score %.3g, allowed down to %.3g)",
		before, after, s, floor)
}
