package engine

import (
	"testing"
	"time"
)

// The bound holds a volunteer to shareSlack times its even share of the
// last shareWindow grants, but only while another volunteer went
// without within starvedFor, once the window has shareMinSamples
// grants, and not for a vouched volunteer or one of fewer than two.
func TestVolunteerSharesBoundOnlyWhileOthersGoWithout(t *testing.T) {
	var s VolunteerShares
	now := time.Unix(1000, 0)
	three := func() int { return 3 }
	for range shareMinSamples - 1 {
		s.Granted("flood")
	}
	s.Starved("honest", now)
	if left := s.Left("flood", now, false, 3, three); left != shareWindow {
		t.Fatalf("below %d grants: %d left, want no bound", shareMinSamples, left)
	}
	for range shareWindow {
		s.Granted("flood")
	}
	if taken, window := s.Share("flood"); taken != shareWindow || window != shareWindow {
		t.Fatalf("share %d of %d, want the whole window of %d", taken, window, shareWindow)
	}
	if left := s.Left("flood", now, false, 3, three); left != 0 {
		t.Fatalf("the whole window taken while another went without: %d left, want 0", left)
	}
	if left := s.Left("flood", now, true, 3, three); left != shareWindow {
		t.Fatalf("vouched: %d left, want no bound", left)
	}
	if left := s.Left("flood", now, false, 3, func() int { return 1 }); left != shareWindow {
		t.Fatalf("the only volunteer: %d left, want no bound", left)
	}
	if left := s.Left("flood", now.Add(starvedFor+time.Millisecond), false, 3, three); left != shareWindow {
		t.Fatalf("no one went without for %v: %d left, want no bound", starvedFor, left)
	}
	s.Starved("flood", now) // its own going without is no one else's
	if left := s.Left("honest", now, false, 3, three); left != shareWindow {
		t.Fatalf("the honest volunteer with none of the window: %d left", left)
	}
	// Others take their turn: the flood's part falls under its limit,
	// counted by volunteers (3), not by connections (6: the flood's
	// several).
	for i := range shareWindow * 3 / 4 {
		s.Granted([]string{"honest", "other"}[i%2])
	}
	taken, window := s.Share("flood")
	want := int(shareSlack*float64(window)/3+0.5) - taken
	if left := s.Left("flood", now, false, 6, three); left != want || want <= 0 {
		t.Fatalf("flood took %d of %d: %d left, want %d", taken, window, left, want)
	}
}
