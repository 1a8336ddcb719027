package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Task is a slice of one shard: the unit a lease hands out.
type Task struct {
	Shard, Start, Count int
}

// Lease is a task held by a worker until its result, its deadline, or the
// worker's departure.
type Lease struct {
	ID     uint64
	Task   Task
	Worker string
	// Base is the version the task computes from; NotStarted until the
	// worker starts a "latest" lease.
	Base int64
	// Served is the version the coordinator served in place of Base when
	// Base had been evicted from its snapshot cache (0: none): a result
	// may name either, and one that names Served is computed from it.
	Served     int64
	Round      uint64
	LocalSteps int
	Deadline   time.Time
	// Since is when the worker began on it: the grant, or for a "latest"
	// lease its start. The worker's speed is measured from it.
	Since time.Time
	// Primary is set on a copy: a lease of a task that the lease with
	// this id holds too (a spot check's second copy, a backup of a
	// straggler). A copy's task is never queued again when the copy
	// expires or is given back: the primary still answers for it.
	Primary uint64
	// Backup marks a copy that stands in for its primary (GrantBackup):
	// if the primary is lost while it is out, the task passes to it.
	Backup bool
	// Superseded marks a lease whose task another copy answered first:
	// its own result is a duplicate, and losing it returns nothing.
	Superseded bool
	// HandedTo, on a lease lost while its backup was out, is the
	// backup's id: the backup holds the task, and its place in the round.
	HandedTo uint64
	// queue is the Scheduler's SetQueue count at the grant: the epoch
	// whose queue the task came from (Revive).
	queue int
}

// IsCopy reports whether l copies another lease's task.
func (l *Lease) IsCopy() bool { return l.Primary != 0 }

// Requeued reports whether a lost lease (expired, given back, its result
// refused) returned its task to the queue, and so gave back its place in
// its round: not for a copy, a superseded lease, or one handed over.
func (l *Lease) Requeued() bool { return !l.IsCopy() && !l.Superseded && l.HandedTo == 0 }

// Pending reports whether l's task still waits for a result of l's own:
// it is no copy and no other copy answered it first.
func (l *Lease) Pending() bool { return !l.IsCopy() && !l.Superseded }

// NotStarted is the Base of a "latest" lease its worker has not started.
const NotStarted int64 = -1

// Started reports whether the lease's base version is fixed.
func (l *Lease) Started() bool { return l.Base != NotStarted }

// ErrNotHeld is returned by Start for a lease the worker does not hold.
var ErrNotHeld = errors.New("lease not held by this worker")

// Scheduler owns the task queue and the leases: what is leased to whom,
// from which version, for how many local steps, and until when. Its clock
// is injected (Now), so tests drive time.
type Scheduler struct {
	Now          func() time.Time
	NextID       func() uint64
	LeaseTimeout time.Duration
	BatchSize    int
	// Latest leases carry no base until their worker starts them.
	Latest bool
	// LocalSteps is every task's H, or with Dynamic the H of a worker
	// whose speed is not measured yet; Dynamic scales each worker's H to
	// its speed within [MinLocalSteps, MaxLocalSteps].
	LocalSteps, MinLocalSteps, MaxLocalSteps int
	Dynamic                                  bool
	// MaxCommFraction, with Dynamic, raises a worker's H above what its
	// speed gives so that its time on the wire (ObserveComm) stays under
	// this share of its time; 0 leaves H to the speed rule.
	MaxCommFraction float64
	// KeepTasks hands out the queued tasks as they are, never joined or
	// split: a relay's tasks are its root's leases, answered one for one.
	KeepTasks bool

	// OnHeld, when set, hears every lease that starts (+1) or stops (-1)
	// being held, so that a caller can count leases by its own keys
	// without scanning them all.
	OnHeld func(l *Lease, delta int)

	queue   []Task // not leased yet this epoch; requeued ones go first
	leases  map[uint64]*Lease
	held    map[string]int     // leases held per worker
	speed   map[string]float64 // examples per second of compute, smoothed
	comm    map[string]commTimes
	backups map[uint64]uint64 // primary id → its backup's id
	// round is the round of the last lease granted in one (round rules
	// number rounds from 1; 0 is no round), inRound the tasks leased in it
	// that were not lost since: held, or answered. The model does not move
	// within a round, so a task leased twice in one would be computed twice
	// from the same version: a bit-identical result, refused as a replay
	// (replay.go). Grant never does that.
	round   uint64
	inRound []Task
	// taskTimes holds the last accepted tasks' durations (Observe), a
	// ring, for MedianTaskTime.
	taskTimes [taskTimeWindow]time.Duration
	nTimes    int
	// expired remembers the leases that passed their deadline, oldest
	// first, for LateGrace after it (TakeExpired): a result that comes
	// late is known for what it is, its worker's speed is measured from
	// it, and its task, if no one took it since, is answered by it.
	expired []*Lease
	// queues counts SetQueue's calls: an expired lease answers only a
	// task of the queue it was leased from (Lease.queue), not the next
	// epoch's.
	queues int
}

