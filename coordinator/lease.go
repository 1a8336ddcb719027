package coordinator

import (
	"fmt"
	"strconv"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// startEpoch fills the queue with every shard's tasks in a fresh order.
func (j *Job) startEpoch() {
	st := &j.st
	// Each epoch's order is a function of the seed and the epoch alone, so
	// a resumed job visits the shards as the original would have.
	order := dataset.Permutation(len(j.shards), j.Spec.Seed^int64(st.epoch+1)*0x3c6ef372fe94f82b)
	var tasks []engine.Task
	for _, si := range order {
		tasks = append(tasks, engine.Task{Shard: si, Start: 0, Count: len(j.shards[si].Indices)})
	}
	st.sched.SetQueue(carve(tasks, st.spec.BatchSize*st.spec.TaskSteps()))
	st.remaining = int64(j.epochSize)
	st.epochExamples = 0
}

// carve joins the tasks that continue each other within a shard and cuts
// them into tasks of at most per examples, in order: a task is the most
// one lease may hold.
func carve(tasks []engine.Task, per int) []engine.Task {
	var joined []engine.Task
	for _, t := range tasks {
		if n := len(joined); n > 0 && joined[n-1].Shard == t.Shard && joined[n-1].Start+joined[n-1].Count == t.Start {
			joined[n-1].Count += t.Count
			continue
		}
		joined = append(joined, t)
	}
	var out []engine.Task
	for _, t := range joined {
		for start := t.Start; start < t.Start+t.Count; start += per {
			out = append(out, engine.Task{Shard: t.Shard, Start: start, Count: min(per, t.Start+t.Count-start)})
		}
	}
	return out
}

// grant leases up to n tasks to worker.
func (j *Job) grant(worker string, n int, baseURL string) []protocol.Lease {
	st := &j.st
	if st.state != StateRunning || j.spotBanned(worker) {
		return nil
	}
	if !j.publish() {
		return nil
	}
	var out []protocol.Lease
	if j.rl == nil {
		if pl, ok := j.grantCopy(worker, baseURL); ok { // spotcheck.go
			out, n = append(out, pl), n-1
		}
	}
	now := st.sched.Now()
	rounds, _ := st.agg.(*engine.Rounds)
	for ; n > 0; n-- {
		if j.rl != nil && rounds != nil {
			pl, ok := j.rlGrantInRounds(worker, rounds, baseURL) // rljob.go
			if !ok {
				break
			}
			out = append(out, pl)
			continue
		}
		if rounds != nil && st.sched.HoldsInRound(worker, rounds.Round()) {
			break // one place of a round at a time (engine.Scheduler.HoldsInRound)
		}
		round, ok := st.agg.Lease(now)
		if !ok {
			break // the round has all its leases out
		}
		l, ok := st.sched.Grant(worker, st.published, round)
		if !ok {
			st.agg.Unlease(round)
			break
		}
		pl := protocol.Lease{}
		if j.rl != nil {
			if pl, ok = j.rlLeaseMessage(l, baseURL, rlEither); !ok {
				j.unleased(st.sched.Release(worker, []uint64{l.ID}))
				break
			}
		} else {
			pl = j.leaseMessage(l, baseURL)
		}
		j.issued(worker)
		out = append(out, pl)
	}
	return out
}

// issued counts a lease granted to worker.
func (j *Job) issued(worker string) {
	st := &j.st
	st.leasesIssued++
	if m, ok := st.members[worker]; ok {
		st.shares.Granted(m.volunteer)
	}
}

// leaseMessage is the lease message of l.
func (j *Job) leaseMessage(l *engine.Lease, baseURL string) protocol.Lease {
	spec := &j.st.spec
	pl := protocol.Lease{
		ID:             l.ID,
		JobID:          j.ID,
		ShardID:        l.Task.Shard,
		ShardURL:       baseURL + j.shardPath(l.Task.Shard),
		Start:          l.Task.Start,
		Count:          l.Task.Count,
		BatchSize:      spec.BatchSize,
		LocalSteps:     l.LocalSteps,
		Inner:          innerOptimizer(spec),
		UpdateKind:     spec.UpdateKind(),
		Snapshot:       protocol.SnapshotGranted,
		Round:          l.Round,
		DeadlineUnixMs: l.Deadline.UnixMilli(),
	}
	if l.Started() {
		pl.BaseVersion, pl.SnapshotURL = l.Base, j.snapshotURL(l.Worker, l.Base, baseURL)
	} else {
		pl.Snapshot = protocol.SnapshotLatest
	}
	return pl
}

func innerOptimizer(s *jobspec.Spec) protocol.InnerOptimizer {
	in := s.InnerOptimizer
	return protocol.InnerOptimizer{Type: in.Type, LR: float32(in.LR), WeightDecay: float32(in.WeightDecay),
		Beta1: float32(in.Beta1), Beta2: float32(in.Beta2), Epsilon: float32(in.Epsilon), ClipNorm: float32(in.ClipNorm)}
}

// start fixes the base of a "latest" lease its worker begins computing:
// the newest snapshot, published now if the model moved since the last.
func (j *Job) start(worker string, leaseID uint64, baseURL string) (*protocol.Started, error) {
	st := &j.st
	if st.state != StateRunning {
		return nil, fmt.Errorf("job is %s", st.state)
	}
	if !j.publish() {
		return nil, fmt.Errorf("job is %s", st.state)
	}
	l, err := st.sched.Start(worker, leaseID, st.published)
	if err != nil {
		return nil, err
	}
	j.grants.note(l.ID, worker, l.Base, l.Deadline) // startgrants.go
	return &protocol.Started{LeaseID: l.ID, BaseVersion: l.Base, SnapshotURL: j.snapshotURL(worker, l.Base, baseURL),
		DeadlineUnixMs: l.Deadline.UnixMilli()}, nil
}

// shardPath names a shard in its data set (shardsets.go): every job that
// cuts the same data the same way hands out the same URLs.
func (j *Job) shardPath(shard int) string { return dataShardPath(j.shardSet.key, shard) }

// snapshotPath names a snapshot by run and version: after a restart from a
// checkpoint, versions are computed again with other contents, and an
// immutable URL must never name two contents.
func (j *Job) snapshotPath(version int64) string {
	return "/api/v1/jobs/" + j.ID + "/snapshots/" + strconv.FormatInt(j.run, 10) + "/" + strconv.FormatInt(version, 10)
}

// publish makes the current version downloadable if it is not yet, in
// the job's snapshot cache (snapcache.go), which drops the oldest versions
// past its bound. Publishing on demand, when a lease needs it, bounds the
// rate to one copy per version that a worker actually asks for.
//
// A model with NaN or Inf in it is never published: an outer step took it
// there (finite updates can overflow at a large outer rate), no worker
// could use it, and the job fails as diverged. publish reports whether
// the current version is published.
func (j *Job) publish() bool {
	st := &j.st
	if st.published == st.model.Version {
		return true
	}
	// The copy checks what it copies: a NaN or Inf in the model is one
	// in the snapshot (a prediction from it is no more finite).
	body, bad, value := j.encodeSnapshot()
	if bad >= 0 {
		j.finish(StateFailed, fmt.Sprintf("diverged: parameter %d is %v at version %d; lower outer_optimizer.lr or max_staleness",
			bad, value, st.model.Version))
		return false
	}
	j.snaps.publish(&snapshot{version: st.model.Version, body: body}, j.snapshotCost(body))
	st.published = st.model.Version
	return true
}

// snapshotBody returns a kept snapshot's f32 body, or nil if it is unknown
// or gone.
func (j *Job) snapshotBody(version int64) []byte {
	if s := j.snaps.snapshot(version); s != nil {
		return s.body
	}
	return nil
}

// unleased tells the aggregator that leases went back to the queue. A
// copy took no place in its round (engine.Lease.Primary), and a lease
// handed to its backup leaves its place to the backup.
func (j *Job) unleased(ls []*engine.Lease) int {
	for _, l := range ls {
		if j.rl != nil {
			j.rlSettle(l)
		}
		if l.Requeued() {
			j.st.agg.Unlease(l.Round)
		} else {
			j.spotCopyGone(l)
		}
	}
	return len(ls)
}

// join records a worker that connected to the job.
func (j *Job) join(worker string, m member) { j.st.members[worker] = m }

// releaseWorker requeues every lease of worker (it left or said bye).
func (j *Job) releaseWorker(worker string) int {
	delete(j.st.members, worker)
	j.st.sched.Forget(worker)
	j.grants.forget(worker)
	if a, ok := j.st.agg.(*engine.Async); ok && a.Clip != nil {
		a.Clip.Forget(worker)
	}
	return j.unleased(j.st.sched.Release(worker, nil))
}

// releaseLeases requeues the worker's leases among ids, which it gives
// back unfinished for reason.
func (j *Job) releaseLeases(worker string, ids []uint64, reason string) {
	if len(ids) == 0 {
		return
	}
	for _, id := range ids {
		j.grants.drop(worker, id)
	}
	if n := j.unleased(j.st.sched.Release(worker, ids)); n > 0 {
		j.st.leasesReleased += int64(n)
		j.st.lastRelease = reason
	}
}

func (j *Job) heldBy(worker string) int { return j.st.sched.HeldBy(worker) }

func (j *Job) expireLeases() {
	for _, l := range j.st.sched.Expire() {
		j.unleased([]*engine.Lease{l})
		j.st.leasesExpired++
		j.log.Debug(fmt.Sprintf("job %s: lease %d (shard %d, examples %d..%d) of worker %s passed its deadline; %s",
			j.ID, l.ID, l.Task.Shard, l.Task.Start, l.Task.Start+l.Task.Count-1, l.Worker, lostTo(l)), logWorker, l.Worker)
		j.leaseExpired(l) // hostages.go
	}
	j.spotExpire()
	j.spotReferee()    // a dispute that waited for the recomputations' bound
	j.recheckWaiting() // results refused by validation, waiting for theirs (recheck.go)
}

// requeue puts a settled lease's task back (its result was rejected), or
// hands it to the lease's backup (engine.Scheduler.Lost).
func (j *Job) requeue(l *engine.Lease) {
	j.st.sched.Lost(l)
	j.unleased([]*engine.Lease{l})
}

// requeueRefused is requeue for a result validation refused: in a round,
// the task waits for the next round's version (engine.Scheduler.Refused).
func (j *Job) requeueRefused(l *engine.Lease) {
	j.st.sched.Refused(l)
	j.unleased([]*engine.Lease{l})
}
