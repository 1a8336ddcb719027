package coordinator

import (
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// Spot checks of an RL job's learn results (docs/TRAINING.md, "What a
// learn result is checked for"). A learn lease carries everything its
// result depends on: the scored groups with their advantages and
// sampling log-probabilities, the policy version, the ratio clip, the KL
// coefficient and, in mode diloco, the local steps and the inner
// optimizer. So, as for rollouts (rlcheck.go), the coordinator computes
// a share of them again itself (compute.RLLease, the worker's own code),
// instead of handing copies to other volunteers: each learn result of
// volunteer v is drawn at the spot checks' rate for v (every one of a
// struck volunteer's), recomputed from the lease's version in the
// snapshot cache, and compared with engine.Distance. A difference past
// the spot checks' tolerance refuses the result (forged: never applied,
// no credit) and strikes v, which bans at spot_check_strikes; a match is
// a passed check. The recomputation runs on the job's loop, from the
// same bucket as the rollouts' and the disputed checks' (spotreferee.go);
// a result drawn while it is short, or whose version left the cache, is
// applied unchecked and counted, unless its volunteer is struck: then it
// is refused (quarantined), as its results count only once checked.

// learnChecks is an RL job's checks of learn results, on its loop.
type learnChecks struct {
	counts RecomputeCounts
	// maxMatched is the largest relative difference of a result that
	// matched: how close honest backends come to the tolerance.
	maxMatched float64
	// reference is the KL reference's parameters, decoded on first use.
	reference []float32
}

// LearnCheckView is spot_checks.learn in an RL job's view.
type LearnCheckView struct {
	RecomputeCounts
	// MaxMatchedDifference is the largest ‖a−b‖/max(‖a‖,‖b‖) of a result
	// that matched; Tolerance, the bound (the spot checks').
	MaxMatchedDifference float64 `json:"max_matched_difference"`
	Tolerance            float64 `json:"tolerance"`
}

func (j *Job) learnCheckView() *LearnCheckView {
	lc := &j.learnChecks
	return &LearnCheckView{RecomputeCounts: lc.counts, MaxMatchedDifference: lc.maxMatched, Tolerance: j.st.spot.Tolerance}
}

// checkLearn draws sub, the result of learn lease l, for a check, and
// refuses it when the check proves it false (or it cannot be checked
// and its volunteer is struck). It reports whether it refused; a refused
// result's lease is queued again.
func (j *Job) checkLearn(sub submission, l *engine.Lease, reject func(reason, detail string) protocol.Ack) (protocol.Ack, bool) {
	rl, ok := j.rlLeases[l.ID]
	p := j.st.spot
	if !ok || rl.task == nil || p == nil || p.Rate <= 0 {
		return protocol.Ack{}, false
	}
	v := sub.volunteer
	j.spotSync(v)
	if !p.Select(v) {
		return protocol.Ack{}, false
	}
	rel, checked := j.recomputeLearn(l, rl.task, sub.res.Update)
	lc := &j.learnChecks
	switch {
	case checked && rel <= p.Tolerance:
		lc.counts.Checked++
		lc.maxMatched = max(lc.maxMatched, rel)
		p.Pass(v)
		return protocol.Ack{}, false
	case checked:
		lc.counts.Checked++
		lc.counts.Forged++
		detail := fmt.Sprintf("learn lease %d: the coordinator computed the lease's GRPO update again from version %d, and this one differs by %.3g of its norm (tolerance %g)",
			l.ID, l.Base, rel, p.Tolerance)
		j.strike(v, detail) // emptyupdates.go
		j.requeue(l)
		return reject(protocol.ReasonForged, detail), true
	case p.Quarantined(v):
		j.requeue(l)
		return reject(protocol.ReasonQuarantined, "refused: this volunteer failed a spot check, so its learn results count only once checked, and this one could not be checked now (the coordinator's recomputations are at their bound, or its policy version left the snapshot cache)"), true
	}
	return protocol.Ack{}, false
}

// recomputeLearn computes learn lease l (task) again from its version
// within the recomputations' bucket, and returns the relative difference
// of update from it; checked is false when it could not (counted).
func (j *Job) recomputeLearn(l *engine.Lease, task *protocol.LearnTask, update []float32) (rel float64, checked bool) {
	st, n := &j.st, &j.learnChecks.counts
	body := j.snapshotBody(l.Base)
	if body == nil {
		n.SkippedNoBase++
		return 0, false
	}
	if st.referee.running || !st.referee.take(st.sched.Now()) {
		n.SkippedNoBudget++
		return 0, false
	}
	start := time.Now()
	defer func() {
		took := time.Since(start).Seconds()
		st.referee.done(took)
		st.referee.seconds += took
		n.Seconds += took
	}()
	params := j.rolloutParams(l.Base, body) // rlcheck.go: one decoded version kept
	if params == nil {
		n.SkippedNoBase++
		return 0, false
	}
	var reference []float32
	if task.KLCoef > 0 {
		if reference = j.referenceParams(); reference == nil {
			n.SkippedNoBase++
			return 0, false
		}
	}
	want, err := compute.RLLease(j.model, protocol.Lease{ID: l.ID, JobID: j.ID, BaseVersion: l.Base, Learn: task}, params, reference)
	if err != nil || want.Update == nil {
		// The lease was the coordinator's own: a failure here is its
		// own, and proves nothing about the result.
		j.log.Warn(fmt.Sprintf("job %s: recomputing learn lease %d for a spot check: %v", j.ID, l.ID, err))
		n.SkippedNoBase++
		return 0, false
	}
	rel, _ = engine.Distance(update, want.Update)
	return rel, true
}

// referenceParams is the KL reference decoded (kept after the first
// use), or nil when it does not decode.
func (j *Job) referenceParams() []float32 {
	lc := &j.learnChecks
	if lc.reference == nil {
		ref := make([]float32, j.model.NumParams)
		if err := protocol.DecodeFloatsInto(ref, j.rlReference); err != nil {
			j.logf("job %s: the KL reference does not decode for a learn check: %v", j.ID, err)
			return nil
		}
		lc.reference = ref
	}
	return lc.reference
}