// maxExpiredKept bounds the expired leases a Scheduler remembers.
const maxExpiredKept = 1024

// taskTimeWindow is how many task durations MedianTaskTime looks at.
const taskTimeWindow = 64

// SetQueue replaces the queue (a new epoch, or a restored one).
func (s *Scheduler) SetQueue(tasks []Task) {
	s.queue = append(s.queue[:0], tasks...)
	s.queues++
}

// Queue is the tasks not leased yet; the caller must not keep it.
func (s *Scheduler) Queue() []Task { return s.queue }

// Leases is the leases held now, by id; the caller must not change it.
func (s *Scheduler) Leases() map[uint64]*Lease {
	if s.leases == nil {
		s.leases = map[uint64]*Lease{}
	}
	return s.leases
}

// Requeue puts t at the front so a lost task is redone before new ones.
// A task that continues the one at the front is joined to it again.
func (s *Scheduler) Requeue(t Task) {
	if len(s.queue) > 0 && !s.KeepTasks {
		if f := s.queue[0]; f.Shard == t.Shard && t.Start+t.Count == f.Start {
			s.queue[0] = Task{Shard: t.Shard, Start: t.Start, Count: t.Count + f.Count}
			return
		}
	}
	s.queue = append(s.queue, Task{})
	copy(s.queue[1:], s.queue)
	s.queue[0] = t
}

// LocalStepsFor is the H a new lease of worker gets.
func (s *Scheduler) LocalStepsFor(worker string) int {
	if !s.Dynamic {
		return s.LocalSteps
	}
	mine, ok := s.speed[worker]
	if !ok {
		return min(max(s.LocalSteps, s.MinLocalSteps), s.MaxLocalSteps)
	}
	fastest := 0.0
	for _, v := range s.speed {
		fastest = max(fastest, v)
	}
	// The fastest worker does MaxLocalSteps; the others as many as fit in
	// the same wall time.
	h := int(math.Round(float64(s.MaxLocalSteps) * mine / fastest))
	h = max(h, s.commSteps(worker))
	return min(max(h, s.MinLocalSteps), s.MaxLocalSteps)
}

// commTimes is what a worker's results said of its time, smoothed: its
// time on the wire per task and its compute time per inner step.
type commTimes struct {
	commMs, stepMs float64
}

// commHeadroom is the share of MaxCommFraction the comm rule aims at:
// times on the wire vary from task to task (a jittery link, a busy
// coordinator), and a rule aimed at the bound itself would put a worker
// over it about half the time.
const commHeadroom = 0.8

// commSteps is the least H that keeps worker's share of time on the wire
// under MaxCommFraction: with C its time on the wire per task (which does
// not grow with H: a task's snapshot and update are the same size for
// any H) and s its compute time per inner step, C/(C+H*s) <= f holds for
// H >= C*(1-f)/(f*s), with f commHeadroom*MaxCommFraction. 0 when there
// is no such rule or nothing measured.
func (s *Scheduler) commSteps(worker string) int {
	c, ok := s.comm[worker]
	if !ok || !(s.MaxCommFraction > 0 && s.MaxCommFraction < 1) || c.stepMs <= 0 || c.commMs <= 0 {
		return 0
	}
	f := commHeadroom * s.MaxCommFraction
	need := c.commMs * (1 - f) / (f * c.stepMs)
	if need >= float64(math.MaxInt32) {
		return math.MaxInt32
	}
	return int(math.Ceil(need))
}

