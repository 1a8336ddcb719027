package engine

// The coordinator as referee. A mismatched check is decided by the
// coordinator's own recomputation of the task, never by a third
// volunteer: a third volunteer's copy can come from a colluder of the one
// that lied (forgers that take turns as copy and as third outvote an
// honest primary and strike it), and on a grid of two volunteers (a liar
// and one honest volunteer, or honest workers behind one address) no
// third ever comes. The coordinator computes the task with the pinned
// computation (package compute's Reference) and Resolve enters its result
// as the third. Its result counts in the majority like a volunteer's, but
// it is never struck, credited, passed, nor put in a class: Referee is no
// volunteer. Mismatches are rare among honest volunteers (the tolerance
// is 15x the largest honest difference measured), so the recomputations
// follow the liars; the coordinator bounds their rate, and a check that
// waits past its Timeout is dropped undecided.

// Unresolved returns the mismatched checks the coordinator should decide
// now, oldest first: those not being computed already.
func (p *SpotChecks) Unresolved() []*Check {
	var out []*Check
	for _, c := range p.Checks() {
		if len(c.Results) == 2 && !c.refereeing {
			out = append(out, c)
		}
	}
	return out
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
