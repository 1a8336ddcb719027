package engine

import (
	"testing"
	"testing/synctest"
	"time"
)

func newTestScheduler() *Scheduler {
	var id uint64
	return &Scheduler{Now: time.Now, NextID: func() uint64 { id++; return id }, LeaseTimeout: time.Minute,
		BatchSize: 10, LocalSteps: 4, MinLocalSteps: 1, MaxLocalSteps: 4}
}

// Dynamic local steps: the fastest worker gets max_local_steps, a worker
// at a fraction of its speed that fraction of it, and nobody leaves
// [min_local_steps, max_local_steps], however extreme the speeds.
func TestDynamicLocalStepsStayInBounds(t *testing.T) {
	s := newTestScheduler()
	s.Dynamic, s.MinLocalSteps, s.MaxLocalSteps, s.LocalSteps = true, 2, 16, 4
	if h := s.LocalStepsFor("new"); h != 4 {
		t.Fatalf("unmeasured worker: H %d, want local_steps 4", h)
	}
	s.Observe("native", 1600, time.Second)
	s.Observe("half", 800, time.Second)
	s.Observe("browser", 100, time.Second)
	s.Observe("frozen", 1, time.Hour)
	want := map[string]int{"native": 16, "half": 8, "browser": 2, "frozen": 2}
	for w, h := range want {
		if got := s.LocalStepsFor(w); got != h {
			t.Errorf("%s: H %d, want %d", w, got, h)
		}
	}
	s.Observe("rocket", 1e9, time.Millisecond)
	for _, w := range []string{"native", "half", "browser", "frozen", "rocket"} {
		if h := s.LocalStepsFor(w); h < 2 || h > 16 {
			t.Errorf("%s: H %d outside [2, 16]", w, h)
		}
	}
	// A lease carries its worker's H, and takes that many batches of a
	// task cut for max_local_steps; the rest stays queued, first.
	s.SetQueue([]Task{{Shard: 0, Start: 0, Count: 160}, {Shard: 1, Start: 0, Count: 160}})
	s.Forget("rocket")
	l, _ := s.Grant("half", 0, 0)
	if l.LocalSteps != 8 || l.Task.Count != 80 || s.Queue()[0] != (Task{Shard: 0, Start: 80, Count: 80}) {
		t.Fatalf("lease %+v, queue %v", l, s.Queue())
	}
	// Given back, it joins the rest of its task again.
	s.Release("half", nil)
	if q := s.Queue(); len(q) != 2 || q[0] != (Task{Shard: 0, Start: 0, Count: 160}) {
		t.Fatalf("queue after release: %v", q)
	}
}

// A "latest" lease carries no base until its worker starts it, and then
// gets the newest version, however far the model moved since the grant;
// its deadline runs from the start.
func TestLatestLeaseComputesFromTheNewestVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestScheduler()
		s.Latest = true
		s.SetQueue([]Task{{Count: 40}, {Count: 40}})
		a, _ := s.Grant("w", 3, 0)
		b, _ := s.Grant("w", 3, 0)
		if a.Started() || b.Started() {
			t.Fatalf("latest leases granted with a base: %+v %+v", a, b)
		}
		newest := int64(3)
		for _, l := range []*Lease{a, b} {
			newest += 7 // the model moves while the worker works on the other lease
			time.Sleep(30 * time.Second)
			got, err := s.Start("w", l.ID, newest)
			if err != nil || got.Base != newest {
				t.Fatalf("start of lease %d at newest %d: base %d, %v", l.ID, newest, got.Base, err)
			}
			if !got.Deadline.Equal(time.Now().Add(time.Minute)) {
				t.Fatalf("deadline %v, want a minute from the start", got.Deadline)
			}
		}
		// Starting twice answers the same base; another worker cannot.
		if got, _ := s.Start("w", a.ID, 99); got.Base != 10 {
			t.Fatalf("second start moved the base to %d", got.Base)
		}
		if _, err := s.Start("thief", b.ID, 99); err == nil {
			t.Fatal("another worker started the lease")
		}
		// Granted leases keep the base they were given.
		s.Latest = false
		s.SetQueue([]Task{{Count: 10}})
		if g, _ := s.Grant("w", 5, 0); g.Base != 5 || !g.Started() {
			t.Fatalf("granted lease: %+v", g)
		}
	})
}

