package engine

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// spotClock is a fake clock the tests move by hand.
type spotClock struct{ t time.Time }

func (c *spotClock) now() time.Time { return c.t }

func newSpotTest(rate float64) (*SpotChecks, *spotClock) {
	c := &spotClock{t: time.Unix(1_700_000_000, 0)}
	return NewSpotChecks(1, rate, 3, 1e-3, c.now), c
}

func fv(vals ...float32) []float32 { return vals }

// check opens a check of a primary lease id with v's update u.
func openCheck(t *testing.T, p *SpotChecks, id uint64, v, hint string, u []float32, applied bool) *Check {
	t.Helper()
	return p.Open(Lease{ID: id, Base: 3, Task: Task{Count: 8}}, SpotResult{Volunteer: v, Hint: hint, Update: u, Examples: 8, Applied: applied})
}

// copyTo leases c's copy to v (asserting the policy offers it) and
// answers it with u.
func copyTo(t *testing.T, p *SpotChecks, id uint64, v, hint string, u []float32, connected map[string]string) Outcome {
	t.Helper()
	c := p.CopyFor(v, hint, connected)
	if c == nil {
		t.Fatalf("no copy for %s", v)
	}
	p.Copied(c, id, v, 8)
	o, ok := p.Answer(id, SpotResult{Volunteer: v, Hint: hint, Update: u, Examples: 8})
	if !ok {
		t.Fatalf("copy %d unknown", id)
	}
	return o
}

// refereeDecides has the coordinator enter u, its own result, into the
// oldest mismatched check (Unresolved, Refereeing, Resolve), as the job's
// loop does once its recomputation is back.
func refereeDecides(t *testing.T, p *SpotChecks, u []float32) Outcome {
	t.Helper()
	cs := p.Unresolved()
	if len(cs) == 0 {
		t.Fatal("no mismatched check for the coordinator to decide")
	}
	p.Refereeing(cs[0])
	o, ok := p.Resolve(cs[0], SpotResult{Update: u, Examples: 8})
	if !ok {
		t.Fatal("the check was no longer waiting")
	}
	return o
}

func TestSpotCheckAgreeCreditsCopy(t *testing.T) {
	p, _ := newSpotTest(0.05)
	openCheck(t, p, 1, "a", "native/go", fv(1, 2, 3), true)
	o := copyTo(t, p, 2, "b", "native/avx2", fv(1, 2, 3.0001), nil)
	if !o.Done || !o.Agreed || len(o.Credit) != 1 || o.Credit[0].Volunteer != "b" || len(o.Struck) != 0 {
		t.Fatalf("outcome %+v, want done, agreed, b credited", o)
	}
	if p.Pending() != 0 || p.Counters.Agreed != 1 || p.Counters.Checked != 1 || p.Counters.DuplicatedExamples != 8 {
		t.Fatalf("pending %d, counters %+v", p.Pending(), p.Counters)
	}
	if p.Standing("a").Passed != 1 || p.Standing("b").Passed != 1 {
		t.Fatalf("passes a %+v b %+v", p.Standing("a"), p.Standing("b"))
	}
}

func TestSpotCheckMajorityStrikesPrimaryAndRefutes(t *testing.T) {
	p, _ := newSpotTest(0.05)
	openCheck(t, p, 1, "forger", "native/go", fv(-1, -2, -3), true)
	o := copyTo(t, p, 2, "b", "native/go", fv(1, 2, 3), nil)
	if o.Done || !o.Disputed || len(o.Struck) != 0 || p.Counters.Mismatched != 1 || len(o.Credit) != 1 || o.Credit[0].Volunteer != "b" {
		t.Fatalf("after a mismatch: %+v, counters %+v; want the check left to the coordinator, nobody struck, the copy credited for now", o, p.Counters)
	}
	for _, v := range []string{"c", "b", "forger"} {
		if p.CopyFor(v, "native/go", nil) != nil {
			t.Fatalf("a third copy of a mismatched check went to %s: only the coordinator decides it", v)
		}
	}
	o = refereeDecides(t, p, fv(1, 2, 3))
	if !o.Done || len(o.Struck) != 1 || o.Struck[0] != "forger" {
		t.Fatalf("outcome %+v, want forger struck", o)
	}
	if len(o.Refute) != 1 || o.Refute[0].Volunteer != "forger" || len(o.Credit) != 0 {
		t.Fatalf("outcome %+v, want the forger's applied result refuted, nobody credited (b's ack said quarantined)", o)
	}
	if !p.Quarantined("forger") || p.RateFor("forger") != 1 || p.Banned("forger") {
		t.Fatalf("forger after one strike: quarantined %v rate %v banned %v", p.Quarantined("forger"), p.RateFor("forger"), p.Banned("forger"))
	}
	openCheck(t, p, 20, "b", "native/go", fv(1), true)
	if p.CopyFor("forger", "native/go", nil) != nil {
		t.Fatal("a struck volunteer was given a copy to compute")
	}
}

