package engine

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// quadratic is L(w) = ½‖w − opt‖², whose gradient at w is w − opt; calls
// counts its evaluations.
type quadratic struct {
	opt   []float32
	calls int
}

func (q *quadratic) loss(w []float32) float64 {
	q.calls++
	s := 0.0
	for i, v := range w {
		d := float64(v) - float64(q.opt[i])
		s += d * d
	}
	return s / 2
}

// The descent score on a quadratic, by hand: from w = (2, 0) with
// opt = 0, the gradient (2, 0) and γ = 0.5 reach (1, 0): 2 − 0.5 −
// ρ·1 = 1.499 with ρ = 1e-3. The sign-flipped one climbs to (3, 0).
func TestZenoScoreByHand(t *testing.T) {
	q := &quadratic{opt: vec(0, 0)}
	z := &Zeno{Loss: q.loss, Gamma: 0.5, Rho: 1e-3, Margin: 0.02}
	w := vec(2, 0)
	s, before, after := z.Score(1, w, vec(2, 0))
	if math.Abs(s-1.499) > 1e-9 || before != 2 || after != 0.5 {
		t.Fatalf("score %v (before %v, after %v), want 1.499 (2, 0.5)", s, before, after)
	}
	s, _, after = z.Score(1, w, vec(-2, 0))
	if math.Abs(s-(2-4.5-1e-3)) > 1e-9 || after != 4.5 {
		t.Fatalf("sign flip: score %v, after %v", s, after)
	}
	// L(w) is computed once per version: 3 calls for two scores.
	if q.calls != 3 {
		t.Fatalf("%d loss evaluations for two scores at one version, want 3", q.calls)
	}
	z.Score(2, w, vec(2, 0))
	if q.calls != 5 {
		t.Fatalf("a new version did not recompute L(w): %d calls", q.calls)
	}
}

// Check lets a descending update through and refuses one that climbs
// beyond the margin, a huge one (whose step overflows) and a NaN one,
// saying that the coordinator's validation refused it; a tiny climb
// within the margin passes.
func TestZenoCheck(t *testing.T) {
	q := &quadratic{opt: vec(0, 0, 0)}
	z := &Zeno{Loss: q.loss, Gamma: 0.1, Rho: DefaultZenoRho, Margin: DefaultZenoMargin}
	w := vec(1, -1, 2) // L = 3
	g := vec(1, -1, 2)
	if d := z.Check(1, w, g); d != "" {
		t.Fatalf("honest gradient refused: %s", d)
	}
	for _, tc := range []struct {
		name string
		u    []float32
	}{
		{"signflip", scaled(g, -1)},
		{"scale 19x", scaled(g, -19)},
		{"huge", scaled(g, 1e30)},
		{"nan", vec(float32(math.NaN()), 0, 0)},
	} {
		d := z.Check(1, w, tc.u)
		if d == "" || !strings.Contains(d, "the coordinator's validation refused it") {
			t.Errorf("%s: %q, want refused by validation", tc.name, d)
		}
	}
	// Orthogonal and small: the loss rises by ½γ²‖u‖² = 0.005·0.5, within
	// 2% of 3.
	if d := z.Check(1, w, vec(1, 1, 0)); d != "" {
		t.Errorf("a step within the margin was refused: %s", d)
	}
	if z.Checked != 6 || z.Refused != 4 {
		t.Errorf("checked %d, refused %d; want 6 and 4", z.Checked, z.Refused)
	}
}

// A broken model (L(w) not finite) is no yardstick: nothing is refused
// for it.
func TestZenoBrokenModelRefusesNothing(t *testing.T) {
	z := &Zeno{Loss: func([]float32) float64 { return math.Inf(1) }, Gamma: 1, Margin: 0.02}
	if d := z.Check(1, vec(1), vec(1)); d != "" {
		t.Fatalf("refused against a non-finite loss: %s", d)
	}
}