// ObserveComm records what an accepted result of worker said of its time:
// commMs on the wire for the task (downloading its snapshot, uploading the
// previous result), computeMs computing its steps inner steps. Values that
// are not finite and positive are ignored. Unlike Observe's speed, these
// are the worker's own account: a worker can only lengthen its own tasks
// with them, and never past MaxLocalSteps.
func (s *Scheduler) ObserveComm(worker string, commMs, computeMs float64, steps int) {
	if steps <= 0 || !(computeMs > 0) || !(commMs >= 0) || math.IsInf(computeMs, 0) || math.IsInf(commMs, 0) {
		return
	}
	if s.comm == nil {
		s.comm = map[string]commTimes{}
	}
	v := commTimes{commMs: commMs, stepMs: computeMs / float64(steps)}
	if old, ok := s.comm[worker]; ok {
		v.commMs = 0.5*old.commMs + 0.5*v.commMs
		v.stepMs = 0.5*old.stepMs + 0.5*v.stepMs
	}
	s.comm[worker] = v
}

// Observe records that worker computed examples in d. The caller measures
// d itself (from Lease.Since to the result), never trusting a worker's
// own account: a worker claiming to be fast would shrink everyone
// else's tasks.
func (s *Scheduler) Observe(worker string, examples int, d time.Duration) {
	if examples <= 0 || d <= 0 {
		return
	}
	if s.speed == nil {
		s.speed = map[string]float64{}
	}
	s.taskTimes[s.nTimes%taskTimeWindow] = d
	s.nTimes++
	v := float64(examples) / d.Seconds()
	if old, ok := s.speed[worker]; ok {
		v = 0.5*old + 0.5*v
	}
	s.speed[worker] = v
}

// deadlineStretch and maxDeadlineStretch size a slow worker's deadline
// (deadlineFor): a lease may take deadlineStretch times what the
// worker's measured speed says it needs, and at most maxDeadlineStretch
// times LeaseTimeout.
const (
	deadlineStretch    = 3
	maxDeadlineStretch = 4
)

// deadlineFor is how long worker may hold a lease of count examples:
// LeaseTimeout, or, for a worker whose measured speed (Observe: from
// grant to accepted result, the coordinator's clock) says such a task
// takes more than a third of it, deadlineStretch times that, up to
// maxDeadlineStretch times LeaseTimeout. A slow volunteer (a browser tab
// computing a round's inner steps) then keeps its work instead of
// seeing the lease expire under it, and its task goes to another only
// when it is far later than it has been; a worker not measured yet, or
// one that vanished, is held to LeaseTimeout or the bound.
func (s *Scheduler) deadlineFor(worker string, count int) time.Duration {
	v, ok := s.speed[worker]
	if !ok || !(v > 0) || count <= 0 {
		return s.LeaseTimeout
	}
	need := deadlineStretch * float64(count) / v * float64(time.Second)
	return time.Duration(min(max(need, float64(s.LeaseTimeout)), maxDeadlineStretch*float64(s.LeaseTimeout)))
}

// MedianTaskTime is the median time from grant (or start) to an accepted
// result over the last accepted tasks; 0 before the first.
func (s *Scheduler) MedianTaskTime() time.Duration {
	n := min(s.nTimes, taskTimeWindow)
	if n == 0 {
		return 0
	}
	ts := append([]time.Duration(nil), s.taskTimes[:n]...)
	slices.Sort(ts)
	return ts[n/2]
}

// Forget drops what was measured of a worker that left.
func (s *Scheduler) Forget(worker string) {
	delete(s.speed, worker)
	delete(s.comm, worker)
}

// Grant leases the next task to worker, from version base (ignored for
// Latest leases) in round. It reports false when the queue is empty. A
// task longer than the worker's H is cut: the lease takes its first
// BatchSize*H examples and the rest goes back to the front.
//
// In a round (round > 0) it passes over the tasks whose examples the
// round already holds (leased in it and not lost): when an epoch ends in
// the middle of a round, the next epoch's queue holds the round's tasks
// again, and they wait for a later round. It reports false when every
// task queued is such a one.
func (s *Scheduler) Grant(worker string, base int64, round uint64) (*Lease, bool) {
	i := 0
	if round != 0 {
		if round != s.round {
			s.round, s.inRound = round, s.inRound[:0]
		}
		i = slices.IndexFunc(s.queue, func(t Task) bool { return !s.overlapsRound(t) })
	}
	if i < 0 || len(s.queue) == 0 {
		return nil, false
	}
	t := s.queue[i]
	s.queue = slices.Delete(s.queue, i, i+1)
	h := s.LocalStepsFor(worker)
	if per := s.BatchSize * h; t.Count > per && !s.KeepTasks {
		s.Requeue(Task{Shard: t.Shard, Start: t.Start + per, Count: t.Count - per})
		t.Count = per
	}
	if s.Latest {
		base = NotStarted
	}
	l := &Lease{
		ID: s.NextID(), Task: t, Worker: worker, Base: base, Round: round,
		LocalSteps: min(h, (t.Count+s.BatchSize-1)/s.BatchSize),
		Deadline:   s.Now().Add(s.deadlineFor(worker, t.Count)),
		Since:      s.Now(),
		queue:      s.queues,
	}
	s.hold(l)
	if round != 0 {
		s.inRound = append(s.inRound, t)
	}
	return l, true
}