func TestSpotCheckMajorityStrikesCopy(t *testing.T) {
	p, _ := newSpotTest(0.05)
	openCheck(t, p, 1, "a", "x", fv(1, 2, 3), true)
	copyTo(t, p, 2, "liar", "x", fv(9, 9, 9), nil)
	o := refereeDecides(t, p, fv(1, 2, 3))
	if len(o.Struck) != 1 || o.Struck[0] != "liar" || len(o.Refute) != 1 || o.Refute[0].Volunteer != "liar" || len(o.Credit) != 0 {
		t.Fatalf("outcome %+v, want the copy's volunteer struck and the credit its disputed copy got taken back, nobody credited (the primary was when applied)", o)
	}
	if p.Standing("a").Passed != 1 || p.Standing("a").Strikes != 0 {
		t.Fatalf("the honest primary's standing %+v, want one pass", p.Standing("a"))
	}
}

// Colluding forgers cannot frame an honest volunteer: one lies on the copy
// of an honest primary, and its partner, though established (the pair
// passed checks of each other's results) and asking for work, gets no
// third copy to second the lie. The coordinator's recomputation decides:
// the liar is struck, the honest volunteer keeps a clean record.
func TestSpotCheckColludersCannotFrameAnHonestPrimary(t *testing.T) {
	p, _ := newSpotTest(0.05)
	p.vols["f1"] = &Trust{Passed: newcomerChecks + 5, Hint: "x"}
	p.vols["f2"] = &Trust{Passed: newcomerChecks + 5, Hint: "x"}
	p.vols["h"] = &Trust{Passed: newcomerChecks + 5, Hint: "x"}
	connected := map[string]string{"f1": "x", "f2": "x", "h": "x"}
	openCheck(t, p, 1, "h", "x", fv(1, 2, 3), true)
	if o := copyTo(t, p, 2, "f1", "x", fv(-5, -5, -5), connected); o.Done {
		t.Fatalf("the lying copy settled the check: %+v", o)
	}
	if c := p.CopyFor("f2", "x", connected); c != nil {
		t.Fatal("the liar's partner was offered the mismatched check's third copy")
	}
	o := refereeDecides(t, p, fv(1, 2, 3.0001))
	if len(o.Struck) != 1 || o.Struck[0] != "f1" {
		t.Fatalf("outcome %+v, want the lying copy struck", o)
	}
	if h := p.Standing("h"); h.Strikes != 0 || p.Quarantined("h") {
		t.Fatalf("the honest primary's standing %+v: framed", h)
	}
}

// Results with a tiny norm (a batch the model already fits) that differ
// by rounding agree against the job's typical update norm.
func TestSpotCheckTinyUpdatesAgainstReferenceNorm(t *testing.T) {
	p, _ := newSpotTest(0.05)
	openCheck(t, p, 1, "a", "x", fv(1e-4, 0), true)
	if o := copyTo(t, p, 2, "b", "y", fv(1.1e-4, 0), nil); o.Done {
		t.Fatalf("without a reference norm a 10%% difference agreed: %+v", o)
	}
	p, _ = newSpotTest(0.05)
	p.RefNorm = 1
	openCheck(t, p, 1, "a", "x", fv(1e-4, 0), true)
	if o := copyTo(t, p, 2, "b", "y", fv(1.1e-4, 0), nil); !o.Done || !o.Agreed {
		t.Fatalf("a rounding difference of a tiny update did not agree: %+v", o)
	}
	openCheck(t, p, 3, "a", "x", fv(1, 0), true)
	if o := copyTo(t, p, 4, "b", "y", fv(-1, 0), nil); o.Done {
		t.Fatalf("a sign flip agreed: %+v", o)
	}
}

