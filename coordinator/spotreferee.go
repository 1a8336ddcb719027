package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// The coordinator as a spot check's referee (engine/spotreferee.go has
// the rule). Every mismatched check is recomputed here: the task's
// examples from its shard's body, the base snapshot the copies fetched,
// the lease's inner plan, on compute.Reference (nn's layers on the
// pure-Go kernel: the pinned fp32 result) on a goroutine of its own; the
// result comes back to the loop through exec and enters the check as its
// third.
//
// Recomputations are bounded per job by the CPU they take, not by their
// count, since a task costs milliseconds on mnist-mlp and seconds on a
// transformer: one at a time, from a bucket of refereeBurst seconds of
// compute that refills at refereeShare seconds per second on the job's
// clock (a quarter of one core). A recomputation may start while the
// bucket holds what one is expected to take (a running mean of the last
// ones, refereeFirstGuess before any), or is full; what it really took is
// charged when it ends, and a dear one leaves the bucket in debt. A flood of disagreements (sybils lying on copies) then
// costs at most that share, and the checks past the bound wait
// (recompute_deferred) for a refill or their Timeout; each liar is banned
// after its job's strikes, so a flood costs its sender an identity per
// few recomputations. A bound by count (one per 2 s) left the checks of
// four ALIE attackers among nine waiting in every pending place while
// their results went unchecked.
const (
	refereeBurst      = 2.0  // seconds of compute the bucket holds
	refereeShare      = 0.25 // seconds of compute per second
	refereeFirstGuess = 0.25 // seconds a first recomputation is expected to take
)

// refereeState is a job's recomputations, on its loop.
type refereeState struct {
	running bool      // a recomputation is out
	tokens  float64   // the bucket, in seconds of compute
	at      time.Time // when it was last filled
	guess   float64   // what a recomputation is expected to take (0: refereeFirstGuess)
	seconds float64   // time spent recomputing
}

// expected is what the next recomputation should take.
func (r *refereeState) expected() float64 {
	if r.guess <= 0 {
		return refereeFirstGuess
	}
	return r.guess
}

// fill tops the bucket up to now.
func (r *refereeState) fill(now time.Time) {
	if r.at.IsZero() {
		r.tokens = refereeBurst
	} else if d := now.Sub(r.at); d > 0 {
		r.tokens = min(refereeBurst, r.tokens+d.Seconds()*refereeShare)
	}
	r.at = now
}

// take spends what a recomputation is expected to take, if the bucket
// has it at now (or is full: one dearer than the whole burst waits for a
// full bucket and leaves it in debt).
func (r *refereeState) take(now time.Time) bool {
	r.fill(now)
	if r.tokens < min(r.expected(), refereeBurst) {
		return false
	}
	r.tokens -= r.expected()
	return true
}

// done charges a recomputation that took seconds instead of what take
// spent, and learns from it.
func (r *refereeState) done(took float64) {
	e := r.expected()
	r.tokens = min(refereeBurst, r.tokens+e-took)
	if r.guess <= 0 {
		r.guess = took
	} else {
		r.guess = 0.8*r.guess + 0.2*took
	}
	r.guess = max(r.guess, 1e-3)
}

// spotReferee starts the recomputation of each mismatched check
// (engine.SpotChecks.Unresolved), within the bound; the others wait,
// counted once each. It runs on the loop: after a copy's mismatch, and on
// every tick (the bucket refilled).
func (j *Job) spotReferee() {
	st := &j.st
	p := st.spot
	if p == nil || p.Pending() == 0 {
		return
	}
	for _, c := range p.Unresolved() {
		if st.referee.running || !st.referee.take(st.sched.Now()) {
			p.Deferred(c)
			continue
		}
		j.recompute(c)
	}
}