// HoldsInRound reports whether worker holds a lease of round (its own
// task, not a copy) that waits for its result. A worker computes its
// leases one after another, so a second place of the same round would
// start only once its first is answered: with as many workers as places,
// the first results close the round and the second comes back late, its
// work thrown away. Round rules give a worker one place at a time.
func (s *Scheduler) HoldsInRound(worker string, round uint64) bool {
	if round == 0 || s.held[worker] == 0 {
		return false
	}
	for _, l := range s.leases {
		if l.Worker == worker && l.Round == round && l.Pending() {
			return true
		}
	}
	return false
}

// Exhausted reports whether the queue holds tasks but round may lease
// none of them: each shares examples with a task the round holds. That
// happens when an epoch has fewer tasks than a round has leases; the
// round grows no more, and waits for its results alone.
func (s *Scheduler) Exhausted(round uint64) bool {
	return round != 0 && round == s.round && len(s.queue) > 0 && !slices.ContainsFunc(s.queue, func(t Task) bool { return !s.overlapsRound(t) })
}

// overlapsRound reports whether t shares an example with a task the open
// round holds.
func (s *Scheduler) overlapsRound(t Task) bool {
	return slices.ContainsFunc(s.inRound, func(r Task) bool {
		return r.Shard == t.Shard && r.Start < t.Start+t.Count && t.Start < r.Start+r.Count
	})
}

// leftRound drops a lost lease's task from its round's tasks: the round
// gave back its place, and may lease the task again.
func (s *Scheduler) leftRound(l *Lease) {
	if l.Round == 0 || l.Round != s.round {
		return
	}
	if k := slices.Index(s.inRound, l.Task); k >= 0 {
		s.inRound = slices.Delete(s.inRound, k, k+1)
	}
}

// GrantCopy leases of's task to worker as a copy: the same examples,
// base version, round and local steps, and a full deadline from now. of
// must be started (a copy computes from the very same snapshot).
func (s *Scheduler) GrantCopy(worker string, of *Lease) *Lease {
	l := &Lease{
		ID: s.NextID(), Task: of.Task, Worker: worker, Base: of.Base, Round: of.Round,
		LocalSteps: of.LocalSteps, Deadline: s.Now().Add(s.deadlineFor(worker, of.Task.Count)), Since: s.Now(),
		Primary: of.ID, queue: of.queue,
	}
	s.hold(l)
	return l
}

// GrantBackup leases a copy of of's task to worker (GrantCopy) that
// stands in for of: whichever answers first is the task's result, and if
// of is lost first the task passes to the backup instead of the queue.
// One backup per lease at a time: a second replaces the first's link.
func (s *Scheduler) GrantBackup(worker string, of *Lease) *Lease {
	l := s.GrantCopy(worker, of)
	l.Backup = true
	if s.backups == nil {
		s.backups = map[uint64]uint64{}
	}
	s.backups[of.ID] = l.ID
	return l
}

// BackupOf is the backup out for the lease with id primary, or nil.
func (s *Scheduler) BackupOf(primary uint64) *Lease {
	id, ok := s.backups[primary]
	if !ok {
		return nil
	}
	if b := s.leases[id]; b != nil && b.Backup && b.Primary == primary {
		return b
	}
	delete(s.backups, primary) // settled or lost: the link is stale
	return nil
}

// Answered settles the task of l, whose result was accepted: the other
// copy of a backup pair, still out, is superseded (its result will be a
// duplicate). It returns that other lease, or nil.
func (s *Scheduler) Answered(l *Lease) *Lease {
	var other *Lease
	if l.Backup && l.IsCopy() {
		other = s.leases[l.Primary]
		delete(s.backups, l.Primary)
	} else if other = s.BackupOf(l.ID); other != nil {
		delete(s.backups, l.ID)
	}
	if other != nil {
		other.Superseded = true
	}
	return other
}

