package engine

import (
	"testing"
	"time"
)

// fakeClock is a scheduler clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClockedScheduler() (*Scheduler, *fakeClock) {
	c := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := newTestScheduler()
	s.Now = c.now
	return s, c
}

// A primary that expires while its backup is out hands the task to the
// backup: nothing is queued again, the backup becomes the primary, and
// the expired lease says where its task went.
func TestExpiredPrimaryHandsItsTaskToTheBackup(t *testing.T) {
	s, clock := newClockedScheduler()
	s.SetQueue([]Task{{Shard: 0, Start: 0, Count: 10}})
	p, _ := s.Grant("hostage", 3, 0)
	clock.add(30 * time.Second)
	b := s.GrantBackup("honest", p)
	if !b.IsCopy() || !b.Backup || b.Base != 3 || b.Task != p.Task || s.BackupOf(p.ID) != b {
		t.Fatalf("backup %+v of %+v", b, p)
	}
	clock.add(31 * time.Second) // past the primary's deadline, not the backup's
	exp := s.Expire()
	if len(exp) != 1 || exp[0] != p {
		t.Fatalf("expired %v, want the primary alone", exp)
	}
	if p.HandedTo != b.ID || p.Requeued() || len(s.Queue()) != 0 {
		t.Fatalf("primary handed to %d (requeued %v), queue %v; want handed to the backup %d, nothing queued", p.HandedTo, p.Requeued(), s.Queue(), b.ID)
	}
	if b.IsCopy() || b.Backup || !b.Pending() {
		t.Fatalf("the backup did not become the primary: %+v", b)
	}
	// Now the backup is the task's only lease: losing it requeues.
	clock.add(time.Minute)
	if exp := s.Expire(); len(exp) != 1 || !exp[0].Requeued() || len(s.Queue()) != 1 {
		t.Fatalf("the promoted backup's expiry: %v, queue %v; want it requeued", exp, s.Queue())
	}
}

// Released in either order, a pair leaves the task in the queue once.
func TestReleasingBothCopiesQueuesTheTaskOnce(t *testing.T) {
	for _, backupFirst := range []bool{false, true} {
		s, _ := newClockedScheduler()
		s.SetQueue([]Task{{Shard: 0, Start: 0, Count: 10}})
		p, _ := s.Grant("a", 0, 0)
		b := s.GrantBackup("b", p)
		if backupFirst {
			s.Release("b", nil)
			s.Release("a", nil)
		} else {
			s.Release("a", nil)
			if b.IsCopy() {
				t.Fatal("the backup was not promoted when its primary was released")
			}
			s.Release("b", nil)
		}
		if q := s.Queue(); len(q) != 1 || q[0] != p.Task || len(s.Leases()) != 0 {
			t.Fatalf("backup released first %v: queue %v, leases %d; want the task once", backupFirst, q, len(s.Leases()))
		}
	}
}

// The first result settles the task: the other copy is superseded, and
// losing a superseded lease queues nothing.
func TestAnsweredSupersedesTheOtherCopy(t *testing.T) {
	for _, backupAnswers := range []bool{true, false} {
		s, clock := newClockedScheduler()
		s.SetQueue([]Task{{Shard: 0, Start: 0, Count: 10}})
		p, _ := s.Grant("a", 0, 0)
		b := s.GrantBackup("b", p)
		first, other := p, b
		if backupAnswers {
			first, other = b, p
		}
		if s.Take(first.Worker, first.ID) != first {
			t.Fatal("take")
		}
		if got := s.Answered(first); got != other || !other.Superseded || other.Pending() {
			t.Fatalf("answered by %s: other %+v, want it superseded", first.Worker, got)
		}
		if s.BackupOf(p.ID) != nil {
			t.Fatal("the pair is still linked after the task was answered")
		}
		clock.add(2 * time.Minute)
		exp := s.Expire()
		if len(exp) != 1 || exp[0] != other || other.Requeued() || len(s.Queue()) != 0 {
			t.Fatalf("answered by %s: the superseded copy's expiry queued %v", first.Worker, s.Queue())
		}
	}
}

// A refused result of the primary hands the task to its backup; a refused
// backup's result leaves the primary as it was, with no backup.
func TestLostAfterARefusedResult(t *testing.T) {
	s, _ := newClockedScheduler()
	s.SetQueue([]Task{{Shard: 0, Start: 0, Count: 10}, {Shard: 1, Start: 0, Count: 10}})
	p, _ := s.Grant("a", 0, 0)
	b := s.GrantBackup("b", p)
	s.Lost(s.Take("a", p.ID))
	if p.HandedTo != b.ID || b.IsCopy() || len(s.Queue()) != 1 {
		t.Fatalf("primary refused: handed to %d, backup %+v, queue %v", p.HandedTo, b, s.Queue())
	}
	p2, _ := s.Grant("a", 0, 0)
	b2 := s.GrantBackup("b", p2)
	s.Lost(s.Take("b", b2.ID))
	if s.BackupOf(p2.ID) != nil || !p2.Pending() || len(s.Queue()) != 0 {
		t.Fatalf("backup refused: primary %+v, queue %v", p2, s.Queue())
	}
}

// The median task time is over the last accepted tasks only.
func TestMedianTaskTime(t *testing.T) {
	s, _ := newClockedScheduler()
	if d := s.MedianTaskTime(); d != 0 {
		t.Fatalf("no task yet: %v", d)
	}
	for _, d := range []time.Duration{1, 9, 2, 8, 3} {
		s.Observe("w", 10, d*time.Second)
	}
	if d := s.MedianTaskTime(); d != 3*time.Second {
		t.Fatalf("median %v, want 3s", d)
	}
	for range taskTimeWindow {
		s.Observe("w", 10, 100*time.Millisecond)
	}
	if d := s.MedianTaskTime(); d != 100*time.Millisecond {
		t.Fatalf("median %v after a window of 100ms tasks, want 100ms", d)
	}
}
