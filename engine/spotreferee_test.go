package engine

import (
	"testing"
	"testing/synctest"
	"time"
)

// mismatch opens a check of primary's update and has copier disagree with
// it; the check then wants a third result.
func mismatch(t *testing.T, p *SpotChecks, id uint64, primary string, pu []float32, applied bool, copier string, cu []float32) *Check {
	t.Helper()
	c := openCheck(t, p, id, primary, "x", pu, applied)
	p.Copied(c, id+1000, copier, 8)
	o, ok := p.Answer(id+1000, SpotResult{Volunteer: copier, Hint: "y", Update: cu, Examples: 8})
	if !ok || o.Done {
		t.Fatalf("copy's answer %+v, %v: want a mismatch that waits for a third", o, ok)
	}
	return c
}

func only(cs []*Check, c *Check) bool { return len(cs) == 1 && cs[0] == c }

// A mismatched check goes to the coordinator at once; its result decides by majority: the
// primary that lied is struck and its applied result refuted, the honest
// copy passes, and the coordinator is neither credited, passed nor
// recorded.
func TestRefereeDecidesWhenNoThirdIsConnected(t *testing.T) {
	p, _ := newSpotTest(0.05)
	two := map[string]string{"liar": "x", "honest": "y"}
	c := mismatch(t, p, 1, "liar", fv(-1, -2, -3), true, "honest", fv(1, 2, 3))
	if !only(p.Unresolved(), c) {
		t.Fatalf("Unresolved: %v, want the check", p.Unresolved())
	}
	p.Refereeing(c)
	if len(p.Unresolved()) != 0 {
		t.Fatal("a check the coordinator computes was handed out again")
	}
	if p.CopyFor("late", "z", two) != nil {
		t.Fatal("a third copy was leased while the coordinator computes it")
	}
	o, ok := p.Resolve(c, SpotResult{Volunteer: "honest", Update: fv(1, 2, 3.0001), Examples: 8})
	if !ok || !o.Done || len(o.Struck) != 1 || o.Struck[0] != "liar" {
		t.Fatalf("outcome %+v, %v: want the liar struck", o, ok)
	}
	if len(o.Refute) != 1 || o.Refute[0].Volunteer != "liar" || len(o.Credit) != 0 {
		t.Fatalf("outcome %+v: want the liar's applied result refuted and nobody credited now (the honest copy was when it answered, the coordinator earns nothing)", o)
	}
	if p.Standing("honest").Passed != 1 || p.Standing("liar").Strikes != 1 {
		t.Fatalf("standings honest %+v liar %+v", p.Standing("honest"), p.Standing("liar"))
	}
	if _, ok := p.Volunteers()[Referee]; ok {
		t.Fatal("the coordinator has a record among the volunteers")
	}
	if p.Pending() != 0 || p.Counters.Recomputed != 1 || p.Counters.Strikes != 1 || p.Counters.Checked != 1 {
		t.Fatalf("pending %d, counters %+v", p.Pending(), p.Counters)
	}

	// The copy lies: the copy is struck, the applied primary kept.
	c = mismatch(t, p, 10, "honest", fv(1, 1), true, "liar2", fv(0, 0))
	p.Refereeing(c)
	o, _ = p.Resolve(c, SpotResult{Update: fv(1, 1)})
	if len(o.Struck) != 1 || o.Struck[0] != "liar2" || len(o.Refute) != 1 || o.Refute[0].Volunteer != "liar2" || len(o.Credit) != 0 {
		t.Fatalf("outcome %+v: want the lying copy struck and its credit taken back, nobody credited", o)
	}
	// The primary and the coordinator agree bit for bit: still no class.
	if p.Standing("honest").Class != 0 {
		t.Fatalf("the coordinator's result put honest in class %d", p.Standing("honest").Class)
	}

	// A held primary the coordinator vindicates is credited.
	c = mismatch(t, p, 20, "liar", fv(5, 5), false, "liar2", fv(-5, -5))
	c.Results[0].Held = true
	p.Refereeing(c)
	if o, _ = p.Resolve(c, SpotResult{Update: fv(5, 5)}); len(o.Credit) != 1 || o.Credit[0].Volunteer != "liar" || o.Struck[0] != "liar2" {
		t.Fatalf("outcome %+v: want the held primary credited, the copy struck", o)
	}
}