// Leases expire at their deadline, on the injected clock, and go back to
// the front of the queue.
func TestLeasesExpireOnTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestScheduler()
		s.SetQueue([]Task{{Shard: 1, Count: 40}, {Shard: 2, Count: 40}})
		l, _ := s.Grant("w", 0, 0)
		time.Sleep(59 * time.Second)
		if got := s.Expire(); len(got) != 0 {
			t.Fatalf("expired early: %v", got)
		}
		time.Sleep(2 * time.Second)
		got := s.Expire()
		if len(got) != 1 || got[0].ID != l.ID || s.Queue()[0] != l.Task || s.HeldBy("w") != 0 {
			t.Fatalf("expired %v, queue %v", got, s.Queue())
		}
	})
}

func TestCopiesAreNeverQueuedAgain(t *testing.T) {
	now := time.Unix(0, 0)
	var id uint64
	s := &Scheduler{Now: func() time.Time { return now }, NextID: func() uint64 { id++; return id },
		LeaseTimeout: time.Second, BatchSize: 4, LocalSteps: 1}
	s.SetQueue([]Task{{Shard: 0, Start: 0, Count: 4}, {Shard: 0, Start: 4, Count: 4}})
	p, _ := s.Grant("a", 7, 0)
	c := s.GrantCopy("b", p)
	if !c.IsCopy() || c.Primary != p.ID || c.Task != p.Task || c.Base != 7 || c.LocalSteps != p.LocalSteps {
		t.Fatalf("copy %+v of %+v", c, p)
	}
	if got := s.Release("b", nil); len(got) != 1 || len(s.Queue()) != 1 {
		t.Fatalf("released copy: %d leases back, queue %v (the copy's task must not be queued again)", len(got), s.Queue())
	}
	c = s.GrantCopy("b", p)
	now = now.Add(2 * time.Second)
	got := s.Expire()
	queued := 0
	for _, q := range s.Queue() {
		queued += q.Count
	}
	if len(got) != 2 || queued != 8 {
		t.Fatalf("expired: %d leases, queue %v: want the primary's 4 examples queued once beside the other 4", len(got), s.Queue())
	}
}

// The model does not move within a round, so a task leased twice in one
// is computed twice from the same version and gives a bit-identical
// result, which the coordinator refuses as a replay (and queues again, to
// be refused again until the round times out). An epoch that ends in the
// middle of a round queues the round's tasks again with the next epoch's:
// they must wait for a later round. Here an epoch is 5 tasks, rounds are
// 4, and each epoch's order starts with the tasks the last one ended on.
func TestRoundNeverLeasesATaskTwice(t *testing.T) {
	now := time.Unix(1000, 0)
	var id uint64
	s := &Scheduler{Now: func() time.Time { return now }, NextID: func() uint64 { id++; return id },
		LeaseTimeout: time.Minute, BatchSize: 10, LocalSteps: 4}
	agg := NewRounds(4, 0, time.Minute, 1)
	epochs := [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {0, 1, 2, 3, 4}, {3, 4, 0, 1, 2}}
	queue := func(order []int) {
		var ts []Task
		for _, sh := range order {
			ts = append(ts, Task{Shard: sh, Count: 40})
		}
		s.SetQueue(ts)
	}
	epoch, remaining := 0, 0
	startEpoch := func() { queue(epochs[epoch]); remaining = 5 }
	startEpoch()
	var version int64
	for rounds := 0; epoch < len(epochs) && rounds < 20; rounds++ {
		var held []*Lease
		seen := map[Task]bool{}
		// Workers ask until the round has all its leases out or the queue
		// has nothing for it; results arrive one by one, and an epoch may
		// end (and the next one's queue come) in the middle of the round.
		for agg.results < agg.Size && epoch < len(epochs) {
			for {
				r, ok := agg.Lease(now)
				if !ok {
					break
				}
				l, ok := s.Grant("w", version, r)
				if !ok {
					agg.Unlease(r)
					break
				}
				if seen[l.Task] {
					t.Fatalf("round %d leased shard %d twice from version %d (epoch %d): its results would be bit-identical", r, l.Task.Shard, version, epoch)
				}
				seen[l.Task] = true
				held = append(held, l)
			}
			if len(held) == 0 {
				break // the round waits for its timeout
			}
			l := s.Take("w", held[0].ID)
			held = held[1:]
			if d := agg.Offer(Contribution{Update: []float32{1}, Round: l.Round}); !d.Accepted {
				t.Fatalf("result of round %d refused: %s", l.Round, d.Reason)
			}
			if remaining -= 1; remaining == 0 {
				if epoch++; epoch < len(epochs) {
					startEpoch()
				}
			}
		}
		now = now.Add(2 * time.Minute)
		if _, ok := agg.Ready(now); ok {
			version++
		}
	}
	if epoch < len(epochs) {
		t.Fatalf("only %d of %d epochs done", epoch, len(epochs))
	}
}

