package engine

import (
	"fmt"
	"math"
	"slices"
)

// The verdicts of spot checks: how two results are compared, what a
// copy's answer decides, and the strikes that follow.

// Distance is ‖a−b‖/max(‖a‖,‖b‖), and whether a and b are bit for bit
// the same. Two zero vectors are at 0; a NaN anywhere is at +Inf.
func Distance(a, b []float32) (rel float64, exact bool) { return DistanceAtLeast(a, b, 0) }

// DistanceAtLeast is ‖a−b‖/max(‖a‖,‖b‖,ref): Distance, measured against
// at least ref.
func DistanceAtLeast(a, b []float32, ref float64) (rel float64, exact bool) {
	if len(a) != len(b) {
		return math.Inf(1), false
	}
	exact = true
	var d, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			exact = false
		}
		d += (x - y) * (x - y)
		na += x * x
		nb += y * y
	}
	if math.IsNaN(d) || math.IsInf(d, 0) {
		return math.Inf(1), exact
	}
	if d == 0 {
		return 0, exact
	}
	return math.Sqrt(d) / max(math.Sqrt(max(na, nb)), ref), exact
}

// within reports whether ‖a−b‖ <= factor·Tolerance·max(‖a‖,‖b‖,RefNorm)
// + a.Slack + b.Slack, with the relative distance (DistanceAtLeast) and
// whether a and b are bit for bit the same.
func (p *SpotChecks) within(a, b SpotResult, factor float64) (ok bool, rel float64, exact bool) {
	rel, exact = DistanceAtLeast(a.Update, b.Update, p.RefNorm)
	slack := a.Slack + b.Slack
	if rel <= factor*p.Tolerance {
		return true, rel, exact
	}
	if slack <= 0 || math.IsInf(rel, 1) {
		return false, rel, exact
	}
	var d, na, nb float64
	for i := range a.Update {
		x, y := float64(a.Update[i]), float64(b.Update[i])
		d += (x - y) * (x - y)
		na += x * x
		nb += y * y
	}
	scale := max(math.Sqrt(max(na, nb)), p.RefNorm)
	return math.Sqrt(d) <= factor*p.Tolerance*scale+slack, rel, exact
}

// Agree compares two results of one task computed from one base as a
// check's are (agree): a straggler's late copy against the copy that
// answered first and was applied, in a round mode.
func (p *SpotChecks) Agree(a, b SpotResult) (bool, string) { return p.agree(a, b) }

// agree compares results a and b within Tolerance (of the larger of
// their norms and RefNorm) plus their slack, and bit for bit when their
// volunteers were seen to compute alike and neither came through a lossy
// codec (a codec's result is never bit for bit its f32 copy). It says
// how.
func (p *SpotChecks) agree(a, b SpotResult) (bool, string) {
	if a.Slack > 0 || b.Slack > 0 {
		ok, rel, _ := p.within(a, b, 1)
		if ok {
			return true, fmt.Sprintf("within tolerance and the codec's allowance (relative difference %.3g, tolerance %g, allowance %.3g)", rel, p.Tolerance, a.Slack+b.Slack)
		}
		return false, fmt.Sprintf("relative difference %.3g > tolerance %g, beyond the codec's allowance %.3g", rel, p.Tolerance, a.Slack+b.Slack)
	}
	rel, exact := DistanceAtLeast(a.Update, b.Update, p.RefNorm)
	if p.sameClass(a.Volunteer, b.Volunteer) {
		if exact {
			return true, "bit for bit"
		}
		// Bit-exact before, not now: a worker can change kernels (a
		// native worker's --kernel auto does) or machines under one key.
		// Within tolerance that is rounding, not a lie: the pair leaves
		// its class, and no one is struck for it.
		if rel <= p.Tolerance {
			p.Counters.ClassBreaks++
			p.trust(a.Volunteer).Class, p.trust(b.Volunteer).Class = 0, 0
			return true, fmt.Sprintf("within tolerance, no longer bit for bit as before (relative difference %.3g <= %g)", rel, p.Tolerance)
		}
		return false, fmt.Sprintf("relative difference %.3g > tolerance %g, from a volunteer that computed bit for bit alike before", rel, p.Tolerance)
	}
	how := "within tolerance"
	if a.Hint != b.Hint {
		how = "within tolerance across classes"
	}
	if rel <= p.Tolerance {
		if exact {
			if !a.Referee && !b.Referee {
				p.joinClass(a.Volunteer, b.Volunteer)
			}
			return true, "bit for bit"
		}
		return true, fmt.Sprintf("%s (relative difference %.3g <= %g)", how, rel, p.Tolerance)
	}
	return false, fmt.Sprintf("relative difference %.3g > tolerance %g", rel, p.Tolerance)
}

// joinClass records that a and b computed bit for bit alike: one class.
func (p *SpotChecks) joinClass(a, b string) {
	ta, tb := p.trust(a), p.trust(b)
	switch {
	case ta.Class == 0 && tb.Class == 0:
		p.nextClass++
		ta.Class, tb.Class = p.nextClass, p.nextClass
	case ta.Class == 0:
		ta.Class = tb.Class
	case tb.Class == 0:
		tb.Class = ta.Class
	case ta.Class != tb.Class:
		old := tb.Class
		for _, t := range p.vols {
			if t.Class == old {
				t.Class = ta.Class
			}
		}
	}
}

