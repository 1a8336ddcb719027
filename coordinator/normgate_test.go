package coordinator

import "testing"

// One volunteer answering every lease with zeros cannot drag the gate's
// reference down once three volunteers voted, however many updates it
// sends; before that the reference is the running mean it is given.
func TestNormReferenceOneVotePerVolunteer(t *testing.T) {
	var n normRef
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
	var n normRef
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
	var n normRef
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
	for range 3 * normStaleRun {
		if n.refused("huge") {
			t.Fatal("one volunteer refused again and again reset the reference")
		}
	}
	n.observe("honest", 13)
	for i := range normStaleRun - 1 {
		if n.refused([]string{"a", "b"}[i%2]) {
			t.Fatalf("reset after %d refusals, want %d", i+1, normStaleRun)
		}
	}
	if !n.refused("a") {
		t.Fatalf("no reset after %d refusals in a row from two volunteers", normStaleRun)
	}
	if got := n.reference(0); got != 0 {
		t.Fatalf("after the reset: reference %v, want 0 (the gate off)", got)
	}
}