// A disagreement just past the tolerance (an honest outlier) strikes
// nobody even when the third sides with one of the two.
func TestSpotCheckSmallDisagreementStrikesNobody(t *testing.T) {
	p, _ := newSpotTest(0.05) // tolerance 1e-3
	openCheck(t, p, 1, "a", "x", fv(1, 0), true)
	copyTo(t, p, 2, "b", "y", fv(1, 0.002), nil)
	o := refereeDecides(t, p, fv(1, 0))
	if !o.Done || len(o.Struck) != 0 || p.Counters.Undecided != 1 {
		t.Fatalf("outcome %+v counters %+v: want undecided, nobody struck", o, p.Counters)
	}
}

func TestSpotCheckNoMajorityStrikesNobody(t *testing.T) {
	p, _ := newSpotTest(0.05)
	openCheck(t, p, 1, "a", "x", fv(1, 0, 0), true)
	copyTo(t, p, 2, "b", "x", fv(0, 1, 0), nil)
	o := refereeDecides(t, p, fv(0, 0, 1))
	if !o.Done || len(o.Struck) != 0 || p.Counters.Undecided != 1 {
		t.Fatalf("outcome %+v counters %+v, want undecided and no strike", o, p.Counters)
	}
}

func TestSpotCheckHeldPrimaryCreditedOnlyWhenAgreed(t *testing.T) {
	p, _ := newSpotTest(0.05)
	openCheck(t, p, 1, "a", "x", fv(1, 2), false)
	p.checks[1].Results[0].Held = true
	o := copyTo(t, p, 2, "b", "x", fv(1, 2), nil)
	if len(o.Credit) != 2 {
		t.Fatalf("credit %+v, want the copy and the held primary", o.Credit)
	}
	openCheck(t, p, 5, "a", "x", fv(5, 5), false)
	p.checks[5].Results[0].Held = true
	copyTo(t, p, 6, "b", "x", fv(1, 2), nil)
	o = refereeDecides(t, p, fv(1, 2))
	for _, r := range o.Credit {
		if r.Volunteer == "a" {
			t.Fatal("a held result the majority refuted was credited")
		}
	}
	if len(o.Refute) != 0 {
		t.Fatalf("refuted %+v: a held result was never credited, there is nothing to take back", o.Refute)
	}
}

func TestSpotCheckBanAtStrikes(t *testing.T) {
	p, _ := newSpotTest(0.05)
	for i := range 3 {
		id := uint64(10 * (i + 1))
		openCheck(t, p, id, "f", "x", fv(-1, -1), true)
		copyTo(t, p, id+1, "b", "x", fv(1, 1), nil)
		o := refereeDecides(t, p, fv(1, 1))
		banned := len(o.Banned) == 1 && o.Banned[0] == "f"
		if banned != (i == 2) {
			t.Fatalf("strike %d: banned %v, want a ban at the third", i+1, o.Banned)
		}
	}
	if !p.Banned("f") || p.Counters.Bans != 1 || p.Counters.Strikes != 3 {
		t.Fatalf("banned %v counters %+v", p.Banned("f"), p.Counters)
	}
	openCheck(t, p, 99, "b", "x", fv(1), true)
	if p.CopyFor("f", "x", nil) != nil {
		t.Fatal("a banned volunteer was offered a copy")
	}
	if !p.SyncStrikes("g", 3) || p.SyncStrikes("h", 1) {
		t.Fatal("strikes counted by the ledger do not ban at the limit")
	}
	// A pardon in the ledger clears the strikes and the ban here too.
	p.SetStanding("f", 0, false)
	if p.Banned("f") || p.Quarantined("f") {
		t.Fatal("a pardoned volunteer is still banned or held")
	}
}

func TestSpotCheckAdaptiveRate(t *testing.T) {
	p, _ := newSpotTest(0.05)
	if r := p.RateFor("new"); r != 0.2 {
		t.Fatalf("newcomer rate %v, want 4x 0.05", r)
	}
	p.trust("regular").Passed = newcomerChecks
	p.trust("trusted").Passed = trustedChecks
	p.trust("struck").Strikes = 1
	for v, want := range map[string]float64{"regular": 0.05, "trusted": 0.025, "struck": 1} {
		if r := p.RateFor(v); r != want {
			t.Errorf("%s: rate %v, want %v", v, r, want)
		}
	}
	off, _ := newSpotTest(0)
	off.trust("struck").Strikes = 1
	if off.RateFor("struck") != 0 || off.Select("struck") {
		t.Error("spot_check 0 still checks")
	}
	// The draw follows the rate: about 20% of a newcomer's results.
	n := 0
	for range 10000 {
		if p.Select("new") {
			n++
		}
	}
	if n < 1800 || n > 2200 {
		t.Errorf("%d of 10000 drawn at rate 0.2", n)
	}
}

