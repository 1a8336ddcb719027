package coordinator

import (
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// A result whose lease passed its deadline is late, not unknown: its
// worker was slower than the deadline, not gone. A browser tab computing
// a round's inner steps on a shared core outlived lease_timeout with its
// first lease, before any speed of it was measured, and lost every lease
// the same way. So a late result (engine.Scheduler.TakeExpired):
//   - measures its worker's speed, from the grant to now on the
//     coordinator's clock, so that its next leases get deadlines that fit
//     it (engine.Scheduler.deadlineFor);
//   - answers its task after all when no one took the task since and, in
//     a round mode, its round is still open (engine.Scheduler.Revive):
//     it then goes through every check a result on time does;
//   - is refused as late otherwise, saying so.
// It does not count as an answer against the hostage rule (hostages.go)
// unless it is accepted: a worker that answers every lease late and
// garbage is still dropped.

// late settles the result sub of lease l, which expired; refuse is
// apply's refusal. It returns the lease to apply as taken and true when
// the result may answer l's task, or the refusal's ack.
func (j *Job) late(sub submission, l *engine.Lease, refuse func(reason, detail string) protocol.Ack) (protocol.Ack, bool) {
	st := &j.st
	now := st.sched.Now()
	over := now.Sub(l.Deadline).Round(time.Millisecond)
	if j.revive(l) {
		st.lateRevived++
		j.log.Info(fmt.Sprintf("job %s: lease %d of worker %s answered %v after its deadline; no one had taken its task since, so the result answers it",
			j.ID, l.ID, sub.worker, over), logWorker, sub.worker)
		return protocol.Ack{}, true // accept observes its time
	}
	if l.Started() {
		st.sched.Observe(sub.worker, l.Task.Count, now.Sub(l.Since))
	}
	where := "its task was leased again"
	switch {
	case l.HandedTo != 0:
		where = fmt.Sprintf("its task passed to its backup, lease %d", l.HandedTo)
	case !l.Pending():
		where = "another copy answers for its task"
	case l.Round != 0:
		where = fmt.Sprintf("its task was leased again or round %d closed", l.Round)
	}
	return refuse(protocol.ReasonLate, fmt.Sprintf("lease %d expired %v before this result arrived and %s; the next leases' deadlines fit this worker's measured speed",
		l.ID, over, where)), false
}

// revive gives expired lease l its task back (engine.Scheduler.Revive)
// and, in a round mode, its place in the round it gave back at the
// expiry. It reports false, changing nothing, where it cannot.
func (j *Job) revive(l *engine.Lease) bool {
	st := &j.st
	if j.rl != nil || j.mirror != nil {
		return false // an RL lease's task only paces leases; a relay's answers its root
	}
	if l.Round != 0 {
		r, ok := st.agg.(*engine.Rounds)
		if !ok || r.Round() != l.Round {
			return false
		}
		if _, ok := r.Lease(st.sched.Now()); !ok {
			return false // its place went to another lease
		}
	}
	if !st.sched.Revive(l) {
		if l.Round != 0 {
			st.agg.Unlease(l.Round)
		}
		return false
	}
	return true
}
