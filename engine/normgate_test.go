package engine

import "testing"

// One volunteer answering every lease with zeros cannot drag the gate's
// reference down once three volunteers voted, however many updates it
// sends; before that the reference is the running mean it is given.
func TestNormReferenceOneVotePerVolunteer(t *testing.T) {
	var n normVotes
	if got := n.reference(1.5); got != 1.5 {
		t.Fatalf("no votes: reference %v, want the running mean 1.5", got)
	}
	for range 100 {
		n.observe("sybil", 0)
	}
	if got := n.reference(1.5); got != 0 {
		t.Fatalf("one volunteer of zeros: reference %v, want its own mean 0 (the gate is off at 0)", got)
	}
	n.observe("a", 2)
	if got := n.reference(0.04); got != 2 {
		t.Fatalf("two volunteers, one of them all zeros: reference %v, want the larger mean 2", got)
	}
	n.observe("b", 2.2)
	for range 1000 {
		n.observe("sybil", 0)
	}
	if got := n.reference(0.01); got != 2 {
		t.Fatalf("three volunteers, one of them all zeros: reference %v, want the median 2", got)
	}
	n.observe("c", 1.8)
	if got := n.reference(0); got != (1.8+2)/2 {
		t.Fatalf("four volunteers: reference %v, want the median %v", got, (1.8+2)/2)
	}
	// Each volunteer's own mean follows its recent norms.
	for range 3 * normVolunteerWindow {
		n.observe("a", 1)
	}
	if v := n.byVolunteer["a"]; v < 0.99 || v > 1.05 {
		t.Fatalf("volunteer a's mean %v after its norms fell to 1, want about 1", v)
	}
}

// The volunteers kept are bounded: the oldest leaves first.
func TestNormReferenceBounded(t *testing.T) {
	var n normVotes
	for i := range normVolunteers + 10 {
		n.observe(string(rune('A'+i)), float64(i))
	}
	if len(n.byVolunteer) != normVolunteers || len(n.order) != normVolunteers {
		t.Fatalf("%d volunteers kept (%d in order), want %d", len(n.byVolunteer), len(n.order), normVolunteers)
	}
	if _, ok := n.byVolunteer["A"]; ok {
		t.Fatal("the oldest volunteer was kept")
	}
}

// A struck volunteer's vote is dropped; a gate that refuses several
// volunteers in a row with nothing accepted between starts again, while
// one volunteer refused again and again does not reset it.
func TestNormReferenceGoesStale(t *testing.T) {
	var n normVotes
	for _, v := range []string{"x1", "x2", "x3", "x4"} {
		n.observe(v, 0.5)
	}
	n.observe("honest", 13)
	if got := n.reference(0); got != 0.5 {
		t.Fatalf("reference %v, want the colluders' 0.5", got)
	}
	n.forget("x1")
	n.forget("x2")
	n.forget("x3")
	if got := n.reference(0); got != 13 {
		t.Fatalf("after three of them were struck: reference %v, want the larger of the two left, 13", got)
	}
	for range 3 * NormStaleRun {
		if n.refused("huge") {
			t.Fatal("one volunteer refused again and again reset the reference")
		}
	}
	n.observe("honest", 13)
	for i := range NormStaleRun - 1 {
		if n.refused([]string{"a", "b"}[i%2]) {
			t.Fatalf("reset after %d refusals, want %d", i+1, NormStaleRun)
		}
	}
	if !n.refused("a") {
		t.Fatalf("no reset after %d refusals in a row from two volunteers", NormStaleRun)
	}
	if got := n.reference(0); got != 0 {
		t.Fatalf("after the reset: reference %v, want 0 (the gate off)", got)
	}
}

// The gate stays off through its warm-up, then limits at ratio times the
// reference; a stale run of refusals starts the warm-up again, and a
// near-zero update moves nothing only once the gate is warm.
func TestNormGateWarmsUpLimitsAndStartsAgain(t *testing.T) {
	var g NormGate
	if _, _, on := g.Limit(10); on {
		t.Fatal("the gate is on before any update was accepted")
	}
	for i := range NormWarmup {
		if nothing, _ := g.MovesNothing(10, 1e-9); nothing {
			t.Fatalf("a near-zero update refused in the warm-up, after %d", i)
		}
		g.Observe([]string{"a", "b", "c"}[i%3], 2)
	}
	limit, ref, on := g.Limit(10)
	if !on || ref != 2 || limit != 20 {
		t.Fatalf("after the warm-up: limit %v, reference %v, on %v; want 20, 2, true", limit, ref, on)
	}
	if _, _, on := g.Limit(0); on {
		t.Fatal("the gate is on at ratio 0 (max_update_norm_ratio off)")
	}
	if nothing, _ := g.MovesNothing(10, 1e-5); !nothing {
		t.Fatal("an update 1/200,000 of the reference moves something")
	}
	if nothing, _ := g.MovesNothing(10, 0.01); nothing {
		t.Fatal("an update 1/200 of the reference (a batch the model fits) moves nothing")
	}
	for i := range NormStaleRun - 1 {
		if g.Refused([]string{"x", "y"}[i%2]) {
			t.Fatalf("started again after %d refusals", i+1)
		}
	}
	if !g.Refused("x") {
		t.Fatalf("no new start after %d refusals in a row from two volunteers", NormStaleRun)
	}
	if _, _, on := g.Limit(10); on {
		t.Fatal("the gate is on right after it started again")
	}
	if mean, count := g.Progress(); mean != 0 || count != 0 {
		t.Fatalf("after the new start: mean %v over %d, want 0 over 0", mean, count)
	}
	g.Restore(3, NormWarmup)
	if _, ref, on := g.Limit(10); !on || ref != 3 {
		t.Fatalf("restored at a mean of 3: reference %v, on %v", ref, on)
	}
}

// Judge passes what is under the limit, scales what is over it where
// the robust clip follows, refuses a new worker's outlier nothing
// vouches for (remembering it for a second computation), and refuses
// anything far over whatever follows.
func TestNormGateJudges(t *testing.T) {
	var g NormGate
	for i := range NormWarmup {
		g.Observe([]string{"a", "b", "c"}[i%3], 2)
	}
	update := make([]float32, 64)
	update[3] = 50
	r := NormResult{Volunteer: "v", Worker: "w", Task: Task{Shard: 1, Count: 64}, Base: 7, Update: update}
	r.Norm = 5
	if v := g.Judge(10, r); v.Over || v.Refused {
		t.Fatalf("a norm under the limit: %+v", v)
	}
	r.Norm, r.ClipFollows = 50, true
	if v := g.Judge(10, r); !v.Over || v.Refused || v.Limit != 20 || v.Kept != 1 {
		t.Fatalf("over the limit, the clip following: %+v; want scaled to 20, the first kept", v)
	}
	r.Worker, r.ClipFollows = "new", false
	if v := g.Judge(10, r); !v.Over || !v.Refused {
		t.Fatalf("a new worker's outlier, nothing following: %+v; want refused", v)
	}
	r.Worker = "other"
	if v := g.Judge(10, r); !v.Over || v.Refused {
		t.Fatalf("a second worker computing the same task alike: %+v; want scaled, not refused", v)
	}
	r.Norm, r.ClipFollows = 20*outlierMaxOver*2, true
	if v := g.Judge(10, r); !v.Refused {
		t.Fatalf("far over the limit: %+v; want refused whatever follows", v)
	}
}