// Answer takes copy lease id's result r and decides what it can: agree
// (credit the copy, and a held primary), or, on a mismatch, credit the
// copy for now and leave the check to the coordinator's recomputation
// (Unresolved, Resolve). ok is false when id is no copy of a waiting
// check, or of one that has its copy's result already.
func (p *SpotChecks) Answer(id uint64, r SpotResult) (Outcome, bool) {
	c := p.byCopy[id]
	delete(p.byCopy, id)
	if c == nil {
		return Outcome{}, false
	}
	delete(c.copies, id)
	if len(c.Results) != 1 {
		return Outcome{}, false // answered already: a check takes one copy
	}
	p.noteHint(r.Volunteer, r.Hint)
	r.Applied, r.Referee = false, false
	c.Results = append(c.Results, r)
	a := c.Results[0]
	ok, how := p.agree(a, r)
	if ok {
		p.Counters.Checked++
		p.Counters.Agreed++
		p.pass(a.Volunteer)
		p.pass(r.Volunteer)
		o := Outcome{Done: true, Agreed: true, Credit: []SpotResult{r}, Detail: "spot check: agreed " + how}
		if a.Held {
			o.Credit = append(o.Credit, a)
			p.Counters.HeldCreditedExamples += int64(a.Examples)
		}
		p.drop(c)
		return o, true
	}
	// Which of the two lied is not known yet: the copy is credited now, as
	// the applied primary was, and whichever the coordinator's
	// recomputation finds wrong loses its credit. An honest copy of a
	// forged primary then costs its volunteer nothing.
	p.Counters.Mismatched++
	c.Results[1].Update = slices.Clone(r.Update)
	c.Results[1].Credited = true
	return Outcome{Disputed: true, Credit: []SpotResult{r}, Detail: "spot check: " + how + "; the coordinator's own recomputation decides"}, true
}

// decide settles a check by the coordinator's result t (Resolve), the
// third: whichever of the first two clearly disagrees with it is struck,
// and loses the credit it was given. t is neither passed nor credited.
func (p *SpotChecks) decide(c *Check) Outcome {
	p.drop(c)
	p.Counters.Checked++
	a, b, t := c.Results[0], c.Results[1], c.Results[2]
	okA, _ := p.agree(a, t)
	okB, _ := p.agree(b, t)
	// A strike needs a clear disagreement: an honest pair's rare outlier
	// (a ReLU that rounding tips the other way) lands just past the
	// tolerance, a lie lands far past it.
	loser := a
	if okA {
		loser = b
	}
	near, far, _ := p.within(loser, t, strikeFactor)
	var o Outcome
	switch {
	case okA != okB && near:
		p.Counters.Undecided++
		o.Agreed = true
		o.Detail = fmt.Sprintf("spot check: the disagreement (%.3g) was too small to strike anyone; undecided", far)
	case okA && !okB:
		p.pass(a.Volunteer)
		o = p.strike(b)
		if b.Credited {
			o.Refute = append(o.Refute, b)
			p.Counters.Refuted++
			p.Counters.RefutedExamples += int64(b.Examples)
		}
		if a.Held {
			o.Credit = append(o.Credit, a)
			p.Counters.HeldCreditedExamples += int64(a.Examples)
		}
		o.Agreed = true
		o.Detail = "spot check: the coordinator's recomputation agreed with the primary; the copy was wrong"
	case okB && !okA:
		p.pass(b.Volunteer)
		o = p.strike(a)
		if a.Applied {
			o.Refute = append(o.Refute, a)
			p.Counters.Refuted++
			p.Counters.RefutedExamples += int64(a.Examples)
		}
		o.Agreed = true
		o.Detail = "spot check: the coordinator's recomputation agreed with the copy; the primary was wrong"
	default:
		// The coordinator agrees with both (the first two sat at the edge
		// of the tolerance) or with neither: no majority, no strike.
		p.Counters.Undecided++
		o.Detail = "spot check: no majority among the two results and the coordinator's recomputation; undecided"
		if okA && okB {
			o.Agreed = true
		}
	}
	o.Done = true
	return o
}

func (p *SpotChecks) pass(v string) { p.trust(v).Passed++ }

// Pass records that a result of v agreed with a check the coordinator
// made alone, without a copy (an RL rollout's log-probabilities, which
// it recomputes itself): it counts towards v's trust, and so its rate,
// as a check a copy agreed with does.
func (p *SpotChecks) Pass(v string) { p.pass(v) }

// strike gives r's volunteer a strike, and the ban at Strikes.
func (p *SpotChecks) strike(r SpotResult) Outcome {
	t := p.trust(r.Volunteer)
	t.Strikes++
	p.Counters.Strikes++
	o := Outcome{Struck: []string{r.Volunteer}}
	if t.Strikes >= p.Strikes && !t.Banned {
		t.Banned = true
		p.Counters.Bans++
		o.Banned = []string{r.Volunteer}
	}
	return o
}

// SyncStrikes takes v's strikes as counted elsewhere (the ledger's, all
// jobs together): total is v's strikes now. It reports whether v is
// banned, now or before.
func (p *SpotChecks) SyncStrikes(v string, total int) bool {
	t := p.trust(v)
	t.Strikes = max(t.Strikes, total)
	if t.Strikes >= p.Strikes && !t.Banned {
		t.Banned = true
		p.Counters.Bans++
		return true
	}
	return t.Banned
}

// SetStanding takes v's strikes and ban as the ledger has them now: the
// ledger counts strikes of every job, and an operator's pardon clears
// them there.
func (p *SpotChecks) SetStanding(v string, strikes int, banned bool) {
	if t := p.vols[v]; t != nil || strikes > 0 || banned {
		t = p.trust(v)
		t.Strikes, t.Banned = strikes, banned
	}
}
