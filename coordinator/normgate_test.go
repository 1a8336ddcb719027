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
