package engine

import (
	"math"
	"testing"
	"testing/synctest"
	"time"
)

// runTask grants worker a lease, lets compute+comm pass on the fake clock,
// and feeds the scheduler what apply feeds it for an accepted result: the
// speed measured from the grant, and the result's own comm_ms and
// compute_ms.
func runTask(t *testing.T, s *Scheduler, worker string, stepMs, commMs float64) *Lease {
	t.Helper()
	s.SetQueue([]Task{{Shard: 0, Start: 0, Count: s.BatchSize * s.MaxLocalSteps}})
	l, ok := s.Grant(worker, 0, 0)
	if !ok {
		t.Fatal("no task granted")
	}
	computeMs := stepMs * float64(l.LocalSteps)
	time.Sleep(time.Duration((computeMs + commMs) * float64(time.Millisecond)))
	if s.Take(worker, l.ID) == nil {
		t.Fatalf("lease %d not held", l.ID)
	}
	s.Observe(worker, l.Task.Count, s.Now().Sub(l.Since))
	s.ObserveComm(worker, commMs, computeMs, l.LocalSteps)
	return l
}

func newCommScheduler() *Scheduler {
	s := newTestScheduler()
	s.Dynamic, s.LocalSteps, s.MinLocalSteps, s.MaxLocalSteps, s.MaxCommFraction = true, 4, 2, 64, 0.1
	return s
}

// A worker behind a slow uplink: the speed rule alone would give it few
// steps (its tasks take long on the wire), the comm rule raises its H until
// its time on the wire is under max_comm_fraction of its time, and where
// that needs more than max_local_steps, it stops there.
func TestCommRuleRaisesHOfASlowLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newCommScheduler()
		for range 4 {
			runTask(t, s, "loopback", 1, 0.5)
			// 3 ms a step, 15 ms on the wire a task, aiming at 0.8 of
			// f = 0.1: H >= 15*(1-0.08)/(0.08*3) = 57.5.
			runTask(t, s, "home", 3, 15)
		}
		s.MaxCommFraction = 0
		speedOnly := s.LocalStepsFor("home")
		s.MaxCommFraction = 0.1
		h := s.LocalStepsFor("home")
		if speedOnly >= 58 {
			t.Fatalf("the speed rule alone gives the slow link H %d: the test needs it below 58", speedOnly)
		}
		if h != 58 {
			t.Fatalf("H %d, want 58 (15 ms on the wire, 3 ms a step, f 0.1)", h)
		}
		if share := 15 / (15 + float64(h)*3); share > 0.1 {
			t.Fatalf("at H %d the share on the wire is %.3f, over 0.1", h, share)
		}
		if l := runTask(t, s, "home", 3, 15); l.LocalSteps != 58 {
			t.Fatalf("its next lease has H %d, want 58", l.LocalSteps)
		}

		// A much slower uplink needs more than max_local_steps: the bound.
		for range 8 {
			runTask(t, s, "dialup", 3, 2000)
		}
		if h := s.LocalStepsFor("dialup"); h != s.MaxLocalSteps {
			t.Fatalf("dial-up: H %d, want max_local_steps %d", h, s.MaxLocalSteps)
		}

		// max_comm_fraction is live: a looser share needs fewer steps.
		s.MaxCommFraction = 0
		speedOnly = s.LocalStepsFor("home")
		s.MaxCommFraction = 0.5 // H >= 15*(1-0.4)/(0.4*3) = 7.5
		if h := s.LocalStepsFor("home"); h != max(8, speedOnly) {
			t.Fatalf("f 0.5: H %d, want %d", h, max(8, speedOnly))
		}
	})
}

// A fast link needs no more steps than speed gives: the speed rule's H
// stands.
func TestCommRuleLeavesAFastLinkAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newCommScheduler()
		for range 4 {
			runTask(t, s, "native", 1, 0.2)
			runTask(t, s, "half", 2, 0.2) // needs 0.2*0.92/(0.08*2) = 1.15: 2 steps
		}
		bySpeed := s.LocalStepsFor("half")
		s.MaxCommFraction = 0
		if h := s.LocalStepsFor("half"); h != bySpeed {
			t.Fatalf("H %d with the comm rule, %d without: a fast link changed it", bySpeed, h)
		}
		if bySpeed < s.MinLocalSteps || bySpeed >= s.MaxLocalSteps {
			t.Fatalf("half-speed worker: H %d, want between min and max", bySpeed)
		}
		if h := s.LocalStepsFor("native"); h != s.MaxLocalSteps {
			t.Fatalf("fastest worker: H %d, want max_local_steps", h)
		}
	})
}

// The rule never leaves [min_local_steps, max_local_steps], ignores
// absurd reports, does nothing without dynamic_local_steps, and forgets a
// worker that left.
func TestCommRuleClamps(t *testing.T) {
	s := newCommScheduler()
	s.Observe("w", 100, time.Second)
	s.Observe("fast", 1e6, time.Second)
	if h := s.LocalStepsFor("w"); h != s.MinLocalSteps {
		t.Fatalf("before comm reports: H %d, want min %d", h, s.MinLocalSteps)
	}
	for _, bad := range [][2]float64{{math.NaN(), 10}, {math.Inf(1), 10}, {-5, 10}, {10, 0}, {10, -1}, {10, math.NaN()}, {10, math.Inf(1)}} {
		s.ObserveComm("w", bad[0], bad[1], 4)
	}
	s.ObserveComm("w", 1e9, 1, 0) // no steps
	if h := s.LocalStepsFor("w"); h != s.MinLocalSteps {
		t.Fatalf("after absurd reports: H %d, want them ignored (min %d)", h, s.MinLocalSteps)
	}
	s.ObserveComm("w", 1e300, 1e-300, 1) // a need past any int
	if h := s.LocalStepsFor("w"); h != s.MaxLocalSteps {
		t.Fatalf("enormous need: H %d, want max %d", h, s.MaxLocalSteps)
	}
	s.Forget("w")
	s.Observe("w", 100, time.Second)
	if h := s.LocalStepsFor("w"); h != s.MinLocalSteps {
		t.Fatalf("after Forget: H %d, want the comm report gone (min %d)", h, s.MinLocalSteps)
	}
	s.ObserveComm("w", 1e300, 1e-300, 1)
	s.Dynamic = false
	if h := s.LocalStepsFor("w"); h != s.LocalSteps {
		t.Fatalf("without dynamic: H %d, want local_steps %d", h, s.LocalSteps)
	}
}
