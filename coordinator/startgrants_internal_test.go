package coordinator

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestStartGrantsHoldUntilResultLeaveOrDeadline: a started lease lets its
// worker (and only it) fetch its version until its result arrives, its
// worker leaves or its deadline passes; lapsed grants are pruned.
func TestStartGrantsHoldUntilResultLeaveOrDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g startGrants
		a, b := map[string]bool{"a": true}, map[string]bool{"b": true}
		now := time.Now()
		g.note(1, "a", 5, now.Add(time.Minute))
		if !g.holds(a, 5, now) {
			t.Error("worker a's started lease on version 5 is not found")
		}
		if g.holds(b, 5, now) || g.holds(a, 6, now) {
			t.Error("a grant is found for another worker or another version")
		}
		if g.holds(a, 5, now.Add(2*time.Minute)) {
			t.Error("a grant holds past its lease's deadline")
		}
		g.drop("b", 1) // not b's
		if !g.holds(a, 5, now) {
			t.Error("dropping lease 1 of worker b dropped a's")
		}
		g.drop("a", 1)
		if g.holds(a, 5, now) {
			t.Error("a grant holds after its result arrived")
		}
		g.note(2, "a", 7, now.Add(time.Minute))
		g.note(3, "b", 7, now.Add(time.Minute))
		g.forget("a")
		if g.holds(a, 7, now) || !g.holds(b, 7, now) {
			t.Error("forget(a) did not drop exactly a's grants")
		}

		for id := range uint64(2 * minPrune) {
			g.note(100+id, "c", 9, time.Now().Add(time.Second))
		}
		time.Sleep(2 * time.Second)
		// New grants double the map since the last prune: the lapsed go.
		live := 3 * minPrune
		for id := range uint64(live) {
			g.note(1000+id, "d", 10, time.Now().Add(time.Minute))
		}
		g.mu.Lock()
		lapsed, n := 0, 0
		for _, leases := range g.byWorker {
			for _, s := range leases {
				n++
				if s.version == 9 {
					lapsed++
				}
			}
		}
		count := g.n
		g.mu.Unlock()
		if lapsed > 0 || n != live+1 || count != n {
			t.Errorf("%d grants kept (counted %d), %d of them lapsed; want the %d live ones", n, count, lapsed, live+1)
		}
	})
}
