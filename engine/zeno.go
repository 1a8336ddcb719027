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
	floor := -z.Margin * math.Abs(before)
	if !math.IsNaN(s) && s >= floor {
		return ""
	}
	z.Refused++
	return fmt.Sprintf("the coordinator's validation refused it: on its own held-out batch the update's step takes the loss from %.4g to %.4g (descent score %.3g, allowed down to %.3g)",
		before, after, s, floor)
}