// A task whose result validation refused in a round is not leased again
// in that round (from the same version it would be computed to the same
// refused update), and waits at the back of the queue; in asynchronous
// mode, where the model moves, it is leased again at once.
func TestRoundDoesNotLeaseARefusedTaskAgain(t *testing.T) {
	s := newTestScheduler()
	s.SetQueue([]Task{{Shard: 0, Count: 40}, {Shard: 1, Count: 40}, {Shard: 2, Count: 40}})
	a, _ := s.Grant("a", 0, 1)
	s.Refused(s.Take("a", a.ID))
	b, ok := s.Grant("b", 0, 1)
	if !ok || b.Task == a.Task {
		t.Fatalf("after validation refused %+v the round leased %+v (ok %v): want another task", a.Task, b.Task, ok)
	}
	if l, ok := s.Grant("c", 1, 2); !ok || l.Task.Shard != 2 {
		t.Fatalf("round 2 leased %+v (ok %v), want shard 2, before the refused task at the back", l, ok)
	}
	if l, ok := s.Grant("c", 1, 2); !ok || l.Task != a.Task {
		t.Fatalf("round 2's next lease is %+v (ok %v), want the refused task %+v", l, ok, a.Task)
	}
	// The epoch's last task: the round has nothing else to lease, and a
	// round with no result and no lease would never close.
	s.SetQueue([]Task{{Shard: 5, Count: 40}})
	last, _ := s.Grant("c", 1, 3)
	s.Refused(s.Take("c", last.ID))
	if l, ok := s.Grant("c", 1, 3); !ok || l.Task != last.Task {
		t.Fatalf("round 3 after refusing the epoch's last task leased %+v (ok %v), want that task again", l, ok)
	}
	s.SetQueue([]Task{{Shard: 3, Count: 40}, {Shard: 4, Count: 40}})
	x, _ := s.Grant("d", 0, 0)
	s.Refused(s.Take("d", x.ID))
	if l, ok := s.Grant("d", 0, 0); !ok || l.Task != x.Task {
		t.Fatalf("asynchronous: after a refusal the next lease is %+v (ok %v), want the refused task %+v again", l, ok, x.Task)
	}
}

// A task whose lease was lost in a round (given back, expired, its result
// refused) left the round: the round may lease it again.
func TestRoundLeasesALostTaskAgain(t *testing.T) {
	s := newTestScheduler()
	s.SetQueue([]Task{{Shard: 0, Count: 40}, {Shard: 1, Count: 40}})
	a, _ := s.Grant("a", 0, 1)
	if got := s.Release("a", nil); len(got) != 1 {
		t.Fatalf("released %d leases, want 1", len(got))
	}
	b, ok := s.Grant("b", 0, 1)
	if !ok || b.Task != a.Task {
		t.Fatalf("after the loss the round leased %+v (ok %v), want %+v again", b.Task, ok, a.Task)
	}
	// Held now: the same task queued again (a new epoch) waits.
	s.SetQueue([]Task{{Shard: 0, Count: 40}})
	if l, ok := s.Grant("c", 0, 1); ok {
		t.Fatalf("round 1 leased %+v a second time", l.Task)
	}
	if !s.Exhausted(1) {
		t.Fatal("round 1 may lease nothing queued, and Exhausted says it may")
	}
	if l, ok := s.Grant("c", 1, 2); !ok || l.Task.Shard != 0 {
		t.Fatalf("round 2 did not lease shard 0: %+v, %v", l, ok)
	}
	if s.Exhausted(2) {
		t.Fatal("Exhausted(2) with nothing queued: that is the end of the epoch's tasks, not a round that cannot grow")
	}
	// Asynchronous leases (round 0) know no rounds.
	s.SetQueue([]Task{{Shard: 1, Count: 40}, {Shard: 1, Count: 40}})
	for range 2 {
		if _, ok := s.Grant("d", 0, 0); !ok {
			t.Fatal("an asynchronous lease was refused")
		}
	}
}