func TestSpotCheckPendingBound(t *testing.T) {
	p, _ := newSpotTest(1)
	p.trust("s").Strikes = 1 // always selected
	for i := range p.MaxPending {
		if !p.Select("s") {
			t.Fatalf("draw %d not selected at rate 1", i)
		}
		openCheck(t, p, uint64(i+1), "s", "x", fv(1), true)
	}
	if p.Select("s") || p.Counters.Skipped != 1 {
		t.Fatalf("selected past the bound of %d pending; skipped %d", p.MaxPending, p.Counters.Skipped)
	}
}

func TestSpotCheckExpiry(t *testing.T) {
	p, clock := newSpotTest(0.05)
	c := openCheck(t, p, 1, "a", "x", fv(1), true)
	p.Copied(c, 2, "b", 8)
	if !p.Needs(3) {
		t.Fatal("a waiting check does not keep its base version")
	}
	p.CopyGone(2)
	if p.CopyFor("b", "x", nil) == nil {
		t.Fatal("a copy that expired is not offered again")
	}
	clock.t = clock.t.Add(p.Timeout + time.Second)
	if got := p.Expire(); len(got) != 1 || p.Pending() != 0 || p.Counters.Expired != 1 || p.Needs(3) {
		t.Fatalf("expired %d, pending %d, counters %+v", len(got), p.Pending(), p.Counters)
	}
	// A copy still out when its check expired stays known as a copy (its
	// result must not pass for a primary's), and is answered with no.
	c = openCheck(t, p, 5, "a", "x", fv(1), true)
	p.Copied(c, 6, "b", 8)
	clock.t = clock.t.Add(p.Timeout + time.Second)
	p.Expire()
	if !p.IsCopy(6) {
		t.Fatal("the copy of an expired check is no longer known as a copy")
	}
	if _, ok := p.Answer(6, SpotResult{Volunteer: "b", Update: fv(1)}); ok || p.IsCopy(6) {
		t.Fatal("a copy of an expired check was answered, or stays known after its result")
	}
}

// Copies go to established volunteers while one is free to take it,
// whatever backend anyone claims: newcomers claiming the primary's own
// backend (a coalition) do not check it.
func TestSpotCheckPrefersEstablishedVolunteers(t *testing.T) {
	p, clock := newSpotTest(0.05)
	p.vols["old"] = &Trust{Passed: newcomerChecks, Hint: "native/avx2"}
	openCheck(t, p, 1, "a", "native/attack", fv(1), true)
	connected := map[string]string{"a": "native/attack", "b": "native/attack", "old": "native/avx2"}
	if p.CopyFor("b", "native/attack", connected) != nil {
		t.Fatal("a copy went to a newcomer claiming the primary's backend while an established volunteer was connected")
	}
	if p.CopyFor("old", "native/avx2", connected) == nil {
		t.Fatal("no copy for the established volunteer")
	}
	delete(connected, "old")
	if p.CopyFor("b", "native/attack", connected) == nil {
		t.Fatal("no copy for a newcomer while no established volunteer is connected")
	}
	connected["old"] = "native/avx2"
	clock.t = clock.t.Add(p.Timeout/2 + time.Second)
	if p.CopyFor("b", "native/attack", connected) == nil {
		t.Fatal("a check waited past half its time for an established volunteer")
	}
	p.vols["old"].Strikes = 1
	clock.t = clock.t.Add(-p.Timeout/2 - time.Second)
	if p.CopyFor("b", "native/attack", connected) == nil {
		t.Fatal("a check waited for a struck volunteer")
	}
}

