package engine

// The coordinator as referee. A mismatched check needs a third result,
// and a third volunteer may never come: with two volunteers on the grid
// (a liar and one honest volunteer, or honest workers behind one address)
// the check would wait until it expired, the liar never struck and held
// results never credited. So when no volunteer that could compute the
// third copy is connected, or none took it within RefereeWait of the
// mismatch, the coordinator recomputes the task itself with the pinned
// computation (package compute's Reference) and Resolve enters its result
// as the third. Its result counts in the majority like a volunteer's, but
// it is never struck, credited, passed, nor put in a class: Referee is no
// volunteer.

// Unresolved returns the mismatched checks the coordinator should decide
// itself now, oldest first: no third copy is out and none is being
// computed by the coordinator, and either no volunteer that could take
// the copy is connected (connected: every volunteer connected to the
// job; one that computed the task, or is struck, cannot) or RefereeWait
// has passed since the mismatch.
func (p *SpotChecks) Unresolved(connected map[string]string) []*Check {
	now := p.Now()
	var out []*Check
	for _, c := range p.Checks() {
		if len(c.Results) != 2 || c.want != 2 || c.refereeing || len(c.copies) > 0 {
			continue
		}
		if now.Sub(c.mismatched) >= p.RefereeWait || !p.thirdAtHand(c, connected) {
			out = append(out, c)
		}
	}
	return out
}

// thirdAtHand reports whether a connected volunteer could compute c's
// third copy.
func (p *SpotChecks) thirdAtHand(c *Check, connected map[string]string) bool {
	for v := range connected {
		if !c.has(v) && !p.Quarantined(v) && !p.Banned(v) {
			return true
		}
	}
	return false
}

// Refereeing records that the coordinator computes c's third result: no
// copy of c is leased meanwhile.
func (p *SpotChecks) Refereeing(c *Check) { c.refereeing = true }

// Deferred records that c waited for the bound on the coordinator's
// recomputations; each check is counted once.
func (p *SpotChecks) Deferred(c *Check) {
	if !c.deferred {
		c.deferred = true
		p.Counters.RecomputeDeferred++
	}
}

// waiting reports whether c is still a check waiting for results.
func (p *SpotChecks) waiting(c *Check) bool { return c != nil && p.checks[c.Primary.ID] == c }

// Resolve enters the coordinator's own result r of c's task as its third
// and settles c by majority, as a third volunteer's would: whoever of the
// first two disagrees with it, clearly, is struck. r's volunteer is
// Referee whatever it says. ok is false when c is no longer waiting (it
// expired while the coordinator computed) or was never mismatched.
func (p *SpotChecks) Resolve(c *Check, r SpotResult) (Outcome, bool) {
	if !p.waiting(c) || len(c.Results) != 2 {
		return Outcome{}, false
	}
	r.Volunteer, r.Hint, r.Referee, r.Applied, r.Held, r.Slack = Referee, "", true, false, false, 0
	c.refereeing = false
	c.Results = append(c.Results, r)
	p.Counters.Recomputed++
	return p.decide(c), true
}

// Unresolvable drops c, whose third result the coordinator could not
// compute (its base snapshot is gone): undecided, as an expired check.
// It reports whether c was still waiting.
func (p *SpotChecks) Unresolvable(c *Check) bool {
	if !p.waiting(c) {
		return false
	}
	p.drop(c)
	p.Counters.RecomputeDropped++
	return true
}