// A round gives a worker one place at a time: while its lease of the open
// round waits for its result it holds a place there; a copy (a spot check
// of another's task) is no place, an answered or released lease frees it,
// and a lease of an earlier round says nothing of the open one.
func TestHoldsInRoundIsOnePlaceAtATime(t *testing.T) {
	s := newTestScheduler()
	s.SetQueue([]Task{{Shard: 0, Count: 40}, {Shard: 1, Count: 40}, {Shard: 2, Count: 40}, {Shard: 3, Count: 40}})
	a, _ := s.Grant("a", 0, 1)
	if !s.HoldsInRound("a", 1) || s.HoldsInRound("b", 1) || s.HoldsInRound("a", 2) || s.HoldsInRound("a", 0) {
		t.Fatalf("after a's lease of round 1: a holds %v in round 1, b %v, a in round 2 %v, outside rounds %v; want only the first",
			s.HoldsInRound("a", 1), s.HoldsInRound("b", 1), s.HoldsInRound("a", 2), s.HoldsInRound("a", 0))
	}
	c := s.GrantCopy("b", a)
	if s.HoldsInRound("b", 1) {
		t.Fatalf("b's copy %+v of a's lease holds a place of the round", c)
	}
	if s.Take("a", a.ID) == nil || s.HoldsInRound("a", 1) {
		t.Fatal("a's answered lease still holds a place of the round")
	}
	b, _ := s.Grant("b", 0, 1)
	if !s.HoldsInRound("b", 1) {
		t.Fatal("b's own lease of round 1 holds no place")
	}
	if got := s.Release("b", []uint64{b.ID}); len(got) != 1 || s.HoldsInRound("b", 1) {
		t.Fatalf("released %d leases, b still holds a place: %v", len(got), s.HoldsInRound("b", 1))
	}
}

// A worker measured as slow gets deadlines that fit its speed: three
// times the time its measured speed says a task takes, when that is
// above lease_timeout, and at most four times lease_timeout. A fast
// worker, and one not measured yet, keep lease_timeout; a copy or a
// started latest lease gets its own worker's deadline too.
func TestSlowWorkersDeadlineFitsItsSpeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestScheduler() // lease_timeout 1 minute, batch 10, H 4: tasks of 40 examples
		s.SetQueue([]Task{{Shard: 1, Count: 400}})
		s.Observe("slow", 40, time.Minute) // a task takes it a minute
		s.Observe("fast", 40, time.Second)
		s.Observe("snail", 40, 10*time.Minute)
		start := time.Now()
		for _, c := range []struct {
			worker string
			want   time.Duration
		}{
			{"new", time.Minute},
			{"fast", time.Minute},
			{"slow", 3 * time.Minute},
			{"snail", 4 * time.Minute},
		} {
			l, ok := s.Grant(c.worker, 0, 0)
			if !ok {
				t.Fatal("no task")
			}
			if got := l.Deadline.Sub(start); got != c.want {
				t.Errorf("%s: deadline in %v, want %v", c.worker, got, c.want)
			}
			if cp := s.GrantCopy(c.worker, l); cp.Deadline.Sub(start) != c.want {
				t.Errorf("%s: a copy's deadline in %v, want %v", c.worker, cp.Deadline.Sub(start), c.want)
			}
		}
		// The slow worker's lease outlives lease_timeout and expires
		// only at its own deadline.
		time.Sleep(2 * time.Minute)
		for _, l := range s.Expire() {
			if l.Worker == "slow" || l.Worker == "snail" {
				t.Errorf("%s's lease expired after 2 minutes, before its deadline", l.Worker)
			}
		}
		time.Sleep(3 * time.Minute)
		s.Expire()
		if s.HeldBy("slow") != 0 || s.HeldBy("snail") != 0 {
			t.Errorf("after 5 minutes slow holds %d, snail %d leases; want none (expired at 4 minutes at most)", s.HeldBy("slow"), s.HeldBy("snail"))
		}
	})
}

