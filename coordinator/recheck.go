package coordinator

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// The validation's second opinion. The validation (validate.go,
// engine.Zeno) refuses a flagged update whose step climbs on the
// coordinator's held-out batch by more than honest steps are seen to.
// Honest steps have a heavy tail: a hard batch (Fashion-MNIST's shirts
// and T-shirts, a mislabelled digit) can climb that far too, and the
// volunteer who computed it honestly lost its work (1–2% of results on
// the CNNs, every one a worker's honest result). So before such a
// result is refused, the coordinator recomputes its task itself, as it
// referees a spot check (spotreferee.go: the base snapshot, the task's
// examples, the reference layers on one thread, from the same bounded
// share of a core; on the process's fastest GEMM kernel, not the pinned
// one, since only a tolerance is asked: a fashion-cnn task takes about
// 0.06 s instead of 0.3 s):
//   - the same update, within the spot checks' tolerance: the work is
//     honest and the batch is hard. The volunteer is credited; the
//     update is not applied (the validation's verdict on its step
//     stands), and the task is done for this epoch (queued again, it was
//     computed from a model that had not moved, in the asynchronous
//     warm-up, to the same update without end);
//   - another update: the worker did not compute what its lease asked.
//     It is refused, and its volunteer struck as for a failed spot check
//     while another volunteer is connected (as a spot check is drawn
//     only then: a struck volunteer's results wait for another's copies,
//     and a lone one's, workers without keys behind one address, would
//     wait for ever).
//
// The result's ack waits for the recomputation (its connection's reader
// waits, not the job's loop). Refusals come in bursts: an attack that
// moves the model makes every honest result of the next moments climb,
// and with two recomputations out the rest were refused unheard (9 of 56
// honest results so refused under ALIE from 4 of 9 volunteers, 0.6% to
// 1.4% of all their work). So a result that finds no recomputation free
// waits for one, in a short queue (recheckWaiting) for at most
// recheckWait; the queue is drained as recomputations end and on the
// loop's tick. Where none can be made (the queue is full, the wait runs
// out, the base snapshot is gone, the caller cannot wait), the result is
// refused as before, and a spot check of it may still be drawn
// (spotRefused).

// ackLater is the reason apply gives for a result whose ack comes later,
// through its submission's decided; it never leaves the coordinator.
const ackLater = "\x00later"

// recheckParallel is how many recomputations of refused results may run
// at once: refusals come in bursts (a round's results arrive together),
// and the bucket, not this, bounds their CPU.
const recheckParallel = 2

// recheckWait is the longest a refused result waits for a recomputation
// to be free; its connection's next messages wait with it.
const recheckWait = 5 * time.Second

// recheckQueueBytes bounds the updates (and their base snapshots, held
// for them) waiting for a recomputation; recheckQueueMax their count.
const (
	recheckQueueBytes = 256 << 20
	recheckQueueMax   = 16
)

// waitingRecheck is a refused result waiting for a recomputation.
type waitingRecheck struct {
	sub    submission
	l      *engine.Lease
	ack    protocol.Ack
	detail string
	snap   *snapshot // its base, held while it waits
	since  time.Time
}

// recheckState counts the second opinions, on the loop.
type recheckState struct {
	waiting    []waitingRecheck // results waiting for a recomputation, oldest first
	waited     int64            // results that waited for a recomputation to be free
	running    int              // recomputations out
	started    int64            // recomputations begun
	vindicated int64            // matched: applied
	// vindicatedExamples is their examples.
	vindicatedExamples int64
	refuted            int64 // did not match: refused and struck
	skipped            int64 // refused without one (no budget, no base, no waiting caller)
}

// RecheckView is what the validation's second opinions did.
type RecheckView struct {
	// Rechecked counts the results validation refused that the
	// coordinator then recomputed.
	Rechecked int64 `json:"rechecked"`
	// Vindicated counts those whose recomputation matched: honest work on
	// a hard batch, then applied as any accepted result.
	Vindicated int64 `json:"vindicated"`
	// VindicatedExamples is their examples.
	VindicatedExamples int64 `json:"vindicated_examples"`
	// Refuted counts those whose recomputation did not match: refused,
	// and their volunteer struck.
	Refuted int64 `json:"refuted"`
	// Skipped counts refusals with no recomputation (none could be made
	// at the time, nor within recheckWait).
	Skipped int64 `json:"skipped"`
	// Waited counts the results that waited for a recomputation to be
	// free before theirs started (or the wait ran out).
	Waited int64 `json:"waited"`
}

