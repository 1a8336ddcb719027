package coordinator

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// Spot checks on the job's loop (engine.SpotChecks is the policy). A
// sample of accepted results, and every result of a struck volunteer, is
// computed again by another volunteer: a copy lease of the same task from
// the same snapshot (granted, whatever the job's snapshot mode), with the
// same dropout masks (protocol.Lease.CopyOf). A copy comes in f32, or
// f16 in an f16 job; a primary in a lossy error-feedback codec (i8) is
// compared with the slack its codec allows (slackOf). A copy's result is
// compared, never applied, and takes no place in a round. A mismatch is
// recomputed by the coordinator (spotreferee.go), never given to a third
// volunteer.
// Credit, refutations, strikes and bans go to the ledger.

// spotSeed is where a job's spot check draws come from: a secret
// seed, so that no volunteer can tell from the job spec which of its
// results will be checked. Tests build their own engine.SpotChecks.
func spotSeed() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// initSpot builds the job's spot check policy from spec.
func (j *Job) initSpot(spec jobspec.Spec) {
	p := engine.NewSpotChecks(spotSeed(), spec.SpotCheck, spec.SpotCheckStrikes, spec.SpotCheckTolerance,
		func() time.Time { return j.st.sched.Now() })
	// A check waits for a copy to be taken and computed: a few lease
	// timeouts, so that a slow volunteer's copy can still come back.
	p.Timeout = max(3*spec.LeaseTimeout.Duration, 10*time.Second)
	j.st.spot = p
}

// strikeLedger is a ledger that tells a volunteer's strikes and ban
// (the server's book): the spot checks follow it, pardons included.
type strikeLedger interface {
	strikesOf(volunteer string) (strikes int, banned bool)
}

func (b *volunteerBook) strikesOf(v string) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.byID[v]; s != nil {
		return s.Strikes, s.Banned
	}
	return 0, false
}

// spotSync brings v's standing in the spot checks up to the ledger's.
func (j *Job) spotSync(v string) {
	if l, ok := j.ledger.(strikeLedger); ok {
		strikes, banned := l.strikesOf(v)
		j.st.spot.SetStanding(v, strikes, banned)
	}
}

// hint is what a member's worker claims to be: the first guess at its
// class, before its results show what it computes like.
func (m member) hint() string { return m.kind + "/" + m.backend }

// connectedHints maps each connected volunteer to its hint.
func (j *Job) connectedHints() map[string]string {
	out := make(map[string]string, len(j.st.members))
	for _, m := range j.st.members {
		out[m.volunteer] = m.hint()
	}
	return out
}

// otherVolunteer reports whether a volunteer other than v, not struck,
// is connected: someone who could compute a copy of v's task.
func (j *Job) otherVolunteer(v string) bool {
	for _, m := range j.st.members {
		if m.volunteer != v && !j.st.spot.Quarantined(m.volunteer) {
			return true
		}
	}
	return false
}

// spotHold screens a valid primary result before it is offered: a banned
// volunteer's is refused, a struck one's is held for a check and its task
// queued again. It reports whether it answered.
func (j *Job) spotHold(sub submission, l *engine.Lease, reject func(reason, detail string) protocol.Ack) (protocol.Ack, bool) {
	p := j.st.spot
	v := sub.volunteer
	j.spotSync(v)
	if p.Banned(v) {
		j.requeue(l)
		return reject(protocol.ReasonBanned, "this volunteer was banned after failing spot checks"), true
	}
	if p.Rate <= 0 || !p.Quarantined(v) || j.rl != nil {
		// Without spot checks nothing could vindicate a held result:
		// strikes from other jobs only count against the ban. An RL
		// job's spot checks are the coordinator's own recomputations of
		// rollouts (rlcheck.go) and learn results (learncheck.go),
		// every one of a struck volunteer's; they get no copies.
		return protocol.Ack{}, false
	}
	j.requeue(l)
	detail := "held: this volunteer failed a spot check, so its results are compared with another volunteer's before they count (never applied; credited if they agree)"
	// A check needs its base snapshot held: a result older than the
	// staleness bound has lost it, and its check would only wait out its
	// timeout in one of the few pending places.
	if j.otherVolunteer(v) && j.snapshotBody(l.Base) != nil && p.Select(v) {
		p.Open(*l, engine.SpotResult{Volunteer: v, Hint: j.hintOf(sub.worker), Update: sub.res.Update, Examples: sub.res.Examples, Slack: slackOf(sub.res), Held: true})
	} else {
		detail = "refused: this volunteer failed a spot check, and no check of this result could be made now (no other volunteer, its base snapshot is gone, or the checks are full)"
	}
	return reject(protocol.ReasonQuarantined, detail), true
}

// slackOf is the L2 allowance a spot check gives res for its codec: what
// a lossy error-feedback codec (i8) may have moved the update by
// (protocol.UpdateSlack); 0 for f32 and f16.
func slackOf(res *protocol.Result) float64 {
	if res.Codec == "" || res.Codec == protocol.CodecF32 {
		return 0
	}
	return protocol.UpdateSlack(res.Codec, res.Packed)
}

