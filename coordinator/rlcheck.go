package coordinator

import (
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rljob"
)

// Spot checks of an RL job's rollouts (docs/TRAINING.md, "What a rollout
// is checked for"). A rollout result's log-probabilities drive the GRPO
// update (the importance ratio's denominator), and nothing else in it
// shows whether its tokens were sampled from the policy the lease named.
// So the coordinator recomputes them itself for a share of the results:
// each result of volunteer v is drawn at the spot checks' rate for v
// (engine.SpotChecks.RateFor: four times spot_check for a newcomer, every
// result of a struck volunteer), and its completions' log-probabilities
// are recomputed under the version the lease named, from the job's
// snapshot cache, at the lease's temperature (rljob.CheckLogProbs). A
// difference past the tolerance refuses the result (forged: nothing
// buffered, no credit) and strikes v through the job's strike path, which
// bans at spot_check_strikes; a match counts as a passed check.
//
// The recomputation runs on the job's loop, synchronously, so that the
// result is never scored before it is decided. It spends the same bucket
// as the copies' recomputations (spotreferee.go: a quarter of a core, two
// seconds of burst): a check costs about what sampling the group cost
// its worker (8 completions: 2.8 ms on charlm-tiny, 55 ms on charlm), and
// the loop waits for it. A result drawn while the bucket is short, or
// whose version left the snapshot cache, is scored unchecked and counted,
// never struck; a struck volunteer's is refused (quarantined) instead,
// since its results count only once checked.

// rolloutChecks is an RL job's checks of rollouts, on its loop.
type rolloutChecks struct {
	ws *nn.Workspace
	// params are version's parameters, decoded from its snapshot for the
	// last check (nil: none yet).
	params  []float32
	version int64
	counts  RecomputeCounts
}

// RecomputeCounts are what the coordinator's recomputations of one kind
// of an RL job's results did (rollouts, learn results).
type RecomputeCounts struct {
	// Checked counts results recomputed; Forged, those of them refused
	// forged.
	Checked int64 `json:"checked"`
	Forged  int64 `json:"forged"`
	// SkippedNoBase counts results drawn for a check whose policy version
	// had left the snapshot cache; SkippedNoBudget, those drawn while the
	// recomputations' bucket was short. Both went on unchecked.
	SkippedNoBase   int64 `json:"skipped_no_base"`
	SkippedNoBudget int64 `json:"skipped_no_budget"`
	// Seconds is the time spent recomputing (also in recompute_seconds).
	Seconds float64 `json:"seconds"`
}

// RolloutCheckView is spot_checks.rollouts in an RL job's view.
type RolloutCheckView struct {
	RecomputeCounts
	// Tolerance is the largest difference a token's log-probability may
	// show at temperature 1 (rljob.LogProbTolerance).
	Tolerance float64 `json:"tolerance"`
}

func (j *Job) rolloutCheckView() *RolloutCheckView {
	return &RolloutCheckView{RecomputeCounts: j.rlChecks.counts, Tolerance: rljob.LogProbTolerance}
}

// rolloutVerifier returns the check of rollout lease id's result from
// sub's volunteer, for rljob.Job.ScoreVerified (nil: spot checks are
// off). It is called once the result passed the job's bounds.
func (j *Job) rolloutVerifier(sub submission, id uint64) func(rljob.Claim) *rljob.Refusal {
	p := j.st.spot
	if p == nil || p.Rate <= 0 {
		return nil
	}
	v := sub.volunteer
	j.spotSync(v)
	return func(c rljob.Claim) *rljob.Refusal {
		if !p.Select(v) {
			return nil
		}
		verdict, ref := j.checkRollout(c)
		switch {
		case verdict == rljob.Matched:
			p.Pass(v)
		case verdict == rljob.Forged:
			j.strike(v, fmt.Sprintf("rollout lease %d: %s", id, ref.Detail)) // emptyupdates.go
		case ref == nil && p.Quarantined(v):
			// A struck volunteer's rollouts count only once checked:
			// a forger must not get through while the bucket is short.
			return &rljob.Refusal{Reason: protocol.ReasonQuarantined,
				Detail: "refused: this volunteer failed a spot check, so its rollouts count only once checked, and this one could not be checked now (the coordinator's recomputations are at their bound, or its policy version left the snapshot cache)"}
		}
		return ref
	}
}

// checkRollout recomputes c's log-probabilities within the bucket, and
// counts what it did.
func (j *Job) checkRollout(c rljob.Claim) (rljob.Verdict, *rljob.Refusal) {
	st, rc, n := &j.st, &j.rlChecks, &j.rlChecks.counts
	body := j.snapshotBody(c.Version)
	if body == nil {
		n.SkippedNoBase++
		return rljob.Unchecked, nil
	}
	if st.referee.running || !st.referee.take(st.sched.Now()) {
		n.SkippedNoBudget++
		return rljob.Unchecked, nil
	}
	start := time.Now()
	verdict, ref := rljob.Unchecked, (*rljob.Refusal)(nil)
	if params := j.rolloutParams(c.Version, body); params != nil {
		if rc.ws == nil {
			rc.ws = j.model.NewWorkspace(1)
		}
		verdict, _, ref = rljob.CheckLogProbs(j.model, rc.ws, params, c)
	}
	took := time.Since(start).Seconds()
	st.referee.done(took)
	st.referee.seconds += took
	n.Seconds += took
	switch {
	case verdict == rljob.Unchecked && ref == nil:
		n.SkippedNoBase++ // the body did not decode
	case verdict == rljob.Forged:
		n.Forged++
		n.Checked++
	case verdict == rljob.Matched:
		n.Checked++
	}
	return verdict, ref
}

// rolloutParams returns version's parameters, decoded from its snapshot
// body (or kept from the last check of the same version), or nil when
// the body does not decode.
func (j *Job) rolloutParams(version int64, body []byte) []float32 {
	rc := &j.rlChecks
	if rc.params != nil && rc.version == version {
		return rc.params
	}
	if rc.params == nil {
		rc.params = make([]float32, j.model.NumParams)
	}
	rc.version = -1
	if err := protocol.DecodeFloatsInto(rc.params, body); err != nil {
		j.logf("job %s: the snapshot of version %d does not decode for a rollout check: %v", j.ID, version, err)
		return nil
	}
	rc.version = version
	return rc.params
}
