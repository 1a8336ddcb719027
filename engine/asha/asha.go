package asha

import (
	"cmp"
	"math"
	"slices"
)

// States of a trial.
const (
	Running = "running" // training toward its next rung
	Waiting = "waiting" // paused at a rung, for a decision
	Stopped = "stopped" // ended by the rule
	Ended   = "ended"   // ended on its own (its budget, a failure, an operator)
)

// Trial is what the rule knows of a trial.
type Trial struct {
	ID    string
	State string
	// Metrics holds its metric at each rung it reached, in rung order.
	Metrics []float64
}

// ASHA is the rule: Rungs in examples seen, increasing; Reduction > 1;
// Maximize when a higher metric is better (accuracy), else lower (loss).
type ASHA struct {
	Rungs     []int64
	Reduction float64
	Maximize  bool
}

// Next is the examples seen at which a trial with reached rungs behind it
// is compared next, and false past the last rung.
func (a *ASHA) Next(reached int) (int64, bool) {
	if reached < len(a.Rungs) {
		return a.Rungs[reached], true
	}
	return 0, false
}

// Decide returns the waiting trials to go on and those to stop. A trial
// waiting at rung k goes on when it ranks in the best floor(n/reduction)
// of the n trials that reached rung k, and, once no trial can still reach
// rung k, the best max(1, floor(n/reduction)) go on and the others stop.
// A non-finite metric ranks last. Ties rank by id.
func (a *ASHA) Decide(trials []Trial) (promote, stop []string) {
	for k := range a.Rungs {
		var at []Trial // reached rung k
		complete := true
		for _, t := range trials {
			switch {
			case len(t.Metrics) > k:
				at = append(at, t)
			case t.State == Running || t.State == Waiting:
				complete = false // it may still get there
			}
		}
		if len(at) == 0 {
			continue
		}
		slices.SortStableFunc(at, func(x, y Trial) int {
			if c := a.better(x.Metrics[k], y.Metrics[k]); c != 0 {
				return c
			}
			return cmp.Compare(x.ID, y.ID)
		})
		quota := int(math.Floor(float64(len(at)) / a.Reduction))
		if complete {
			quota = max(1, quota)
		}
		for i, t := range at {
			if t.State != Waiting || len(t.Metrics) != k+1 {
				continue // not waiting at this rung
			}
			switch {
			case i < quota:
				promote = append(promote, t.ID)
			case complete:
				stop = append(stop, t.ID)
			}
		}
	}
	return promote, stop
}

// better orders x before y when x is the better metric.
func (a *ASHA) better(x, y float64) int {
	bx, by := bad(x), bad(y)
	switch {
	case bx && by:
		return 0
	case bx:
		return 1
	case by:
		return -1
	}
	if a.Maximize {
		return cmp.Compare(y, x)
	}
	return cmp.Compare(x, y)
}

func bad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