// Lost settles l, taken from the leases without an accepted result: a
// copy's or a superseded lease's task is answered elsewhere; a primary
// whose backup is out hands the task to it (HandedTo), which becomes the
// primary; any other task goes back to the front of the queue.
func (s *Scheduler) Lost(l *Lease) {
	switch {
	case l.IsCopy():
		if l.Backup {
			delete(s.backups, l.Primary)
		}
	case l.Superseded:
	default:
		if b := s.BackupOf(l.ID); b != nil {
			delete(s.backups, l.ID)
			b.Primary, b.Backup = 0, false
			l.HandedTo = b.ID
			return
		}
		s.leftRound(l)
		s.Requeue(l.Task)
	}
}

// Refused settles l as Lost does, for a result the coordinator's
// validation refused. In a round its task stays among the round's tasks
// (from the round's version it would be computed to the same refused
// update: a task was leased and refused nine times in 33 ms in one
// synchronous round) and goes to the back of the queue, not the front: a
// batch whose honest step climbs the held-out loss now was refused again
// at each of the next twelve rounds' versions when it came first; later
// in the epoch the model has moved further. Where the round could lease
// nothing else (the epoch's last task), it is lost as any other: a round
// with no result and nothing to lease would never close.
func (s *Scheduler) Refused(l *Lease) {
	if l.IsCopy() || l.Superseded || s.BackupOf(l.ID) != nil || l.Round == 0 || l.Round != s.round ||
		!slices.ContainsFunc(s.queue, func(t Task) bool { return !s.overlapsRound(t) }) {
		s.Lost(l)
		return
	}
	s.queue = append(s.queue, l.Task)
}

// Start fixes a Latest lease's base at newest, the newest published
// version, and gives it a full deadline from now: the worker computes from
// there. Starting a started lease again answers the same base.
func (s *Scheduler) Start(worker string, id uint64, newest int64) (*Lease, error) {
	l := s.leases[id]
	if l == nil || l.Worker != worker {
		return nil, fmt.Errorf("%w: lease %d (it expired, was never issued, or belongs to another)", ErrNotHeld, id)
	}
	if !l.Started() {
		l.Base = newest
		l.Deadline = s.Now().Add(s.deadlineFor(worker, l.Task.Count))
		l.Since = s.Now()
	}
	return l, nil
}

// Take settles a lease of worker (its result arrived): it is no longer
// held. Nil if worker does not hold it. Call Observe for an accepted one.
func (s *Scheduler) Take(worker string, id uint64) *Lease {
	l := s.leases[id]
	if l == nil || l.Worker != worker {
		return nil
	}
	s.unhold(l)
	return l
}

// Expire settles (Lost) and returns the leases whose deadline has passed.
// They are remembered for a while (TakeExpired).
func (s *Scheduler) Expire() []*Lease {
	now := s.Now()
	var out []*Lease
	for _, l := range s.leases {
		if now.After(l.Deadline) {
			s.unhold(l)
			s.Lost(l)
			out = append(out, l)
		}
	}
	s.pruneExpired(now)
	s.expired = append(s.expired, out...)
	if over := len(s.expired) - maxExpiredKept; over > 0 {
		s.expired = slices.Delete(s.expired, 0, over)
	}
	return out
}

// LateGrace is how long after its deadline an expired lease's result is
// still known as late rather than unknown (TakeExpired): the longest
// deadline a slow worker is given (deadlineFor).
func (s *Scheduler) LateGrace() time.Duration { return maxDeadlineStretch * s.LeaseTimeout }

// pruneExpired forgets the expired leases past LateGrace.
func (s *Scheduler) pruneExpired(now time.Time) {
	s.expired = slices.DeleteFunc(s.expired, func(l *Lease) bool { return now.After(l.Deadline.Add(s.LateGrace())) })
}

// TakeExpired returns, and forgets, worker's lease id if it expired
// within LateGrace: its result came late. Nil if worker held no such
// lease. Its worker was slower than its deadline, not absent: Observe
// its time, so that its next deadlines fit it (deadlineFor).
func (s *Scheduler) TakeExpired(worker string, id uint64) *Lease {
	s.pruneExpired(s.Now())
	i := slices.IndexFunc(s.expired, func(l *Lease) bool { return l.ID == id && l.Worker == worker })
	if i < 0 {
		return nil
	}
	l := s.expired[i]
	s.expired = slices.Delete(s.expired, i, i+1)
	return l
}