// validator returns a Validate hook over a quadratic whose optimum is
// opt, at the parameters *w, and records the updates it was asked about.
func validator(opt []float32, w *[]float32, asked *[][]float32) func(u []float32) string {
	q := &quadratic{opt: opt}
	z := &Zeno{Loss: q.loss, Gamma: 0.1, Rho: DefaultZenoRho, Margin: DefaultZenoMargin}
	version := int64(0)
	return func(u []float32) string {
		*asked = append(*asked, slices.Clone(u))
		version++ // the model moves between calls in these tests
		return z.Check(version, *w, u)
	}
}

// A lone first worker whose update climbs (huge, sign-flipped) is
// refused as quarantined and does not end the warm-up or set the scale;
// the honest worker that comes next does.
func TestAsyncWarmupValidatesTheLoneFirstResult(t *testing.T) {
	w := vec(1, 1)
	var asked [][]float32
	a := &Async{MaxStaleness: 8, Clip: NewClipper(2, 1.5, 10*time.Second)}
	a.Validate = validator(vec(0, 0), &w, &asked)
	a.Clip.Active = 1
	for _, bad := range [][]float32{vec(-1e6, -1e6), vec(-19, -19)} {
		d := a.Offer(Contribution{Update: bad, Worker: "evil"})
		if d.Accepted || d.Reason != ReasonQuarantined || !strings.Contains(d.Detail, "validation refused") {
			t.Fatalf("lone hostile first result %v: %+v, want quarantined", bad, d)
		}
		if _, ok := a.Ready(time.Time{}); ok || a.Clip.Seeded() {
			t.Fatal("a refused result ended the warm-up")
		}
	}
	if d := a.Offer(Contribution{Update: vec(1, 1), Worker: "a"}); !d.Accepted {
		t.Fatalf("honest result refused: %+v", d)
	}
	s, ok := a.Ready(time.Time{})
	if !ok || s.Results != 1 {
		t.Fatalf("the honest result did not end the warm-up: %+v", s)
	}
	near(t, "warm-up step", s.Update, []float64{1, 1})
	if r := a.Clip.Radius(); math.Abs(r-1.5*math.Sqrt2) > 1e-6 {
		t.Fatalf("radius %v, want tau × the honest norm %v", r, 1.5*math.Sqrt2)
	}
	if len(asked) != 3 {
		t.Fatalf("validated %d warm-up results, want 3", len(asked))
	}
}

// After the warm-up, only flagged updates are validated: one outside the
// radius, or one pointing against the centre. An honest one inside the
// radius is not; a refused one leaves the clip (radius, centre) and the
// momentum as they were.
func TestAsyncValidatesOnlyFlaggedUpdates(t *testing.T) {
	w := vec(1, 1)
	var asked [][]float32
	a := &Async{MaxStaleness: 8, Clip: NewClipper(2, 1.5, 10*time.Second)}
	a.Clip.Momentum = 0.5
	a.Clip.Active = 1
	a.Offer(Contribution{Update: vec(1, 1), Worker: "a", Volunteer: "va"})
	a.Ready(time.Time{})
	a.Validate = validator(vec(0, 0), &w, &asked)
	// Inside the radius and along the centre: not validated.
	if d := a.Offer(Contribution{Update: vec(1.1, 0.9), Worker: "a", Volunteer: "va"}); !d.Accepted || d.Clipped {
		t.Fatalf("honest update: %+v", d)
	}
	a.Ready(time.Time{})
	if len(asked) != 0 {
		t.Fatalf("an unflagged update was validated: %v", asked)
	}
	radius, centre, mom := a.Clip.Radius(), slices.Clone(a.Clip.centre), slices.Clone(a.Clip.mom["va"].m)
	// Small but against the centre (inner-product manipulation), and
	// huge: both validated and refused, and nothing moved.
	for _, bad := range [][]float32{vec(-0.5, -0.5), vec(-50, -50)} {
		d := a.Offer(Contribution{Update: bad, Worker: "a", Volunteer: "va"})
		if d.Accepted || d.Reason != ReasonQuarantined {
			t.Fatalf("%v: %+v, want quarantined", bad, d)
		}
		if _, ok := a.Ready(time.Time{}); ok {
			t.Fatal("a refused update stepped")
		}
	}
	if len(asked) != 2 {
		t.Fatalf("validated %d updates, want the 2 flagged ones", len(asked))
	}
	if a.Clip.Radius() != radius || !slices.Equal(a.Clip.centre, centre) || !slices.Equal(a.Clip.mom["va"].m, mom) {
		t.Fatal("a refused update moved the clip or the momentum")
	}
	// Flagged (outside the radius) but descending: validated, applied
	// clipped.
	d := a.Offer(Contribution{Update: vec(8, 8), Worker: "a", Volunteer: "va"})
	if !d.Accepted || !d.Clipped || !(d.Norm > 0) {
		t.Fatalf("a descending flagged update: %+v, want accepted clipped with its applied norm", d)
	}
	if len(asked) != 3 {
		t.Fatalf("validated %d, want 3", len(asked))
	}
}

