package coordinator

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// Straggler backups. At the end of an epoch (the queue empty), or while a
// round has all its places out, a worker that asks for work may get a
// backup copy (engine.Scheduler.GrantBackup) of the oldest lease held
// longer than stragglerAfter by another volunteer: one backup out per
// lease. Whichever copy answers first is the task's result: it is applied
// once (examples, the round's place and the epoch's remaining count are
// the primary's), and the other copy's result gets "duplicate". A primary
// lost while its backup is out (expired, given back, its result refused)
// hands the task to the backup instead of the queue. So an epoch, or a
// round, completes with honest workers while a hostage sits on its last
// tasks, and a slow volunteer costs a copy, not the deadline.
//
// In sync and DiLoCo a backup computes from its primary's base (the
// round's); it takes no place of its own in the round, and its result
// fills its primary's. In async mode it computes from the newest
// version instead: the primary's base may be long stale by the time the
// lease straggles.

// A late copy in a round mode. Both copies of a backed-up task compute
// from the round's base, so the one that answers second is the same
// computation as the one applied: its result is compared with that one
// (engine.SpotChecks.Agree, the spot checks' tolerance) and, when they
// agree, credited to its volunteer and acked accepted with "duplicate",
// never applied (the task's examples were, once). An honest slow
// volunteer (a browser tab beside native workers in DiLoCo, whose
// native backup answered first) keeps its work; one that disagrees gets
// "duplicate" as before, and nothing else. In async mode the backup
// computes from a newer version than its primary: nothing to compare.
//
// keptAnswerBytes bounds the applied results kept for the copies they
// superseded, the oldest dropped first (each is a model's worth of
// floats: 0.9 MB for mnist-mlp, 49 MB for gpt-small).
const keptAnswerBytes = 64 << 20

// minStraggle is the least time a lease is held before it may be backed
// up, whatever the median task time: backups of ordinary leases would
// only duplicate work.
const minStraggle = 2 * time.Second

// stragglerAfter is how long a lease is held before it straggles: three
// times the median time of the tasks accepted lately, at least
// minStraggle.
func (j *Job) stragglerAfter() time.Duration {
	return max(3*j.st.sched.MedianTaskTime(), minStraggle)
}

// backup grants worker a backup of the oldest straggling lease that
// another volunteer holds, if there is one. Call on the loop, when the
// queue (or the open round) has no task for worker.
func (j *Job) backup(worker, baseURL string) []protocol.Lease {
	st := &j.st
	if st.state != StateRunning || j.rl != nil {
		return nil // an RL lease is cheap to hand out again: no backups
	}
	m, ok := st.members[worker]
	if !ok {
		return nil
	}
	now := st.sched.Now()
	after := j.stragglerAfter()
	// In a round mode, only the open round's leases: a closed round's
	// results are late.
	open, rounds := uint64(0), false
	if r, ok := st.agg.(*engine.Rounds); ok {
		open, rounds = r.Round(), true
	}
	if rounds && j.reclaimClosed(now, open, after) {
		return j.grant(worker, 1, baseURL)
	}
	if now.Before(st.abuse.noStragglerBefore) {
		// A crowd larger than the queue asks again and again at an
		// epoch's end: no lease can be straggling before then, so the
		// leases are not scanned each time. (Leases granted since are
		// younger; the threshold moves slowly, and a scan comes at
		// least every quarter second.)
		return nil
	}
	var oldest *engine.Lease
	youngest := now // the oldest Since among leases not yet straggling
	straggling := false
	for _, l := range st.sched.Leases() {
		// Only a started lease can be copied: its base is fixed.
		if !l.Pending() || !l.Started() || rounds && l.Round != open {
			continue
		}
		if now.Sub(l.Since) < after {
			if l.Since.Before(youngest) {
				youngest = l.Since
			}
			continue
		}
		straggling = true
		if l.Worker == worker {
			continue
		}
		if o, ok := st.members[l.Worker]; !ok || o.volunteer == m.volunteer {
			continue // its own lease: a backup would be no one else's work
		}
		if oldest != nil && (oldest.Since.Before(l.Since) || oldest.Since.Equal(l.Since) && oldest.ID < l.ID) {
			continue
		}
		if st.sched.BackupOf(l.ID) != nil {
			continue
		}
		oldest = l
	}
	if oldest == nil {
		if !straggling {
			st.abuse.noStragglerBefore = minTime(youngest.Add(after), now.Add(250*time.Millisecond))
		}
		return nil
	}
	if !j.publish() {
		return nil
	}
	b := st.sched.GrantBackup(worker, oldest)
	if !st.spec.Rounds() {
		b.Base = st.published
	}
	st.leasesIssued++
	st.abuse.backupsGranted++
	if j.verbose {
		j.log.Debug(fmt.Sprintf("job %s: lease %d of worker %s held %v (straggling after %v): backup lease %d to worker %s",
			j.ID, oldest.ID, oldest.Worker, now.Sub(oldest.Since).Round(time.Millisecond), after, b.ID, worker))
	}
	return []protocol.Lease{j.leaseMessage(b, baseURL)}
}