// Revive lets l, an expired lease taken by TakeExpired, answer its task
// after all: when its task went back to the queue and is still there
// whole, it leaves the queue again (and in l's round is the round's
// again), as if l had never expired. It reports false, changing nothing,
// when the task was leased again, passed to a backup, or belongs to a
// round other than the one open or to an epoch before this queue's. The
// caller settles l as a lease it took.
func (s *Scheduler) Revive(l *Lease) bool {
	if !l.Requeued() || l.queue != s.queues || l.Round != 0 && (l.Round != s.round || s.overlapsRound(l.Task)) {
		return false
	}
	if !s.TakeQueued(l.Task) {
		return false
	}
	if l.Round != 0 {
		s.inRound = append(s.inRound, l.Task)
	}
	return true
}

// Release settles (Lost) the leases among ids that worker holds (nil ids:
// all of them) and returns them.
func (s *Scheduler) Release(worker string, ids []uint64) []*Lease {
	var out []*Lease
	for id, l := range s.leases {
		if l.Worker != worker {
			continue
		}
		if ids != nil && !contains(ids, id) {
			continue
		}
		s.unhold(l)
		s.Lost(l)
		out = append(out, l)
	}
	return out
}

// ReleaseAll settles (Lost) every lease (the job paused) and returns them.
func (s *Scheduler) ReleaseAll() []*Lease {
	var out []*Lease
	for _, l := range s.leases {
		s.unhold(l)
		s.Lost(l)
		out = append(out, l)
	}
	return out
}

// HeldBy counts worker's leases.
func (s *Scheduler) HeldBy(worker string) int { return s.held[worker] }

// hold adds l to the leases held.
func (s *Scheduler) hold(l *Lease) {
	s.Leases()[l.ID] = l
	if s.held == nil {
		s.held = map[string]int{}
	}
	s.held[l.Worker]++
	if s.OnHeld != nil {
		s.OnHeld(l, 1)
	}
}

// unhold takes l from the leases held.
func (s *Scheduler) unhold(l *Lease) {
	if s.leases[l.ID] != l {
		return
	}
	delete(s.leases, l.ID)
	if s.held[l.Worker]--; s.held[l.Worker] <= 0 {
		delete(s.held, l.Worker)
	}
	if s.OnHeld != nil {
		s.OnHeld(l, -1)
	}
}

func contains(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// TakeQueued removes the examples of t from the queue, splitting the
// queued task that holds them, and reports whether one held them all. It
// settles a result whose lease a restart forgot: its task was queued
// again, and must not be computed twice.
func (s *Scheduler) TakeQueued(t Task) bool {
	i := slices.IndexFunc(s.queue, func(q Task) bool {
		return q.Shard == t.Shard && q.Start <= t.Start && t.Start+t.Count <= q.Start+q.Count
	})
	if i < 0 || t.Count <= 0 {
		return false
	}
	q := s.queue[i]
	var rest []Task
	if t.Start > q.Start {
		rest = append(rest, Task{Shard: q.Shard, Start: q.Start, Count: t.Start - q.Start})
	}
	if end, qEnd := t.Start+t.Count, q.Start+q.Count; end < qEnd {
		rest = append(rest, Task{Shard: q.Shard, Start: end, Count: qEnd - end})
	}
	s.queue = slices.Replace(s.queue, i, i+1, rest...)
	return true
}

// Enqueue appends tasks to the queue (a relay's block from its root).
func (s *Scheduler) Enqueue(tasks ...Task) { s.queue = append(s.queue, tasks...) }

// Drop removes the queued tasks for which gone reports true, and the
// leases of them, without requeueing (a relay's block handed back). It
// returns the leases dropped.
func (s *Scheduler) Drop(gone func(Task) bool) []*Lease {
	s.queue = slices.DeleteFunc(s.queue, gone)
	var out []*Lease
	for _, l := range s.leases {
		if gone(l.Task) {
			s.unhold(l)
			out = append(out, l)
		}
	}
	return out
}

// Clear drops every lease without settling it (a job that ended).
func (s *Scheduler) Clear() {
	for _, l := range s.leases {
		s.unhold(l)
	}
}

// ForgetRound forgets the tasks leased in the round (a relay whose root
// restarted: the root numbers its rounds again, with the same tasks).
func (s *Scheduler) ForgetRound() { s.round, s.inRound = 0, s.inRound[:0] }