// Worker momentum is kept per volunteer: a volunteer's second worker
// continues its momentum, and at most MomentumBytes of it are kept, the
// least recently used dropped first.
func TestClipperMomentumPerVolunteerIsBounded(t *testing.T) {
	a := &Async{MaxStaleness: 8, Clip: NewClipper(1, 100, time.Second)}
	a.Clip.Momentum = 0.5
	a.Clip.MomentumBytes = 2 * 4 // two volunteers of one float32
	a.Clip.Active = 1
	a.Offer(Contribution{Update: vec(2), Worker: "w1", Volunteer: "v"})
	a.Ready(time.Time{})
	a.Offer(Contribution{Update: vec(2), Worker: "w1", Volunteer: "v"})
	a.Ready(time.Time{})
	// Another connection of the same volunteer: m = 0.5·2 + 0.5·4.
	a.Offer(Contribution{Update: vec(4), Worker: "w2", Volunteer: "v"})
	s, _ := a.Ready(time.Time{})
	near(t, "same volunteer, new worker", s.Update, []float64{3})
	a.Offer(Contribution{Update: vec(1), Worker: "x", Volunteer: "x"})
	a.Ready(time.Time{})
	if a.Clip.Momenta() != 2 {
		t.Fatalf("%d momenta kept, want 2", a.Clip.Momenta())
	}
	// A third volunteer drops the least recently used (v).
	a.Offer(Contribution{Update: vec(1), Worker: "y", Volunteer: "y"})
	a.Ready(time.Time{})
	if a.Clip.Momenta() != 2 || a.Clip.mom["v"] != nil || a.Clip.mom["x"] == nil {
		t.Fatalf("momenta after a third volunteer: %d kept, v kept %v, x kept %v", a.Clip.Momenta(), a.Clip.mom["v"] != nil, a.Clip.mom["x"] != nil)
	}
	// v starts again from its update.
	a.Offer(Contribution{Update: vec(5), Worker: "w1", Volunteer: "v"})
	s, _ = a.Ready(time.Time{})
	near(t, "dropped volunteer", s.Update, []float64{5})
}