func (j *Job) hintOf(worker string) string {
	if m, ok := j.st.members[worker]; ok {
		return m.hint()
	}
	return "?"
}

// spotSample draws whether an applied primary result is checked, and
// opens the check.
func (j *Job) spotSample(sub submission, l *engine.Lease) {
	p := j.st.spot
	if p.Rate <= 0 || j.rl != nil || !j.otherVolunteer(sub.volunteer) || j.snapshotBody(l.Base) == nil || !p.Select(sub.volunteer) {
		return
	}
	p.Open(*l, engine.SpotResult{Volunteer: sub.volunteer, Hint: j.hintOf(sub.worker), Update: sub.res.Update, Examples: sub.res.Examples, Slack: slackOf(sub.res), Applied: true})
}

// spotRefused opens a check of a result the coordinator refused, when
// SelectRefused says so: the copy decides whether its volunteer lied (a
// strike) or was honest and unlucky (nothing). Never applied or credited.
func (j *Job) spotRefused(sub submission, l *engine.Lease) {
	p := j.st.spot
	if p.Rate <= 0 || j.rl != nil || !j.otherVolunteer(sub.volunteer) || j.snapshotBody(l.Base) == nil || !p.SelectRefused(sub.volunteer) {
		return
	}
	p.Open(*l, engine.SpotResult{Volunteer: sub.volunteer, Hint: j.hintOf(sub.worker), Update: sub.res.Update, Examples: sub.res.Examples, Slack: slackOf(sub.res)})
}

// grantCopy leases worker a copy of a checked task if one waits for a
// volunteer like it: at most one per request, so that one volunteer
// cannot gather every copy.
func (j *Job) grantCopy(worker, baseURL string) (protocol.Lease, bool) {
	st := &j.st
	m, ok := st.members[worker]
	if !ok || st.spot.Pending() == 0 {
		return protocol.Lease{}, false
	}
	j.spotSync(m.volunteer)
	c := st.spot.CopyFor(m.volunteer, m.hint(), j.connectedHints())
	if c == nil || j.snapshotBody(c.Primary.Base) == nil {
		return protocol.Lease{}, false
	}
	l := st.sched.GrantCopy(worker, &c.Primary)
	st.spot.Copied(c, l.ID, m.volunteer, l.Task.Count)
	st.leasesIssued++
	spec := &st.spec
	return protocol.Lease{
		ID: l.ID, JobID: j.ID, ShardID: l.Task.Shard, ShardURL: baseURL + j.shardPath(l.Task.Shard),
		Start: l.Task.Start, Count: l.Task.Count, BatchSize: spec.BatchSize, LocalSteps: l.LocalSteps,
		Inner: innerOptimizer(spec), UpdateKind: spec.UpdateKind(), Snapshot: protocol.SnapshotGranted,
		BaseVersion: l.Base, SnapshotURL: j.snapshotURL(worker, l.Base, baseURL), Round: l.Round,
		DeadlineUnixMs: l.Deadline.UnixMilli(), CopyOf: c.Primary.ID,
	}, true
}

// spotCopy takes the result of a copy lease l: checked like any result,
// then compared, never applied.
func (j *Job) spotCopy(sub submission, l *engine.Lease, ack protocol.Ack, reject func(reason, detail string) protocol.Ack) protocol.Ack {
	st := &j.st
	res := sub.res
	if st.spot.Banned(sub.volunteer) {
		st.spot.CopyGone(l.ID)
		return reject(protocol.ReasonBanned, "this volunteer was banned after failing spot checks")
	}
	invalid := sub.detail
	reason := sub.reason
	if reason == "" {
		reason = protocol.ReasonInvalid
		switch {
		case res.JobID != j.ID:
			invalid = fmt.Sprintf("result names job %q, the lease is for %q", res.JobID, j.ID)
		case len(res.Update) != j.model.NumParams:
			invalid = fmt.Sprintf("update has %d values, the model has %d parameters", len(res.Update), j.model.NumParams)
		case res.BaseVersion != l.Base:
			invalid = fmt.Sprintf("result claims base version %d, the lease gave %d", res.BaseVersion, l.Base)
		case res.Examples != l.Task.Count:
			invalid = fmt.Sprintf("result covers %d examples, the lease has %d", res.Examples, l.Task.Count)
		}
	}
	if invalid != "" {
		// A copy that cannot be compared goes to another volunteer.
		st.spot.CopyGone(l.ID)
		return reject(reason, invalid)
	}
	if sub.norm == 0 && allZero(res.Update) && !j.zeroFits(sub.volunteer, l.Task) {
		// Evidence by itself (emptyupdates.go): no comparison needed.
		st.spot.CopyGone(l.ID)
		j.zeroEvidence(sub.volunteer, l.ID)
		return reject(protocol.ReasonInvalid, "the copy's update is all zeros, but the model does not fit the task's examples, so their gradient is not zero")
	}
	st.spot.RefNorm = st.norms.Reference() // a typical accepted norm (engine.NormGate)
	o, ok := st.spot.Answer(l.ID, engine.SpotResult{Volunteer: sub.volunteer, Hint: j.hintOf(sub.worker), Update: res.Update, Examples: res.Examples, Slack: slackOf(res)})
	if !ok {
		return reject(protocol.ReasonLate, "the spot check this copy belonged to was dropped: it waited too long for its copies")
	}
	j.spotSettle(o)
	if !o.Done {
		j.spotReferee() // a mismatch: the coordinator decides
	}
	ack.Staleness = 0
	if o.Agreed || o.Disputed {
		ack.Accepted, ack.Detail = true, o.Detail
		return ack
	}
	return reject(protocol.ReasonQuarantined, o.Detail)
}