func (j *Job) recheckView() RecheckView {
	r := &j.st.recheck
	return RecheckView{Rechecked: r.started, Vindicated: r.vindicated, VindicatedExamples: r.vindicatedExamples, Refuted: r.refuted, Skipped: r.skipped, Waited: r.waited}
}

// recheckRestore takes the counts a checkpoint kept (nil: none).
func (j *Job) recheckRestore(r *RecheckView) {
	if r == nil {
		return
	}
	j.st.recheck = recheckState{started: r.Rechecked, vindicated: r.Vindicated, vindicatedExamples: r.VindicatedExamples, refuted: r.Refuted, skipped: r.Skipped, waited: r.Waited}
}

// recheck starts the recomputation of sub, the result of lease l that
// validation refused (why: detail), if one can be made now, and
// returns the ack that says its answer comes later. The lease's task is
// neither done nor queued again until then. ok is false when none can be
// made: the caller refuses the result.
func (j *Job) recheck(sub submission, l *engine.Lease, ack protocol.Ack, detail string) (protocol.Ack, bool) {
	st := &j.st
	if sub.decided == nil || j.rl != nil {
		// An RL job's learn result is a GRPO gradient of the groups its
		// lease carried, which the referee's supervised computation of
		// the lease's queue task is not: it would differ and strike an
		// honest volunteer.
		return ack, false
	}
	snap := j.snaps.snapshot(l.Base)
	if !l.Started() || snap == nil || l.Task.Shard < 0 || l.Task.Shard >= len(j.shardBody) {
		st.recheck.skipped++
		return ack, false
	}
	free := len(st.recheck.waiting) == 0 && j.recheckFree()
	if !free && len(st.recheck.waiting) >= j.recheckQueueLen() {
		st.recheck.skipped++
		return ack, false
	}
	// The connection's reader waits for the ack, but if the connection
	// drops its frame's memory goes back to the pool: keep copies.
	res := *sub.res
	res.Update = slices.Clone(res.Update)
	sub.res = &res
	if !free {
		st.recheck.waited++
		st.recheck.waiting = append(st.recheck.waiting, waitingRecheck{sub: sub, l: l, ack: ack, detail: detail, snap: snap, since: st.sched.Now()})
		ack.Reason = ackLater
		return ack, true
	}
	j.startRecheck(sub, l, ack, detail, snap)
	ack.Reason = ackLater
	return ack, true
}

// recheckFree reports whether a recomputation may start now, and if so
// spends its share of the bucket.
func (j *Job) recheckFree() bool {
	st := &j.st
	return st.recheck.running < recheckParallel && st.referee.take(st.sched.Now())
}

// recheckQueueLen is how many results may wait for a recomputation: at
// most recheckQueueMax, and their updates within recheckQueueBytes.
func (j *Job) recheckQueueLen() int {
	return max(1, min(recheckQueueMax, recheckQueueBytes/max(1, 8*j.model.NumParams)))
}

// recheckWaiting starts the recomputations of waiting results while they
// are free, and refuses those that waited past recheckWait (or whose job
// stopped meanwhile). It runs on the loop: on its tick, and as each
// recomputation ends.
func (j *Job) recheckWaiting() {
	st := &j.st
	now := st.sched.Now()
	for len(st.recheck.waiting) > 0 {
		w := st.recheck.waiting[0]
		switch {
		case st.state != StateRunning:
			w.sub.decided(j.rechecked(w.sub, w.l, w.ack, nil, nil, w.detail)) // not_running
		case now.Sub(w.since) > recheckWait:
			st.recheck.skipped++
			j.requeueRefused(w.l)
			j.spotRefused(w.sub, w.l)
			w.sub.decided(j.refusal(w.sub, w.ack, protocol.ReasonQuarantined,
				fmt.Sprintf("%s; the coordinator could not recompute it within %v", w.detail, recheckWait)))
		case j.recheckFree():
			j.startRecheck(w.sub, w.l, w.ack, w.detail, w.snap)
		default:
			return
		}
		st.recheck.waiting[0] = waitingRecheck{}
		st.recheck.waiting = st.recheck.waiting[1:]
	}
}

// dropWaitingRechecks answers every waiting result with why: the job's
// loop is ending and will decide nothing more.
func (j *Job) dropWaitingRechecks(why string) {
	for _, w := range j.st.recheck.waiting {
		ack := w.ack
		ack.Reason, ack.Detail = protocol.ReasonNotRunning, why
		w.sub.decided(ack)
	}
	j.st.recheck.waiting = nil
}