// A clip's state put into a fresh clip gives the same radius and clips
// the next update the same way; a state that does not fit is refused,
// naming what is wrong.
func TestClipperStateRoundTrip(t *testing.T) {
	a := &Async{MaxStaleness: 8, Clip: NewClipper(2, 1.5, time.Second)}
	if _, ok := a.Clip.State(); ok {
		t.Fatal("a state before the warm-up")
	}
	a.Clip.Active = 1
	for _, u := range [][]float32{vec(1, 1), vec(1.2, 0.8), vec(0.9, 1.1), vec(5, 5)} {
		a.Offer(Contribution{Update: u, Worker: "a"})
		a.Ready(time.Time{})
	}
	st, ok := a.Clip.State()
	if !ok {
		t.Fatal("no state after the warm-up")
	}
	b := &Async{MaxStaleness: 8, Clip: NewClipper(2, 1.5, time.Second)}
	if err := b.Clip.SetState(st); err != nil {
		t.Fatal(err)
	}
	if !b.Clip.Seeded() || b.Clip.Radius() != a.Clip.Radius() {
		t.Fatalf("radius %v after SetState, want %v", b.Clip.Radius(), a.Clip.Radius())
	}
	da := a.Offer(Contribution{Update: vec(-9, 9), Worker: "a"})
	sa, _ := a.Ready(time.Time{})
	db := b.Offer(Contribution{Update: vec(-9, 9), Worker: "a"})
	sb, _ := b.Ready(time.Time{})
	if da != db || !slices.Equal(sa.Update, sb.Update) {
		t.Fatalf("restored clip decided %+v %v, the original %+v %v", db, sb.Update, da, sa.Update)
	}
	for _, tc := range []struct {
		name string
		s    ClipState
		want string
	}{
		{"short centre", ClipState{Centre: vec(1), Dists: []float64{1}}, "centre has 1 values"},
		{"no distances", ClipState{Centre: vec(1, 1)}, "window holds 0"},
		{"position", ClipState{Centre: vec(1, 1), Dists: []float64{1}, Next: 3}, "position 3"},
		{"nan centre", ClipState{Centre: vec(float32(math.NaN()), 1), Dists: []float64{1}}, "NaN"},
		{"negative distance", ClipState{Centre: vec(1, 1), Dists: []float64{-1}}, "distance -1"},
	} {
		err := NewClipper(2, 1.5, time.Second).SetState(tc.s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// Validation that refuses half of the recent volunteers is not facing a
// hostile minority but a model in trouble: flagged results then pass
// unvalidated (clipped) rather than freeze the job. One hostile
// volunteer of three stays refused however often it sends.
func TestAsyncValidationStepsAsideWhenItRefusesHalf(t *testing.T) {
	for _, tc := range []struct {
		name        string
		who         func(i int) (string, bool) // the i-th result's sender, and whether it is hostile
		unvalidated bool
	}{
		{"one volunteer of three, sending most", func(i int) (string, bool) {
			if i%5 < 3 {
				return "evil", true
			}
			return []string{"a", "b"}[i%5-3], false
		}, false},
		{"every volunteer refused", func(i int) (string, bool) { return []string{"a", "b"}[i%2], true }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Async{MaxStaleness: 8, Clip: NewClipper(1, 1.5, time.Second)}
			a.Clip.Active = 1
			a.Offer(Contribution{Update: vec(1), Worker: "a"})
			a.Ready(time.Time{})
			a.Validate = func(u []float32) string {
				if u[0] < 0 {
					return "refused"
				}
				return ""
			}
			hostileApplied := 0
			for i := range 200 {
				who, bad := tc.who(i)
				u := vec(1)
				if bad {
					u = vec(-1)
				}
				d := a.Offer(Contribution{Update: u, Worker: who})
				if d.Accepted && bad {
					hostileApplied++
				}
				a.Ready(time.Time{})
			}
			if tc.unvalidated != (a.Unvalidated > 0) || tc.unvalidated != (hostileApplied > 0) {
				t.Fatalf("%d let through unvalidated, %d hostile applied", a.Unvalidated, hostileApplied)
			}
		})
	}
}

// In rounds, every result of the first round is validated, and after it
// a result that looks hostile beside the previous aggregate (against it,
// or far outside the last round's spread): refused, it is not held for
// the round. Honest ones are not validated.
func TestRoundsValidateFlaggedResults(t *testing.T) {
	w := vec(1, 1)
	var asked [][]float32
	r := NewRounds(3, 0, time.Minute, 2)
	r.Robust = Robust{Method: RobustCenteredClip, Tau: 1.5, Iterations: 3, Bucket: 1}
	r.Validate = validator(vec(0, 0), &w, &asked)
	for _, u := range [][]float32{vec(1, 1), vec(1.1, 0.9), vec(0.9, 1.1)} {
		if d := r.Offer(Contribution{Update: u, Round: 1}); !d.Accepted {
			t.Fatalf("round 1: %+v", d)
		}
	}
	if _, ok := r.Ready(time.Time{}); !ok {
		t.Fatal("round 1 did not close")
	}
	if len(asked) != 3 {
		t.Fatalf("the first round validated %d results, want all 3 (nothing to compare with)", len(asked))
	}
	asked = nil
	if d := r.Offer(Contribution{Update: vec(1.05, 0.95), Round: 2}); !d.Accepted || len(asked) != 0 {
		t.Fatalf("honest result: %+v, %d validated", d, len(asked))
	}
	for _, bad := range [][]float32{vec(-19, -19), vec(-0.5, -0.5)} {
		d := r.Offer(Contribution{Update: bad, Round: 2})
		if d.Accepted || d.Reason != ReasonQuarantined {
			t.Fatalf("%v: %+v, want quarantined", bad, d)
		}
	}
	if len(asked) != 2 || r.results != 1 {
		t.Fatalf("%d validated, %d held; want 2 and 1", len(asked), r.results)
	}
}

// The noise floor follows the spread of the observed scores: none before
// zenoMinSamples, then the median less zenoSpread robust deviations,
// never below −zenoMaxRise, and a hostile quarter of the sample barely
// moves it.
func TestZenoFloorFollowsHonestSpread(t *testing.T) {
	z := &Zeno{Margin: DefaultZenoMargin}
	record := func(rel float64) {
		z.honest[z.pos] = rel
		z.pos = (z.pos + 1) % zenoWindow
		z.nHonest = min(z.nHonest+1, zenoWindow)
	}
	for i := range zenoMinSamples - 1 {
		record(float64(i%5-2) * 0.05) // −0.1 .. 0.1
	}
	if f := z.Floor(); f != -DefaultZenoMargin {
		t.Fatalf("floor %v before %d samples, want the margin", f, zenoMinSamples)
	}
	for i := range zenoWindow {
		record(float64(i%5-2) * 0.05)
	}
	// Median 0, MAD 0.05: 0 − zenoSpread × 1.4826 × 0.05.
	want := -zenoSpread * 1.4826 * 0.05
	if f := z.Floor(); math.Abs(f-want) > 1e-9 {
		t.Fatalf("floor %v, want %v", f, want)
	}
	// A tenth of the window hostile (scores of −50, had they been
	// accepted) moves the floor by less than a tenth; a quarter, to no
	// further than −zenoMaxRise.
	for range zenoWindow / 10 {
		record(-50)
	}
	if f := z.Floor(); f < want-0.1 {
		t.Fatalf("a hostile tenth moved the floor to %v (from %v)", f, want)
	}
	for range zenoWindow/4 - zenoWindow/10 {
		record(-50)
	}
	if f := z.Floor(); f < -zenoMaxRise {
		t.Fatalf("a hostile quarter moved the floor to %v, past the cap", f)
	}
	// Honest steps that all climb wildly: the floor stops at −zenoMaxRise.
	for i := range zenoWindow {
		record(float64(i%5-2) * 2)
	}
	if f := z.Floor(); f != -zenoMaxRise {
		t.Fatalf("floor %v for a wild spread, want %v", f, -zenoMaxRise)
	}
	// Tight honest scores: the margin still holds.
	for range zenoWindow {
		record(0.01)
	}
	if f := z.Floor(); f != -DefaultZenoMargin {
		t.Fatalf("floor %v for tight scores, want the margin %v", f, -DefaultZenoMargin)
	}
}
