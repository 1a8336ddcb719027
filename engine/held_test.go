package engine

import (
	"testing"
	"time"
)

// The scheduler counts each worker's leases as they come and go, and
// tells OnHeld, so that nobody scans every lease to count them.
func TestHeldCountsFollowTheLeases(t *testing.T) {
	now := time.Unix(1000, 0)
	var id uint64
	s := Scheduler{Now: func() time.Time { return now }, NextID: func() uint64 { id++; return id }, LeaseTimeout: time.Minute, BatchSize: 1, LocalSteps: 1}
	s.SetQueue([]Task{{0, 0, 1}, {0, 1, 1}, {0, 2, 1}, {0, 3, 1}, {0, 4, 1}})
	heard := map[string]int{}
	s.OnHeld = func(l *Lease, d int) { heard[l.Worker] += d }
	check := func(what string, a, b int) {
		t.Helper()
		if s.HeldBy("a") != a || s.HeldBy("b") != b || heard["a"] != a || heard["b"] != b {
			t.Fatalf("%s: held a %d b %d, heard %v; want a %d b %d", what, s.HeldBy("a"), s.HeldBy("b"), heard, a, b)
		}
	}
	a1, _ := s.Grant("a", 0, 0)
	a2, _ := s.Grant("a", 0, 0)
	b1, _ := s.Grant("b", 0, 0)
	check("granted", 2, 1)
	s.GrantBackup("b", a1)
	check("backup", 2, 2)
	if s.Take("b", a2.ID) != nil {
		t.Fatal("b took a's lease")
	}
	s.Take("a", a2.ID)
	check("taken", 1, 2)
	s.Release("b", []uint64{b1.ID})
	check("released", 1, 1)
	now = now.Add(2 * time.Minute)
	s.Expire()
	check("expired", 0, 0)
	s.Grant("a", 0, 0)
	s.Grant("b", 0, 0)
	s.Clear()
	check("cleared", 0, 0)
	if len(s.Leases()) != 0 {
		t.Fatalf("%d leases after Clear", len(s.Leases()))
	}
}