// startRecheck recomputes sub's task (the result of lease l that
// validation refused, why: detail) from snap on a goroutine, and decides
// it on the loop when done. The bucket was spent by recheckFree.
func (j *Job) startRecheck(sub submission, l *engine.Lease, ack protocol.Ack, detail string, snap *snapshot) {
	st := &j.st
	st.recheck.started++
	st.recheck.running++
	lease := j.refereeLease(l)
	f16 := wireUpdateCodec(st.spec) == protocol.CodecF16
	body := j.shardBody[l.Task.Shard]
	decided := sub.decided
	j.evals.Add(1) // Close waits for it, as for an evaluation
	go func() {
		defer j.evals.Done()
		start := time.Now()
		u, err := j.referee(&compute.Reference{AnyKernel: true}, lease, snap.body, body, f16)
		took := time.Since(start).Seconds()
		if xerr := j.exec(context.Background(), func(st *jobState) {
			st.recheck.running--
			st.referee.seconds += took
			st.referee.done(took)
			decided(j.rechecked(sub, l, ack, u, err, detail))
			j.recheckWaiting()
		}); xerr != nil {
			ack.Reason, ack.Detail = protocol.ReasonNotRunning, "the job stopped while the coordinator recomputed this result"
			decided(ack)
		}
	}()
}

// rechecked decides sub, the result of lease l that validation refused
// (why: detail), by u, the coordinator's own computation of its task (or
// err, why it has none). It runs on the loop and returns the result's ack.
func (j *Job) rechecked(sub submission, l *engine.Lease, ack protocol.Ack, u []float32, err error, detail string) protocol.Ack {
	st := &j.st
	if st.state != StateRunning {
		// Paused or stopped meanwhile: its task goes back with the
		// others (held by no lease, it would otherwise be lost to the
		// epoch, which a resumed job then never ends).
		j.requeue(l)
		return j.refusal(sub, ack, protocol.ReasonNotRunning, "job is "+st.state)
	}
	if err != nil {
		st.recheck.skipped++
		j.requeueRefused(l)
		return j.refusal(sub, ack, protocol.ReasonQuarantined, fmt.Sprintf("%s; the coordinator could not recompute it: %v", detail, err))
	}
	claimed := engine.SpotResult{Volunteer: sub.volunteer, Hint: j.hintOf(sub.worker), Update: sub.res.Update, Examples: sub.res.Examples, Slack: slackOf(sub.res)}
	agree, how := st.spot.Agree(engine.SpotResult{Volunteer: engine.Referee, Referee: true, Update: u, Examples: claimed.Examples}, claimed)
	if !agree {
		st.recheck.refuted++
		j.requeueRefused(l)
		if j.otherVolunteer(sub.volunteer) {
			j.strike(sub.volunteer, "the coordinator's recomputation of a result its validation refused: "+how)
		}
		return j.refusal(sub, ack, protocol.ReasonQuarantined, fmt.Sprintf("%s, and the coordinator's own computation of the task differs (%s)", detail, how))
	}
	// Honest, and the validation's verdict on its step stands (the
	// recomputation says who computed it honestly, not that the step
	// helps): credited, not applied, and its task done for this epoch:
	// queued again, it would be computed from a model that may not have
	// moved to the same update, without end.
	ex := int64(sub.res.Examples)
	st.recheck.vindicated++
	st.recheck.vindicatedExamples += ex
	j.ledger.Credit(sub.volunteer, j.ID, ex, float64(ex)*j.flopsPerExample)
	j.resultAccepted(sub.worker)
	if sub.hash == 0 {
		sub.hash = engine.UpdateHash(sub.res.Update)
	}
	if sub.hash != 0 {
		st.abuse.replays.Add(sub.hash) // a replay of it is a duplicate (engine.ReplayWindow)
	}
	j.requeue(l) // its place in a round goes to another task
	st.sched.TakeQueued(l.Task)
	st.epochExamples += ex
	st.remaining -= ex
	if j.verbose {
		j.log.Debug(fmt.Sprintf("job %s: result of lease %d from worker %s credited, not applied: validation refused it, the coordinator's recomputation matched it (%s)",
			j.ID, l.ID, sub.worker, how))
	}
	if st.remaining <= 0 {
		j.endEpoch()
	}
	ack.Accepted = true
	ack.Reason, ack.Detail = protocol.ReasonQuarantined, "credited, not applied: "+detail+
		"; the coordinator's own computation of the task matched it ("+how+"): honest work on a hard batch, skipped this epoch"
	return ack
}