// A lease that expired is known when its result comes late, for
// LateGrace after its deadline and only from its own worker; its task
// goes back to it while still queued, and not once another holds it, in
// another round, or in the next epoch.
func TestLateResultOfAnExpiredLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestScheduler() // lease_timeout 1 minute, tasks of 40 examples
		s.SetQueue([]Task{{Shard: 1, Count: 40}, {Shard: 2, Count: 40}})
		slow, _ := s.Grant("slow", 0, 0)
		time.Sleep(61 * time.Second)
		if got := s.Expire(); len(got) != 1 || got[0] != slow {
			t.Fatalf("expired %v, want the slow worker's lease", got)
		}
		if s.TakeExpired("other", slow.ID) != nil {
			t.Fatal("another worker took the slow worker's expired lease")
		}
		l := s.TakeExpired("slow", slow.ID)
		if l != slow {
			t.Fatalf("TakeExpired: %v, want the expired lease", l)
		}
		if s.TakeExpired("slow", slow.ID) != nil {
			t.Fatal("an expired lease was taken twice")
		}
		if !s.Revive(l) {
			t.Fatal("the task still queued did not go back to its late lease")
		}
		if q := s.Queue(); len(q) != 1 || q[0].Shard != 2 {
			t.Fatalf("queue after the revival %v, want shard 2's task alone", q)
		}

		// Leased again before the late result: not revived, and the
		// queue is as it was.
		s.SetQueue([]Task{{Shard: 1, Count: 40}})
		first, _ := s.Grant("slow", 0, 0)
		time.Sleep(61 * time.Second)
		s.Expire()
		again, _ := s.Grant("fast", 0, 0)
		if again.Task != first.Task {
			t.Fatalf("the expired task was not leased again first: %v", again.Task)
		}
		if l := s.TakeExpired("slow", first.ID); l == nil || s.Revive(l) {
			t.Fatalf("a late lease whose task another holds: taken %v, revived", l)
		}

		// The next epoch's queue holds the same task: not this lease's.
		s.SetQueue([]Task{{Shard: 1, Count: 40}})
		old, _ := s.Grant("slow", 0, 0)
		time.Sleep(61 * time.Second)
		s.Expire()
		s.SetQueue([]Task{{Shard: 1, Count: 40}})
		if l := s.TakeExpired("slow", old.ID); l == nil || s.Revive(l) || len(s.Queue()) != 1 {
			t.Fatalf("a late lease of the last epoch: taken %v, revived, queue %v", l, s.Queue())
		}

		// Past LateGrace it is forgotten.
		s.SetQueue([]Task{{Shard: 1, Count: 40}})
		gone, _ := s.Grant("slow", 0, 0)
		time.Sleep(61 * time.Second)
		s.Expire()
		time.Sleep(s.LateGrace() + time.Second)
		if s.TakeExpired("slow", gone.ID) != nil {
			t.Fatalf("an expired lease still known %v after its deadline", s.LateGrace()+time.Second)
		}
	})
}

// In a round, a late lease's task goes back to it only in its own round,
// and then counts in the round's tasks again.
func TestLateResultInARound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestScheduler()
		s.SetQueue([]Task{{Shard: 1, Count: 40}, {Shard: 2, Count: 40}, {Shard: 3, Count: 40}})
		a, _ := s.Grant("slow", 0, 1)
		time.Sleep(61 * time.Second)
		s.Expire()
		l := s.TakeExpired("slow", a.ID)
		if l == nil || !s.Revive(l) {
			t.Fatal("a late lease of the open round whose task is queued was not revived")
		}
		// The round holds its task again: the next grant in it skips it.
		if b, _ := s.Grant("fast", 0, 1); b.Task == a.Task {
			t.Fatalf("round 1 leased the revived task %v twice", a.Task)
		}
		c, _ := s.Grant("slow", 0, 2)
		time.Sleep(61 * time.Second)
		s.Expire()
		s.Grant("fast", 0, 3) // round 2 closed, round 3 open
		if l := s.TakeExpired("slow", c.ID); l == nil || s.Revive(l) {
			t.Fatal("a late lease of a closed round was revived")
		}
	})
}

// The expired leases remembered are bounded, however many expire.
func TestExpiredLeasesKeptAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestScheduler()
		s.KeepTasks = true
		tasks := make([]Task, 3*maxExpiredKept)
		for i := range tasks {
			tasks[i] = Task{Shard: i, Count: 10}
		}
		s.SetQueue(tasks)
		for range tasks {
			s.Grant("hostage", 0, 0)
		}
		time.Sleep(61 * time.Second)
		if n := len(s.Expire()); n != len(tasks) {
			t.Fatalf("expired %d, want %d", n, len(tasks))
		}
		if len(s.expired) != maxExpiredKept {
			t.Fatalf("remembers %d expired leases, want at most %d", len(s.expired), maxExpiredKept)
		}
	})
}
