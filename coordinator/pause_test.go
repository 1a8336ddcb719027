package coordinator_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/worker"
)

// fakeIdle is a machine the test makes busy and idle at will.
type fakeIdle struct{ busy atomic.Bool }

func (f *fakeIdle) Idle() (bool, string) {
	if f.busy.Load() {
		return false, "the test says so"
	}
	return true, "the test says so"
}

// A worker kept to the machine's idle time (work --idle-only) stops
// leasing within 2 s of the machine turning busy, hands back the leases it
// has not begun, keeps its connection, and leases again once the machine
// is idle.
func TestIdleOnlyWorkerHandsBackAndResumes(t *testing.T) {
	g := newTestGrid(t, jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy, s.LocalSteps = 1, 1
	}))
	det := &fakeIdle{}
	// A slow task keeps the prefetched lease waiting behind it, so there
	// is always one to hand back.
	w := g.addWorkerWith(1, func(b worker.Backend) worker.Backend { return &slowBackend{Backend: b, delay: 300 * time.Millisecond} },
		func(c *worker.Config) { c.Idle = det })
	held := func() (leases []uint64, accepted int64) {
		var ws []coordinator.WorkerView
		g.getJSON("/api/v1/workers", &ws)
		for _, v := range ws {
			if v.ID == w.Stats().WorkerID {
				return v.Leases, v.Accepted
			}
		}
		t.Fatalf("worker %q is not listed: %+v", w.Stats().WorkerID, ws)
		return nil, 0
	}
	waitAccepted := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for w.Stats().Accepted < n {
			if time.Now().After(deadline) {
				t.Fatalf("worker has %d results accepted, want %d; stats %+v", w.Stats().Accepted, n, w.Stats())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitAccepted(3)
	if ls, _ := held(); len(ls) == 0 {
		t.Fatalf("a working worker holds no leases")
	}

	det.busy.Store(true)
	busyAt := time.Now()
	for {
		ls, _ := held()
		if len(ls) == 0 && w.Stats().Paused {
			break
		}
		if time.Since(busyAt) > 2*time.Second {
			t.Fatalf("2 s after the machine turned busy the worker still holds leases %v (stats %+v)", ls, w.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("leases handed back %v after the machine turned busy", time.Since(busyAt).Round(time.Millisecond))
	v := g.jobView()
	if v.LeasesReleased < 1 || !strings.Contains(v.LastRelease, "the machine is busy: the test says so") {
		t.Errorf("job: %d leases released, last because %q; want the prefetched lease handed back, saying the machine is busy", v.LeasesReleased, v.LastRelease)
	}
	if s := w.Stats(); !strings.Contains(s.PauseReason, "busy") {
		t.Errorf("paused worker's reason %q does not say the machine is busy", s.PauseReason)
	}

	// While busy it takes no work.
	_, before := held()
	for range 15 {
		time.Sleep(100 * time.Millisecond)
		if ls, acc := held(); len(ls) != 0 || acc != before {
			t.Fatalf("paused worker leased %v and has %d results accepted (was %d)", ls, acc, before)
		}
	}

	det.busy.Store(false)
	waitAccepted(w.Stats().Accepted + 2)
	if s := w.Stats(); s.Paused || s.Connects != 1 {
		t.Errorf("after resuming: paused %v, %d connections; want working on the one connection", s.Paused, s.Connects)
	}
}

// A worker with a duty cycle (work --max-cpu 25%) computes about that
// share of the wall time, against a real coordinator.
func TestDutyCycleShareOfWallTime(t *testing.T) {
	g := newTestGrid(t, jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy, s.LocalSteps = 1, 1
	}))
	const delay = 100 * time.Millisecond
	slow := &slowBackend{delay: delay}
	w := g.addWorkerWith(1, func(b worker.Backend) worker.Backend { slow.Backend = b; return slow },
		func(c *worker.Config) { c.Duty = 0.25 })
	for w.Stats().Accepted < 2 { // past the first downloads
		time.Sleep(20 * time.Millisecond)
	}
	calls, start := slow.calls.Load(), time.Now()
	time.Sleep(4 * time.Second)
	busy := time.Duration(slow.calls.Load()-calls) * delay
	share := float64(busy) / float64(time.Since(start))
	t.Logf("computed %v of %v: %.2f of the time at duty 0.25", busy, time.Since(start).Round(time.Millisecond), share)
	// Each task's own overhead counts as busy in the rest it earns, so the
	// gradient's share is a little under 0.25; without the rest it is ~0.9.
	if share < 0.15 || share > 0.3 {
		t.Errorf("at duty 0.25 the worker computed %.2f of the time", share)
	}
}