// recompute computes c's task on a goroutine and resolves c with it. A
// check whose base snapshot is gone is dropped, as an expired one.
func (j *Job) recompute(c *engine.Check) {
	st := &j.st
	p := st.spot
	pl := c.Primary
	snap := j.snaps.snapshot(pl.Base)
	if snap == nil || pl.Task.Shard < 0 || pl.Task.Shard >= len(j.shardBody) {
		p.Unresolvable(c)
		j.logf("job %s: the spot check of lease %d (volunteer %s) was dropped: its base snapshot %d is gone, so the coordinator cannot compute it",
			j.ID, pl.ID, c.Results[0].Volunteer, pl.Base)
		return
	}
	lease := j.refereeLease(&pl)
	f16 := wireUpdateCodec(st.spec) == protocol.CodecF16
	body := j.shardBody[pl.Task.Shard]
	p.Refereeing(c)
	st.referee.running = true
	j.evals.Add(1) // Close waits for it, as for an evaluation
	go func() {
		defer j.evals.Done()
		start := time.Now()
		u, err := j.referee(&compute.Reference{}, lease, snap.body, body, f16)
		took := time.Since(start).Seconds()
		_ = j.exec(context.Background(), func(st *jobState) {
			st.referee.running = false
			st.referee.seconds += took
			st.referee.done(took)
			j.refereed(c, u, err, took)
		})
	}()
}

// refereeLease is the lease the coordinator computes l's task by: l's
// examples, base and inner plan, as its worker was given them.
func (j *Job) refereeLease(l *engine.Lease) protocol.Lease {
	spec := &j.st.spec
	return protocol.Lease{
		ID: l.ID, JobID: j.ID, ShardID: l.Task.Shard, Start: l.Task.Start, Count: l.Task.Count,
		BatchSize: spec.BatchSize, LocalSteps: l.LocalSteps, Inner: innerOptimizer(spec), UpdateKind: spec.UpdateKind(),
		Snapshot: protocol.SnapshotGranted, BaseVersion: l.Base,
	}
}

// referee computes lease's update from the snapshot body and shard body,
// as a worker would, on b (the pinned backend for a spot check); in an
// f16 job rounded to halves as an f16 copy comes. It runs off the loop.
func (j *Job) referee(b compute.Backend, l protocol.Lease, snapBody, shardBody []byte, f16 bool) ([]float32, error) {
	m := j.model
	params := make([]float32, m.NumParams)
	if err := protocol.DecodeFloatsInto(params, snapBody); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	shard, err := dataset.DecodeShard(append([]byte(nil), shardBody...), 1<<20)
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", l.ShardID, err)
	}
	if shard.ExampleSize() != m.InputSize || shard.LabelsPerExample() != m.LabelsPerExample || l.Start < 0 || l.Count < 1 || l.Start+l.Count > shard.N {
		return nil, fmt.Errorf("examples %d..%d are not in shard %d of %d examples", l.Start, l.Start+l.Count-1, l.ShardID, shard.N)
	}
	x := make([]float32, l.Count*m.InputSize)
	labels := make([]int32, l.Count*m.LabelsPerExample)
	shard.Fill(x, labels, l.Start, l.Count)
	res, err := compute.Lease(b, m, l, params, x, labels)
	if err != nil {
		return nil, err
	}
	u := res.Update
	if f16 {
		for i, v := range u {
			u[i] = protocol.Float32FromHalf(protocol.HalfFromFloat32(protocol.ClampHalf(v)))
		}
	}
	return u, nil
}

// refereed enters the coordinator's result u of c's task (or why it has
// none) into c, on the loop, and settles what it decides.
func (j *Job) refereed(c *engine.Check, u []float32, err error, took float64) {
	p := j.st.spot
	pl := c.Primary
	if err != nil {
		if p.Unresolvable(c) {
			j.logf("job %s: the spot check of lease %d (volunteer %s) was dropped: the coordinator could not compute it: %v", j.ID, pl.ID, c.Results[0].Volunteer, err)
		}
		return
	}
	o, ok := p.Resolve(c, engine.SpotResult{Update: u, Examples: pl.Task.Count})
	if !ok {
		j.logf("job %s: the spot check of lease %d ended while the coordinator computed it (%.2fs)", j.ID, pl.ID, took)
		return
	}
	j.logf("job %s: the spot check of lease %d (volunteers %s and %s) was decided by the coordinator's own recomputation (%.2fs): %s",
		j.ID, pl.ID, c.Results[0].Volunteer, c.Results[1].Volunteer, took, o.Detail)
	j.spotSettle(o)
}