// reclaimClosed takes back the straggling leases of rounds that closed
// before open, and queues their tasks again: their results would be late
// anyway, and their examples are still to do this epoch. A copy of one
// would be late as well, so they get none. It reports whether any was
// taken back; a result of one afterwards is an unknown lease.
func (j *Job) reclaimClosed(now time.Time, open uint64, after time.Duration) bool {
	st := &j.st
	any := false
	for _, l := range st.sched.Leases() {
		if !l.Pending() || l.Round == open || now.Sub(l.Since) < after {
			continue
		}
		st.sched.Lost(st.sched.Take(l.Worker, l.ID)) // its round's place went with the round
		st.abuse.reclaimed++
		any = true
		j.log.Debug(fmt.Sprintf("job %s: lease %d (round %d, closed) of worker %s held %v: taken back, %s",
			j.ID, l.ID, l.Round, l.Worker, now.Sub(l.Since).Round(time.Millisecond), lostTo(l)))
	}
	return any
}

// keepAnswer keeps the result sub, just applied for l, for the copy it
// superseded, other, when both computed from one base.
func (j *Job) keepAnswer(l, other *engine.Lease, sub submission) {
	a := &j.st.abuse
	size := 4 * len(sub.res.Update)
	if other == nil || other.Base != l.Base || l.Round == 0 || size > keptAnswerBytes {
		return
	}
	if a.answers == nil {
		a.answers = map[uint64]engine.SpotResult{}
	}
	for len(a.answerOrder) > 0 && size*(len(a.answers)+1) > keptAnswerBytes {
		delete(a.answers, a.answerOrder[0])
		a.answerOrder = a.answerOrder[1:]
	}
	a.answers[other.ID] = engine.SpotResult{Volunteer: sub.volunteer, Hint: j.hintOf(sub.worker),
		Update: slices.Clone(sub.res.Update), Examples: sub.res.Examples, Slack: slackOf(sub.res)}
	a.answerOrder = append(a.answerOrder, other.ID)
}

// lateCopy answers the result of l, a lease superseded by its other
// copy's accepted result: credited if it agrees with that result (see
// keepAnswer), else ok is false and the caller refuses it.
func (j *Job) lateCopy(sub submission, l *engine.Lease, ack protocol.Ack) (protocol.Ack, bool) {
	st := &j.st
	kept, ok := st.abuse.answers[l.ID]
	if !ok {
		return ack, false
	}
	delete(st.abuse.answers, l.ID)
	if k := slices.Index(st.abuse.answerOrder, l.ID); k >= 0 {
		st.abuse.answerOrder = slices.Delete(st.abuse.answerOrder, k, k+1)
	}
	res := sub.res
	if sub.reason != "" || j.bannedSubmission(sub) || res.JobID != j.ID || len(res.Update) != j.model.NumParams ||
		res.BaseVersion != l.Base || res.Examples != l.Task.Count || !engine.Finite(res.Update) {
		return ack, false
	}
	agree, how := st.spot.Agree(kept, engine.SpotResult{Volunteer: sub.volunteer, Hint: j.hintOf(sub.worker),
		Update: res.Update, Examples: res.Examples, Slack: slackOf(res)})
	if !agree {
		return ack, false
	}
	j.ledger.Credit(sub.volunteer, j.ID, int64(res.Examples), float64(res.Examples)*j.flopsPerExample)
	st.abuse.lateCredited++
	j.resultAccepted(l.Worker)
	if j.verbose {
		j.log.Debug(fmt.Sprintf("job %s: late copy, lease %d of worker %s, credited: it agrees with the copy applied (%s)", j.ID, l.ID, l.Worker, how))
	}
	ack.Accepted = true
	ack.Reason, ack.Detail = protocol.ReasonDuplicate, "credited, not applied: another copy of this task answered first and was applied, and this result agrees with it ("+how+")"
	return ack, true
}

// answered settles what an accepted result for l means past the model:
// the other copy of a backup pair is superseded, the volunteer's lease cap
// recovers (hostages.go), and the update joins the replay window.
func (j *Job) answered(l *engine.Lease, sub submission) {
	st := &j.st
	hash := sub.hash
	other := st.sched.Answered(l)
	j.keepAnswer(l, other, sub)
	if other != nil && l.IsCopy() {
		st.abuse.backupsAnswered++
		if j.verbose {
			j.log.Debug(fmt.Sprintf("job %s: backup lease %d of worker %s answered before lease %d of worker %s", j.ID, l.ID, l.Worker, other.ID, other.Worker))
		}
	}
	j.resultAccepted(l.Worker)
	st.abuse.dupRun = 0
	if l.ReplayChecked() && hash != 0 {
		st.abuse.replays.Add(hash)
	}
}

// lostTo says where a lost lease's task went, for the log.
func lostTo(l *engine.Lease) string {
	switch {
	case l.HandedTo != 0:
		return "handed to its backup, lease " + strconv.FormatUint(l.HandedTo, 10)
	case l.Requeued():
		return "queued again"
	case l.Superseded:
		return "its backup had answered"
	}
	return "a copy: its primary still answers for the task"
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
