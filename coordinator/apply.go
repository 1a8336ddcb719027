package coordinator

import (
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// submission is a decoded result on its way to the loop. reason is set
// when the connection already found it invalid.
type submission struct {
	worker    string
	volunteer string // whose worker it is (volunteers.go)
	res       *protocol.Result
	norm      float64 // L2 norm of res.Update, computed on the connection's goroutine
	reason    string
	detail    string
	// nonFinite marks an update with NaN or Inf: many in a row suggest the
	// model itself has diverged rather than one worker being broken.
	nonFinite bool
	// finite says the wire's decoder found every value of an f32
	// update finite (protocol.Result.Validate): the aggregator need not
	// look again.
	finite bool
	// hash is engine.UpdateHash(res.Update), for replays
	// (engine.ReplayWindow); 0: not computed yet, or an all-zero update.
	hash uint64
	// recv is how long the result's frame took to arrive (frames.go).
	recv time.Duration
	// decided, where the sender can wait, takes the ack of a result apply
	// answers later (ackLater: recheck.go); it is called once, on the
	// job's loop, or off it if the job stopped first.
	decided func(protocol.Ack)
}

// refusal counts and logs the refusal of sub for reason, and returns ack
// saying so.
func (j *Job) refusal(sub submission, ack protocol.Ack, reason, detail string) protocol.Ack {
	j.st.rejected++
	j.st.rejections[reason]++
	ack.Reason, ack.Detail = reason, detail
	j.logRefusal(sub, reason, detail)
	return ack
}

// nonFiniteCheck is how many non-finite results in a row make the job
// evaluate its model to tell divergence from broken workers.
const nonFiniteCheck = 20

// apply checks a result against the lease it answers and offers it to
// the aggregator; the model steps when the aggregator says one is due.
// The model is touched only by accepted results.
func (j *Job) apply(sub submission) protocol.Ack {
	st := &j.st
	res := sub.res
	ack := protocol.Ack{LeaseID: res.LeaseID, Version: st.model.Version}
	reject := func(reason, detail string) protocol.Ack {
		ack = j.refusal(sub, ack, reason, detail)
		return ack
	}
	if st.state != StateRunning {
		// Leases were cleared when the job stopped; say why, not "unknown".
		return reject(protocol.ReasonNotRunning, "job is "+st.state)
	}
	l := st.sched.Take(sub.worker, res.LeaseID)
	j.grants.drop(sub.worker, res.LeaseID)
	if l == nil {
		if l = st.sched.TakeExpired(sub.worker, res.LeaseID); l == nil {
			return reject(protocol.ReasonUnknownLease,
				fmt.Sprintf("lease %d is not held by this worker (it was never issued, belongs to another, or expired over %v ago)", res.LeaseID, st.sched.LateGrace()))
		}
		if a, revived := j.late(sub, l, reject); !revived { // late.go
			return a
		}
	}
	// From here on the lease is settled one way or the other.
	if l.Superseded {
		if a, ok := j.lateCopy(sub, l, ack); ok { // stragglers.go
			return a
		}
		return reject(protocol.ReasonDuplicate, fmt.Sprintf("lease %d's task was answered first by another copy (a straggler's backup, or the lease it backed up)", l.ID))
	}
	if j.bannedSubmission(sub) {
		j.requeue(l) // a copy's task stays with its primary (requeue)
		return reject(protocol.ReasonBanned, "this volunteer is banned from this coordinator; its results are not applied")
	}
	if rl, ok := j.rlLeases[l.ID]; ok && !rl.learn {
		return j.applyRollout(sub, l, ack, reject) // rljob.go
	}
	if l.IsCopy() && st.spot.IsCopy(l.ID) {
		return j.spotCopy(sub, l, ack, reject) // spotcheck.go: compared, never applied
	}
	if l.Served > 0 && l.Started() && res.BaseVersion == l.Served {
		l.Base = l.Served // rebase.go: computed from the version served in its place
		st.rebasedResults++
	}
	if l.Started() {
		ack.Staleness = st.model.Version - l.Base
	}
	if sub.reason != "" {
		j.requeue(l)
		if sub.nonFinite {
			// Each evaluation scores the whole test set: a flood of NaN
			// results must not buy one every few hundred milliseconds.
			// The first comes at once, so real divergence is caught as
			// fast as before; the run keeps counting in between.
			now := time.Now()
			if st.nonFiniteRun++; st.nonFiniteRun >= nonFiniteCheck && !st.evalRunning &&
				(st.nonFiniteEvalAt.IsZero() || now.Sub(st.nonFiniteEvalAt) >= j.nonFiniteEvalEvery) {
				j.log.Warn(fmt.Sprintf("job %s: %d results in a row had NaN or Inf; evaluating the model for divergence", j.ID, st.nonFiniteRun))
				st.nonFiniteRun = 0
				st.nonFiniteEvalAt = now
				j.startEval(false)
			}
		}
		return reject(sub.reason, sub.detail)
	}
	invalid := ""
	switch {
	case res.JobID != j.ID:
		invalid = fmt.Sprintf("result names job %q, the lease is for %q", res.JobID, j.ID)
	case len(res.Update) != j.model.NumParams:
		invalid = fmt.Sprintf("update has %d values, the model has %d parameters", len(res.Update), j.model.NumParams)
	case !l.Started():
		invalid = fmt.Sprintf("lease %d takes the latest snapshot and was never started: send start before computing", l.ID)
	case res.BaseVersion != l.Base:
		invalid = fmt.Sprintf("result claims base version %d, the lease gave %d", res.BaseVersion, l.Base)
	case res.Examples != j.leaseExamples(l):
		invalid = fmt.Sprintf("result covers %d examples, the lease has %d", res.Examples, j.leaseExamples(l))
	case res.Correct > res.Examples*j.model.LabelsPerExample:
		invalid = fmt.Sprintf("result says %d label positions were right, of %d examples of %d each", res.Correct, res.Examples, j.model.LabelsPerExample)
	}
	if invalid != "" {
		j.requeue(l)
		return reject(protocol.ReasonInvalid, invalid)
	}
	if a, refused := j.emptyUpdate(sub, l, reject); refused { // emptyupdates.go
		return a
	}
	if a, held := j.spotHold(sub, l, reject); held {
		return a
	}
	if a, refused := j.checkLearn(sub, l, reject); refused { // learncheck.go
		return a
	}
	// Finite is not enough: one update of 1e30s would overflow Adam's
	// second moment to +Inf and stall the model for good.
	// The reference is engine.NormGate's: no few clients can set it.
	update, outlier := res.Update, false
	v := st.norms.Judge(st.spec.MaxUpdateNormRatio, engine.NormResult{Volunteer: sub.volunteer, Worker: sub.worker,
		Task: l.Task, Base: l.Base, Norm: sub.norm, Update: res.Update, ClipFollows: j.clipFollows()})
	if v.Refused {
		j.requeue(l)
		j.spotRefused(sub, l)
		if v.Stale {
			j.log.Warn(fmt.Sprintf("job %s: the norm gate refused %d updates in a row from several volunteers, none accepted between: its reference %.3g was stale; it starts again",
				j.ID, engine.NormStaleRun, v.Ref))
		}
		return reject(protocol.ReasonInvalid, fmt.Sprintf("update norm %.3g is %.0fx the typical norm %.3g of accepted updates (limit %gx): the worker looks broken",
			sub.norm, sub.norm/v.Ref, v.Ref, st.spec.MaxUpdateNormRatio))
	}
	if v.Over {
		// A hard batch: the robust clip bounds it next, or its worker's
		// record is clean, or two computed it alike (engine/normoutliers.go).
		update, outlier = scaledCopy(res.Update, v.Limit/sub.norm), true
		if v.Kept == 1 || v.Kept%100 == 0 {
			j.log.Info(fmt.Sprintf("job %s: an update of norm %.3g, %.0fx the typical, for task %v: a hard batch (the robust clip bounds it, its worker's record is clean, or two computed it alike); applied scaled to the gate's limit %.3g (%d so far)",
				j.ID, sub.norm, sub.norm/v.Ref, l.Task, v.Limit, v.Kept))
		}
		sub.norm = v.Limit
	}
	if l.ReplayChecked() {
		if sub.hash == 0 {
			sub.hash = engine.UpdateHash(res.Update)
		}
		if sub.hash != 0 && st.abuse.replays.Seen(sub.hash) {
			j.duplicateRun()
			j.requeue(l)
			j.spotRefused(sub, l)
			return reject(protocol.ReasonDuplicate, "the update is bit-identical to one accepted before (a replay); the lease is queued again")
		}
	}
	if j.mirror != nil && !j.mirrorHolds(l.Task) {
		// A relay's task whose root lease was handed back: nothing
		// upstream would take its result.
		return reject(protocol.ReasonLate, "the coordinator this relay serves no longer holds this task for it (handed back near its deadline)")
	}
	if a, ok := st.agg.(*engine.Async); ok && a.Clip != nil {
		a.SetNow(st.sched.Now())
		if !a.Clip.Seeded() {
			a.Clip.Active = j.activeWorkers(sub.worker)
		}
		a.Lone = !j.anotherVolunteerAtWork(sub.worker)
	}
	// A scaled copy of a finite update is finite too.
	d := st.agg.Offer(engine.Contribution{Update: update, Round: l.Round, Staleness: ack.Staleness, Examples: res.Examples,
		Worker: sub.worker, Volunteer: sub.volunteer, Finite: sub.finite})
	if !d.Accepted {
		if d.Reason == engine.ReasonQuarantined {
			if a, later := j.recheck(sub, l, ack, d.Detail); later { // recheck.go
				return a
			}
			j.requeueRefused(l)
			d.Reason = protocol.ReasonQuarantined
			j.spotRefused(sub, l)
		} else {
			j.requeue(l)
		}
		return reject(d.Reason, d.Detail)
	}
	return j.accept(sub, l, ack, update, outlier, d)
}

// accept settles sub, the result of lease l, which the aggregator
// accepted as update (res.Update, or scaled down to the norm gate's limit
// when outlier) with decision d: credit, the lease, the gates' running
// figures, the epoch, and the model's step if one is due.
func (j *Job) accept(sub submission, l *engine.Lease, ack protocol.Ack, update []float32, outlier bool, d engine.Decision) protocol.Ack {
	st := &j.st
	res := sub.res
	if d.Clipped {
		// Accepted and applied, bounded by the robust clip.
		st.clipped++
		ack.Reason, ack.Detail = protocol.ReasonClipped, "applied clipped to the robust radius around the running centre"
	} else if outlier {
		ack.Reason, ack.Detail = protocol.ReasonClipped, "applied scaled down to the norm gate's limit (a hard batch: the robust clip bounds it, this worker's record is clean, or another computed it alike)"
	}
	j.observeValidation(update) // validate.go: the validation's noise floor
	j.ledger.Credit(sub.volunteer, j.ID, int64(res.Examples), float64(res.Examples)*j.flopsPerExample)
	st.empty.accepted(sub.volunteer)
	st.sched.Observe(sub.worker, res.Examples, st.sched.Now().Sub(l.Since))
	st.sched.ObserveComm(sub.worker, res.CommMs, res.ComputeMs, l.LocalSteps)
	j.answered(l, sub) // stragglers.go: the other copy, the lease cap, the replay window
	st.nonFiniteRun = 0
	// A clipped update counts at the norm it was applied with: a hostile
	// one's own size must not raise the gate for the next.
	norm := sub.norm
	if d.Clipped && d.Norm > 0 {
		norm = min(norm, d.Norm)
	}
	st.norms.Observe(sub.volunteer, norm)
	j.countApplied(1, res.Examples, ack.Staleness)
	j.spotSample(sub, l)
	if j.mirror != nil {
		j.mirrorAnswered(l, sub.volunteer, res)
	}
	if j.rl != nil {
		j.rlLearnAccepted(l) // an RL lease's queue task only paces the leases (rljob.go)
	}
	// The aggregator keeps its own copy of what it holds; an asynchronous
	// rule's step applies res.Update before this returns.
	j.step(st.sched.Now())
	ack.Accepted, ack.Version = true, st.model.Version
	if st.remaining <= 0 {
		j.endEpoch()
	}
	return ack
}

// countApplied books results accepted at staleness, of examples in all:
// a direct result is one, a relay's aggregate its results.
func (j *Job) countApplied(results, examples int, staleness int64) {
	st := &j.st
	st.applied += int64(results)
	st.stalenessSum += staleness * int64(results)
	j.observeStaleness(staleness, results)
	st.stalenessHist[min(staleness, stalenessBuckets-1)] += int64(results)
	st.examplesSeen += int64(examples)
	st.epochExamples += int64(examples)
	st.remaining -= int64(examples)
}

// step applies the aggregator's step if one is due at now.
func (j *Job) step(now time.Time) {
	st := &j.st
	if st.state != StateRunning {
		return
	}
	if j.mirror != nil {
		j.mirrorStep(now) // a relay's model moves with its root's alone
		return
	}
	s, ok := st.agg.Ready(now)
	if r, rounds := st.agg.(*engine.Rounds); !ok && rounds && j.roundCannotGrow(r) {
		s, ok = r.Flush()
	}
	if !ok {
		return
	}
	st.model.Apply(s)
	if j.onVersion != nil {
		j.onVersion(st.model.Version)
	}
	if r, ok := st.agg.(*engine.Rounds); ok {
		if s.Results < r.Size {
			st.roundsShort++
		}
		st.clipped += r.Clipped
		r.Clipped = 0
		if r.Colluding > 0 && j.verbose {
			j.logf("job %s: round %d left %d results out of its step as too alike another volunteer's (collusion)", j.ID, s.Round, r.Colluding)
		}
		st.colluding += r.Colluding
		r.Colluding = 0
		if r.Climbing > 0 && j.verbose {
			j.logf("job %s: round %d left %d results out of its step as climbing on the held-out batch against the round's others", j.ID, s.Round, r.Climbing)
		}
		st.climbing += r.Climbing
		r.Climbing = 0
	}
	if s.Round != 0 && j.verbose {
		j.logf("job %s: round %d closed with %d results: version %d", j.ID, s.Round, s.Results, st.model.Version)
	}
	// In an asynchronous mode a version is one result, or a relay's
	// aggregate of several: eval_every counts the results.
	if every := evalEveryVersions(&st.spec); st.model.Version-st.lastEvalAt >= every || !st.spec.Rounds() && st.applied-st.lastEvalApplied >= every {
		j.startEval(false)
	}
	if st.model.Version-st.ckptVersion >= int64(st.spec.CheckpointEvery) {
		j.checkpoint(false)
	}
}

// roundCannotGrow reports whether the open round has no lease out and
// may lease none of the tasks queued, all of which it holds already (an
// epoch of fewer tasks than a round's leases, engine.Scheduler.Exhausted):
// it closes with the results it has instead of waiting for round_timeout.
// So does a round every relay at work has answered (relayroot.go), which
// no relay may lease more of.
func (j *Job) roundCannotGrow(r *engine.Rounds) bool {
	st := &j.st
	if r.Partial().Results == 0 || !st.sched.Exhausted(r.Round()) && !j.relaysAnswered(r.Round()) {
		return false
	}
	for _, l := range st.sched.Leases() {
		if l.Round == r.Round() && l.Pending() {
			return false
		}
	}
	return true
}

func (j *Job) endEpoch() {
	st := &j.st
	st.epoch++
	j.logf("job %s: epoch %d complete: %d examples, version %d", j.ID, st.epoch, st.epochExamples, st.model.Version)
	if st.epoch >= st.spec.MaxEpochs {
		// Hand out nothing more; the final evaluation decides the outcome.
		st.sched.SetQueue(nil)
		j.startEval(true)
		return
	}
	j.startEpoch()
}

// evalEveryVersions turns eval_every, counted in batches of training (one
// async H=1 result is one), into versions: a diloco round of M results of
// H steps each is M*H of them; with dynamic local steps, H is taken at its
// most (the fastest worker's).
func evalEveryVersions(s *jobspec.Spec) int64 {
	per := s.TaskSteps()
	if s.Rounds() {
		per *= s.RoundSize
	}
	return int64(max(1, s.EvalEvery/per))
}

// volunteerOf is worker's volunteer; a worker without a known volunteer
// counts as its own.
func (j *Job) volunteerOf(worker string) string {
	if m, ok := j.st.members[worker]; ok && m.volunteer != "" {
		return m.volunteer
	}
	return worker
}

// anotherVolunteerAtWork reports whether a volunteer other than worker's
// holds a lease that is not straggling: activeWorkers(worker) > 1, without
// counting them all. It runs for every result, so it stops at the first.
func (j *Job) anotherVolunteerAtWork(worker string) bool {
	mine := j.volunteerOf(worker)
	var after time.Duration // the straggler threshold, taken when first needed
	now := j.st.sched.Now()
	for _, l := range j.st.sched.Leases() {
		if j.volunteerOf(l.Worker) == mine {
			continue
		}
		if after == 0 {
			after = j.stragglerAfter()
		}
		if now.Sub(l.Since) < after {
			return true
		}
	}
	return false
}

// activeWorkers counts the distinct volunteers holding leases, with
// worker's (a worker without a known volunteer counts as its own). A
// straggling lease (stragglers.go) does not count: a hostage holding
// leases from the start must not keep the warm-up waiting for it.
func (j *Job) activeWorkers(worker string) int {
	seen := map[string]bool{j.volunteerOf(worker): true}
	now, after := j.st.sched.Now(), j.stragglerAfter()
	for _, l := range j.st.sched.Leases() {
		if now.Sub(l.Since) < after {
			seen[j.volunteerOf(l.Worker)] = true
		}
	}
	return len(seen)
}

// clipFollows reports whether the robust clip bounds whatever update is
// offered next: async mode with robust aggregation, past its warm-up.
func (j *Job) clipFollows() bool {
	a, ok := j.st.agg.(*engine.Async)
	return ok && a.Clip != nil && a.Clip.Seeded()
}

// scaledCopy returns u times k in a new slice: the result itself stays
// as sent, for the spot checks that compare it.
func scaledCopy(u []float32, k float64) []float32 {
	out := make([]float32, len(u))
	for i, v := range u {
		out[i] = float32(float64(v) * k)
	}
	return out
}