// The coordinator decides every mismatch at once, whoever is connected:
// established volunteers that could take a third copy are offered none
// (a third volunteer could be the liar's partner), and the check is
// handed out once only while the coordinator computes it.
func TestRefereeDecidesEveryMismatchAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewSpotChecks(1, 0.05, 3, 1e-3, time.Now)
		for _, v := range []string{"a", "b", "c", "d"} {
			p.vols[v] = &Trust{Passed: newcomerChecks}
		}
		all := map[string]string{"a": "", "b": "", "c": "", "d": ""}
		c := mismatch(t, p, 1, "a", fv(1, 2), true, "b", fv(-1, -2))
		if got := p.Unresolved(); !only(got, c) {
			t.Fatalf("with two established volunteers at hand: %v, want the check at once", got)
		}
		for v := range all {
			if p.CopyFor(v, "", all) != nil {
				t.Fatalf("%s was offered a third copy of a mismatched check", v)
			}
		}
		p.Refereeing(c)
		time.Sleep(time.Minute / 2)
		if got := p.Unresolved(); len(got) != 0 {
			t.Fatalf("while the coordinator computes it: %v, want nothing", got)
		}
		if o, ok := p.Resolve(c, SpotResult{Update: fv(1, 2)}); !ok || !o.Done || len(o.Struck) != 1 || o.Struck[0] != "b" {
			t.Fatalf("outcome %+v, %v: want b struck", o, ok)
		}
		// A copy that answers a check that has its two results already
		// is refused: a check takes one copy.
		c = openCheck(t, p, 5, "a", "x", fv(1), true)
		p.Copied(c, 50, "c", 8)
		c.copies[51] = "d"
		p.byCopy[51] = c
		if _, ok := p.Answer(50, SpotResult{Volunteer: "c", Update: fv(-1)}); !ok {
			t.Fatal("the copy's answer was refused")
		}
		if o, ok := p.Answer(51, SpotResult{Volunteer: "d", Update: fv(-1)}); ok || o.Done || len(c.Results) != 2 {
			t.Fatalf("a second copy's answer was taken: %+v, %v, %d results", o, ok, len(c.Results))
		}
	})
}

// A check that expired while the coordinator computed is not resolved;
// one whose base is gone is dropped and counted; a check is deferred once
// however often it waits for the rate bound.
func TestRefereeDropsAndDefers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewSpotChecks(1, 0.05, 3, 1e-3, time.Now)
		p.Timeout = 10 * time.Second
		c := mismatch(t, p, 1, "a", fv(1), true, "b", fv(-1))
		p.Deferred(c)
		p.Deferred(c)
		if p.Counters.RecomputeDeferred != 1 {
			t.Fatalf("deferred %d, want 1 for one check", p.Counters.RecomputeDeferred)
		}
		p.Refereeing(c)
		time.Sleep(11 * time.Second)
		if len(p.Expire()) != 1 {
			t.Fatal("the check did not expire")
		}
		if o, ok := p.Resolve(c, SpotResult{Update: fv(1)}); ok || len(o.Struck) != 0 {
			t.Fatalf("an expired check was resolved: %+v", o)
		}
		if p.Unresolvable(c) {
			t.Fatal("an expired check was dropped twice")
		}
		c = mismatch(t, p, 2, "a", fv(1), true, "b", fv(-1))
		p.Refereeing(c)
		if !p.Unresolvable(c) || p.Pending() != 0 || p.Counters.RecomputeDropped != 1 || p.Counters.Recomputed != 0 {
			t.Fatalf("pending %d, counters %+v: want the check dropped and counted", p.Pending(), p.Counters)
		}
		// A check that never mismatched is not the coordinator's.
		openCheck(t, p, 3, "a", "x", fv(1), true)
		if got := p.Unresolved(); len(got) != 0 {
			t.Fatalf("Unresolved %v: a check waiting for its first copy is no dispute", got)
		}
	})
}