// spotSettle credits, refutes, strikes and bans what a check decided.
func (j *Job) spotSettle(o engine.Outcome) {
	for _, r := range o.Credit {
		j.ledger.Credit(r.Volunteer, j.ID, int64(r.Examples), j.spotFLOPs(r.Examples))
	}
	for _, r := range o.Refute {
		j.ledger.Refute(r.Volunteer, j.ID, int64(r.Examples), j.spotFLOPs(r.Examples))
		j.log.Warn(fmt.Sprintf("job %s: volunteer %s: an applied result of %d examples was refuted by a spot check; its credit is taken back", j.ID, r.Volunteer, r.Examples), logVolunteer, r.Volunteer)
	}
	for _, v := range o.Struck {
		j.strike(v, "a spot check: "+o.Detail) // emptyupdates.go
	}
}

// spotFLOPs is the compute credited for examples.
func (j *Job) spotFLOPs(examples int) float64 { return float64(examples) * j.flopsPerExample }

// spotCopyGone records that a copy lease ended without a result.
func (j *Job) spotCopyGone(l *engine.Lease) {
	if j.st.spot != nil {
		j.st.spot.CopyGone(l.ID)
	}
}

// spotExpire drops checks that waited too long; their copies still out
// are refused when they answer.
func (j *Job) spotExpire() {
	for _, c := range j.st.spot.Expire() {
		j.logf("job %s: the spot check of lease %d (volunteer %s) was dropped: no copy came back in %v",
			j.ID, c.Primary.ID, c.Results[0].Volunteer, j.st.spot.Timeout)
	}
	// A check whose base version left the snapshot cache can get no more
	// copies (each computes from that base): it goes now, not at its
	// timeout. A larger --snapshot-cache-mb keeps more bases.
	for _, c := range j.st.spot.Checks() {
		if j.snaps.snapshot(c.Primary.Base) == nil {
			j.st.spot.Abandon(c)
			j.logf("job %s: the spot check of lease %d (volunteer %s) was dropped: its base version %d left the snapshot cache",
				j.ID, c.Primary.ID, c.Results[0].Volunteer, c.Primary.Base)
		}
	}
}

// SpotCheckView is the job view's spot_checks.
type SpotCheckView struct {
	engine.SpotCounters
	Pending int `json:"pending"`
	// DuplicatedFraction is the share of all examples computed that
	// copies computed again: duplicated / (examples_seen + duplicated).
	DuplicatedFraction float64 `json:"duplicated_fraction"`
	Rate               float64 `json:"rate"`
	// RecomputeSeconds is the time the coordinator spent computing the
	// third results of disputed checks (spotreferee.go), and an RL
	// job's rollouts' log-probabilities (rlcheck.go) and learn results (learncheck.go).
	RecomputeSeconds float64 `json:"recompute_seconds"`
	// Rollouts are an RL job's checks of rollouts (rlcheck.go); absent
	// for other jobs.
	Rollouts *RolloutCheckView `json:"rollouts,omitempty"`
	// Learn are an RL job's checks of learn results (learncheck.go);
	// absent for other jobs.
	Learn *LearnCheckView `json:"learn,omitempty"`
}

func (j *Job) spotView() *SpotCheckView {
	st := &j.st
	v := &SpotCheckView{SpotCounters: st.spot.Counters, Pending: st.spot.Pending(), Rate: st.spot.Rate, RecomputeSeconds: st.referee.seconds}
	if d := v.DuplicatedExamples; d > 0 {
		v.DuplicatedFraction = float64(d) / float64(st.examplesSeen+d)
	}
	if j.rl != nil {
		v.Rollouts = j.rolloutCheckView()
		v.Learn = j.learnCheckView()
	}
	return v
}

// spotProgress is the policy's memory in a checkpoint: each volunteer's
// passes, strikes and class, and the counters.
type spotProgress struct {
	Volunteers map[string]engine.Trust `json:"volunteers,omitempty"`
	Counters   engine.SpotCounters     `json:"counters"`
}

func (j *Job) spotSave() *spotProgress {
	return &spotProgress{Volunteers: j.st.spot.Volunteers(), Counters: j.st.spot.Counters}
}

func (j *Job) spotRestore(p *spotProgress) {
	if p != nil {
		j.st.spot.Restore(p.Volunteers, p.Counters)
	}
}

// spotBanned reports whether worker's volunteer is banned by the spot
// checks: it gets no more work.
func (j *Job) spotBanned(worker string) bool {
	m, ok := j.st.members[worker]
	if ok {
		j.spotSync(m.volunteer)
	}
	return ok && j.st.spot.Banned(m.volunteer)
}
