package engine

import "testing"

// The window holds the last ReplayWindowSize hashes, counting repeats.
func TestReplayWindowForgetsTheOldest(t *testing.T) {
	var w ReplayWindow
	w.Add(7)
	w.Add(7)
	for i := range ReplayWindowSize - 1 {
		w.Add(uint64(1000 + i))
	}
	if !w.Seen(7) {
		t.Fatal("the second 7 was forgotten too early")
	}
	w.Add(1)
	if w.Seen(7) || !w.Seen(1) || !w.Seen(1000) || len(w.count) != ReplayWindowSize {
		t.Fatalf("after the window turned: seen 7 %v, 1 %v, %d hashes", w.Seen(7), w.Seen(1), len(w.count))
	}
}