func TestSpotCheckDeterministicClass(t *testing.T) {
	p, _ := newSpotTest(0.05)
	openCheck(t, p, 1, "a", "browser/wasm", fv(1, 2, 3), true)
	copyTo(t, p, 2, "b", "browser/wasm", fv(1, 2, 3), nil)
	if !p.sameClass("a", "b") {
		t.Fatal("bit-identical results did not make one class")
	}
	// A pair of the class that now differs within tolerance (a kernel
	// changed) agrees, leaves its class, and nobody is struck.
	openCheck(t, p, 3, "a", "browser/wasm", fv(1, 2, 3), true)
	o := copyTo(t, p, 4, "b", "browser/wasm", fv(1, 2, 3.0000002), nil)
	if !o.Done || !o.Agreed || p.sameClass("a", "b") || p.Counters.ClassBreaks != 1 {
		t.Fatalf("outcome %+v, class kept %v, counters %+v", o, p.sameClass("a", "b"), p.Counters)
	}
	openCheck(t, p, 5, "a", "browser/wasm", fv(1, 2, 3), true)
	copyTo(t, p, 6, "b", "browser/wasm", fv(1, 2, 3), nil)
	// A volunteer that claims another backend leaves its class.
	p.noteHint("b", "native/go")
	if p.sameClass("a", "b") {
		t.Fatal("a volunteer kept its class under another backend")
	}
}

func TestDistance(t *testing.T) {
	if d, ex := Distance(fv(3, 4), fv(3, 4)); d != 0 || !ex {
		t.Fatalf("same: %v %v", d, ex)
	}
	if d, _ := Distance(fv(3, 4), fv(-3, -4)); math.Abs(d-2) > 1e-12 {
		t.Fatalf("opposite: %v, want 2", d)
	}
	if d, _ := Distance(fv(float32(math.NaN())), fv(1)); !math.IsInf(d, 1) {
		t.Fatalf("NaN: %v", d)
	}
	if d, _ := Distance(fv(1), fv(1, 2)); !math.IsInf(d, 1) {
		t.Fatalf("lengths differ: %v", d)
	}
	// A tiny update is measured against the reference norm.
	if d, _ := DistanceAtLeast(fv(0.003, 0), fv(0.004, 0), 1); math.Abs(d-0.001) > 1e-9 {
		t.Fatalf("against a reference of 1: %v, want 0.001", d)
	}
	if d, _ := DistanceAtLeast(fv(3, 0), fv(4, 0), 1); math.Abs(d-0.25) > 1e-7 {
		t.Fatalf("above the reference: %v, want 0.25", d)
	}
}

// A volunteer forging 10% of its results (sign-flipped) among honest
// volunteers of three kernels whose results differ by cross-kernel
// rounding is struck within its own first 1,000 tasks in at least 99 of
// 100 seeded runs, at the default rate.
func TestSpotCheckCatchesTenPercentForger(t *testing.T) {
	hints := map[string]string{"h1": "native/avx2", "h2": "native/go", "h3": "browser/wasm", "f": "native/avx2"}
	order := []string{"h1", "h2", "h3", "f"}
	caught, falseStrikes := 0, 0
	var firsts []int // the forger's tasks until its first strike, per run
	for seed := range uint64(100) {
		clock := &spotClock{t: time.Unix(0, 0)}
		p := NewSpotChecks(seed, DefaultSpotCheckRate, DefaultSpotCheckStrikes, DefaultSpotCheckTolerance, clock.now)
		rng := rand.New(rand.NewPCG(seed, 7))
		truth := make([]float32, 256)
		result := func(v string, forged bool) []float32 {
			out := make([]float32, len(truth))
			// Each kernel rounds differently: relative 1e-5 apart.
			krng := rand.New(rand.NewPCG(uint64(len(hints[v])), uint64(hints[v][len(hints[v])-1])))
			for i, x := range truth {
				out[i] = x * float32(1+1e-5*krng.NormFloat64())
				if forged {
					out[i] = -out[i]
				}
			}
			return out
		}
		forgerTasks, id := 0, uint64(0)
		for forgerTasks < 1000 && p.Standing("f").Strikes == 0 {
			for i := range truth {
				truth[i] = float32(rng.NormFloat64())
			}
			v := order[int(id)%len(order)]
			id++
			forged := false
			if v == "f" {
				forgerTasks++
				forged = rng.Float64() < 0.1
			}
			if !p.Select(v) {
				continue
			}
			p.Open(Lease{ID: id, Base: 1, Task: Task{Count: 64}}, SpotResult{Volunteer: v, Hint: hints[v], Update: result(v, forged), Examples: 64, Applied: true})
			for _, o := range order { // the others ask for work in turn
				id++
				c := p.CopyFor(o, hints[o], hints)
				if c == nil {
					continue
				}
				p.Copied(c, id, o, 64)
				out, _ := p.Answer(id, SpotResult{Volunteer: o, Hint: hints[o], Update: result(o, o == "f" && rng.Float64() < 0.1), Examples: 64})
				for _, c := range p.Unresolved() { // the coordinator decides a mismatch
					p.Refereeing(c)
					out, _ = p.Resolve(c, SpotResult{Update: slices.Clone(truth), Examples: 64})
				}
				for _, s := range out.Struck {
					if s != "f" {
						falseStrikes++
					}
				}
			}
		}
		if p.Standing("f").Strikes > 0 {
			caught++
			firsts = append(firsts, forgerTasks)
		}
	}
	if caught < 99 || falseStrikes != 0 {
		t.Fatalf("forger struck within 1000 tasks in %d of 100 runs (want >= 99); %d honest strikes", caught, falseStrikes)
	}
	slices.Sort(firsts)
	t.Logf("forger struck within 1000 tasks in %d of 100 runs: its first strike came at its task %d (median), %d (90th percentile), %d (last)",
		caught, firsts[len(firsts)/2], firsts[len(firsts)*9/10], firsts[len(firsts)-1])
}

// A refused result is checked at its volunteer's rate, one at a time per
// volunteer: a liar whose
// results are all refused is struck all the same, and an honest one the
// coordinator refused by bad luck is neither struck nor credited.
func TestSpotCheckRefusedResults(t *testing.T) {
	p, _ := newSpotTest(0.25) // a newcomer's rate is 1: every draw checks
	if !p.SelectRefused("liar") {
		t.Fatal("the first refused result of a volunteer was not checked")
	}
	p.Open(Lease{ID: 1, Base: 3, Task: Task{Count: 8}}, SpotResult{Volunteer: "liar", Update: fv(-19, -38, -57), Examples: 8})
	if p.SelectRefused("liar") {
		t.Fatal("a second refused result was checked while the first one's check waits")
	}
	if !p.SelectRefused("unlucky") {
		t.Fatal("another volunteer's refused result was not checked")
	}
	p.Open(Lease{ID: 2, Base: 3, Task: Task{Count: 8}}, SpotResult{Volunteer: "unlucky", Update: fv(4, 5, 6), Examples: 8})
	copyTo(t, p, 3, "b", "native/go", fv(1, 2, 3), nil) // the liar's (the oldest check)
	o := copyTo(t, p, 4, "b", "native/go", fv(4, 5, 6), nil)
	if !o.Done || !o.Agreed || len(o.Credit) != 1 || o.Credit[0].Volunteer != "b" || len(o.Struck) != 0 {
		t.Fatalf("the unlucky volunteer's check: %+v; want only the copy credited, nobody struck", o)
	}
	if p.Standing("unlucky").Passed != 1 {
		t.Fatalf("the unlucky volunteer's standing %+v: an agreeing check is a pass", p.Standing("unlucky"))
	}
	o = refereeDecides(t, p, fv(1, 2, 3))
	if len(o.Struck) != 1 || o.Struck[0] != "liar" || len(o.Refute) != 0 {
		t.Fatalf("the liar's check: %+v; want it struck, nothing refuted (nothing was applied)", o)
	}
	if p.SelectRefused("liar") {
		t.Fatal("a struck volunteer's refused result opened a check (its results are all held and checked already)")
	}
	if p.Counters.RefusedChecked != 2 {
		t.Fatalf("refused_checked %d, want 2", p.Counters.RefusedChecked)
	}
}

// A check abandoned (its base version is gone) goes at once, counted as
// expired; its copy still out stays known as a copy and is answered no;
// abandoning it again changes nothing.
func TestSpotCheckAbandon(t *testing.T) {
	p, _ := newSpotTest(0.05)
	c := openCheck(t, p, 1, "a", "x", fv(1), true)
	p.Copied(c, 2, "b", 8)
	p.Abandon(c)
	if p.Pending() != 0 || p.Counters.Expired != 1 || p.Needs(3) || p.CopyFor("c", "y", nil) != nil {
		t.Fatalf("after Abandon: pending %d, counters %+v, base still needed %v", p.Pending(), p.Counters, p.Needs(3))
	}
	if !p.IsCopy(2) {
		t.Fatal("the copy of an abandoned check is no longer known as a copy")
	}
	if _, ok := p.Answer(2, SpotResult{Volunteer: "b", Update: fv(1)}); ok {
		t.Fatal("a copy of an abandoned check was answered")
	}
	p.Abandon(c)
	if p.Counters.Expired != 1 {
		t.Errorf("abandoning twice counted %d expired", p.Counters.Expired)
	}
}
