package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// Job states, as the API shows them.
const (
	StateRunning = "running"
	StatePaused  = "paused"
	StateDone    = "done"
	StateFailed  = "failed"
	// StateFinishing is a job that has ended (done, failed or stopped) but
	// whose final checkpoint, the one that records the end, is not durable
	// yet: the API shows it until that write succeeds. A job is never
	// "done" while a restart could still find it running.
	StateFinishing = "finishing"
)

// errJobStopped is returned to callers of a job whose loop has ended.
var errJobStopped = errors.New("job loop stopped")

// task is a slice of one shard: the unit a lease hands out.
type task struct {
	shard, start, count int
}

// lease is a task held by a worker until its result, its deadline, or the
// worker's departure.
type lease struct {
	id       uint64
	task     task
	worker   string
	base     int64
	deadline time.Time
}

// snapshot is the model at one version, published as an immutable HTTP
// resource. Its bytes are never modified after publication.
type snapshot struct {
	version int64
	body    []byte
}

// EvalResult is one evaluation on the test set.
type EvalResult struct {
	Accuracy float64   `json:"accuracy"`
	Loss     float64   `json:"loss"`
	Version  int64     `json:"version"`
	At       time.Time `json:"at"`
}

// MarshalJSON writes a non-finite loss (a diverged model) as null: JSON
// has no NaN, and encoding/json would fail the whole response.
func (e EvalResult) MarshalJSON() ([]byte, error) {
	type plain EvalResult
	v := struct {
		plain
		Loss *float64 `json:"loss"`
	}{plain: plain(e)}
	if !math.IsNaN(e.Loss) && !math.IsInf(e.Loss, 0) {
		v.Loss = &e.Loss
	}
	return json.Marshal(v)
}

// Job is one training run. A single goroutine (run) owns the model, the
// optimizer, the task queue and the leases; everything else reaches that
// state through exec, so no lock guards it. Snapshots and shards are
// immutable and served straight from their own read-locked maps.
type Job struct {
	ID   string
	Spec JobSpec

	model *nn.Model
	test  *dataset.Set
	// shards holds every shard's encoded bytes, built once: they are
	// immutable resources served with strong ETags.
	shards    []dataset.Shard
	shardBody [][]byte
	epochSize int // examples per epoch
	logf      func(format string, args ...any)

	reqs    chan func()
	stopped chan struct{}
	evals   sync.WaitGroup // evaluations in flight; Server.Close waits for them

	snapMu    sync.RWMutex
	snapshots map[int64]*snapshot

	nextLeaseID *atomic.Uint64

	// Persistence; store is nil when the coordinator runs without one.
	store    *store.Store
	run      int64 // incarnation: how many times a coordinator has started this job
	verbose  bool
	ckptCh   chan *checkpointOp
	ckptPool chan *ckptBuffers // two: one being written, one being filled
	metricCh chan store.Metric
	lastCkpt atomic.Pointer[CheckpointStats]
	// saveCheckpoint writes a checkpoint with the job's state (the store's
	// SaveCheckpointState; tests put failing ones in).
	saveCheckpoint func(context.Context, store.Checkpoint, int, store.JobState) error
	health         ckptHealth // what the writer has made durable, and what it has not
	// onMetric, when set, sees every metrics row as it is recorded (the
	// admin page's live charts); it runs on the loop and must not block.
	onMetric func(store.Metric)
	// onCheckpoint, when set, sees how long each checkpoint write took.
	onCheckpoint func(time.Duration)
	// nonFiniteEvalEvery is the least time between evaluations that runs
	// of non-finite results start (Config.NonFiniteEvalInterval).
	nonFiniteEvalEvery time.Duration

	// Loop-owned state below.
	st jobState
}

type jobState struct {
	state          string
	params         []float32
	opt            nn.Optimizer
	version        int64
	published      int64 // newest published snapshot version, -1 before the first
	epoch          int
	queue          []task // tasks not leased yet in this epoch; requeued ones go first
	leases         map[uint64]*lease
	remaining      int // tasks of this epoch not yet done
	examplesSeen   int64
	epochExamples  int64
	applied        int64
	rejected       int64
	rejections     map[string]int64
	leasesExpired  int64
	leasesIssued   int64
	stalenessSum   int64
	normMean       float64 // running mean of accepted update norms
	normCount      int64
	nonFiniteRun   int // results with NaN/Inf since the last accepted one
	evalRunning    bool
	lastEvalAt     int64 // version of the last evaluation started
	eval           *EvalResult
	finalEvalAfter bool // stop once the running evaluation finishes
	startedAt      time.Time
	doneAt         time.Time
	reason         string // why the job is done or failed
	ckptVersion    int64  // version of the newest checkpoint handed to the writer, which retries it until durable
	ckptAt         time.Time
	metricAt       time.Time // when the last metrics row was taken, and the counters then
	metricExamples int64
	metricApplied  int64
	// optLR is the rate the optimizer was built with; lrScale turns it
	// into the rate an operator set since.
	optLR   float64
	lrScale float32
	// stalenessHist[i] counts updates applied at staleness i; the last
	// bucket holds every staleness at or above its index.
	stalenessHist []int64
	// Throughput, smoothed over the loop's ticks.
	rateAt                    time.Time
	rateExamples              int64
	rateApplied               int64
	examplesPerSec, updPerSec float64

	// nonFiniteEvalAt is when a run of non-finite results last started
	// an evaluation (see apply).
	nonFiniteEvalAt time.Time
}

// stalenessBuckets is the staleness histogram's size: 0..31 and 32+.
const stalenessBuckets = 33

// updateRates folds the counters since the last call into the smoothed
// throughput.
func (j *Job) updateRates(now time.Time) {
	st := &j.st
	if st.rateAt.IsZero() {
		st.rateAt, st.rateExamples, st.rateApplied = now, st.examplesSeen, st.applied
		return
	}
	dt := now.Sub(st.rateAt).Seconds()
	if dt < 0.5 {
		return
	}
	ex := float64(st.examplesSeen-st.rateExamples) / dt
	up := float64(st.applied-st.rateApplied) / dt
	const keep = 0.6 // about the last 3 s
	st.examplesPerSec = keep*st.examplesPerSec + (1-keep)*ex
	st.updPerSec = keep*st.updPerSec + (1-keep)*up
	st.rateAt, st.rateExamples, st.rateApplied = now, st.examplesSeen, st.applied
}

// newJob builds a job at version 0 from spec.
func newJob(id string, spec JobSpec, train, test *dataset.Set, leaseIDs *atomic.Uint64, logf func(string, ...any)) (*Job, error) {
	model, err := nn.NewModel(spec.Model)
	if err != nil {
		return nil, &SpecError{Key: "model", Problem: err.Error()}
	}
	if model.InputSize != train.ExampleSize() {
		return nil, specErr("model", "input %v holds %d values but %s examples have %d (%dx%dx%d)",
			spec.Model.Input, model.InputSize, train.Name, train.ExampleSize(), train.Channels, train.Rows, train.Cols)
	}
	if model.NumClasses < train.Classes {
		return nil, specErr("model", "last layer has %d outputs but the data has %d classes", model.NumClasses, train.Classes)
	}
	opt, err := nn.NewOptimizer(spec.Optimizer, model.NumParams)
	if err != nil {
		return nil, &SpecError{Key: "optimizer", Problem: err.Error()}
	}
	j := &Job{
		ID: id, Spec: spec, model: model, test: test, logf: logf,
		reqs:        make(chan func()),
		stopped:     make(chan struct{}),
		snapshots:   map[int64]*snapshot{},
		nextLeaseID: leaseIDs,
		run:         1,
	}
	j.shards = dataset.MakeShards(train.N, spec.ShardSize, spec.Seed)
	j.epochSize = train.N
	j.shardBody = make([][]byte, len(j.shards))
	for i, s := range j.shards {
		j.shardBody[i] = dataset.EncodeShard(train, s)
	}
	st := &j.st
	st.state = StateRunning
	st.params = make([]float32, model.NumParams)
	model.Init(st.params, spec.Seed)
	st.opt = opt
	st.optLR, st.lrScale = spec.Optimizer.LR, 1
	st.stalenessHist = make([]int64, stalenessBuckets)
	st.published = -1
	st.leases = map[uint64]*lease{}
	st.rejections = map[string]int64{protocol.ReasonStale: 0, protocol.ReasonInvalid: 0}
	st.startedAt = time.Now()
	j.startEpoch()
	return j, nil
}

// loop is the job's loop. It returns when ctx ends. checkpointEvery is the
// longest time between checkpoints (0: no store).
func (j *Job) loop(ctx context.Context, checkpointEvery time.Duration) {
	defer close(j.stopped)
	tick := time.NewTicker(min(time.Second, j.Spec.LeaseTimeout.Duration/4))
	defer tick.Stop()
	var ckpt <-chan time.Time
	if j.store != nil && checkpointEvery > 0 {
		t := time.NewTicker(checkpointEvery)
		defer t.Stop()
		ckpt = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-j.reqs:
			f()
		case now := <-tick.C:
			j.expireLeases(now)
			j.updateRates(now)
		case <-ckpt:
			if j.st.version != j.st.ckptVersion {
				j.recordMetric(nil)
			}
			j.checkpoint(false)
		}
	}
}

// exec runs f on the job's loop and waits for it. It never blocks forever:
// it gives up when ctx ends or the loop has stopped.
func (j *Job) exec(ctx context.Context, f func(st *jobState)) error {
	done := make(chan struct{})
	select {
	case j.reqs <- func() { f(&j.st); close(done) }:
	case <-j.stopped:
		return errJobStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-j.stopped:
		return errJobStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startEpoch fills the queue with every shard's tasks in a fresh order.
func (j *Job) startEpoch() {
	st := &j.st
	per := j.Spec.BatchSize * j.Spec.LocalSteps
	// Each epoch's order is a function of the seed and the epoch alone, so
	// a resumed job visits the shards as the original would have.
	order := dataset.Permutation(len(j.shards), j.Spec.Seed^int64(st.epoch+1)*0x3c6ef372fe94f82b)
	st.queue = st.queue[:0]
	for _, si := range order {
		n := len(j.shards[si].Indices)
		for start := 0; start < n; start += per {
			st.queue = append(st.queue, task{shard: si, start: start, count: min(per, n-start)})
		}
	}
	st.remaining = len(st.queue)
	st.epochExamples = 0
}

// grant leases up to n tasks to worker, which holds `held` already.
func (j *Job) grant(worker string, n int, baseURL string) []protocol.Lease {
	st := &j.st
	if st.state != StateRunning || len(st.queue) == 0 {
		return nil
	}
	j.publish()
	var out []protocol.Lease
	now := time.Now()
	for ; n > 0 && len(st.queue) > 0; n-- {
		t := st.queue[0]
		st.queue = st.queue[1:]
		l := &lease{
			id: j.nextLeaseID.Add(1), task: t, worker: worker, base: st.published,
			deadline: now.Add(j.Spec.LeaseTimeout.Duration),
		}
		st.leases[l.id] = l
		st.leasesIssued++
		out = append(out, protocol.Lease{
			ID:             l.id,
			JobID:          j.ID,
			ShardID:        t.shard,
			ShardURL:       baseURL + j.shardPath(t.shard),
			Start:          t.start,
			Count:          t.count,
			BaseVersion:    l.base,
			SnapshotURL:    baseURL + j.snapshotPath(l.base),
			BatchSize:      j.Spec.BatchSize,
			LocalSteps:     j.Spec.LocalSteps,
			Inner:          protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: float32(j.Spec.InnerLR)},
			UpdateKind:     protocol.UpdateGradient,
			Snapshot:       protocol.SnapshotGranted,
			DeadlineUnixMs: l.deadline.UnixMilli(),
		})
	}
	return out
}

func (j *Job) shardPath(shard int) string {
	return "/api/v1/jobs/" + j.ID + "/shards/" + strconv.Itoa(shard)
}

// snapshotPath names a snapshot by run and version: after a restart from a
// checkpoint, versions are computed again with other contents, and an
// immutable URL must never name two contents.
func (j *Job) snapshotPath(version int64) string {
	return "/api/v1/jobs/" + j.ID + "/snapshots/" + strconv.FormatInt(j.run, 10) + "/" + strconv.FormatInt(version, 10)
}

// publish makes the current version downloadable if it is not yet, and
// drops every snapshot no outstanding lease still needs. Publishing on
// demand, when a lease needs it, bounds the rate to one copy per version
// that a worker actually asks for; pruning by lease bounds the memory to
// one snapshot per lease held, whatever max_staleness is.
func (j *Job) publish() {
	st := &j.st
	if st.published == st.version {
		return
	}
	snap := &snapshot{version: st.version, body: protocol.EncodeFloats(st.params)}
	j.snapMu.Lock()
	j.snapshots[st.version] = snap
	for v := range j.snapshots {
		if v != st.version && !j.snapshotNeeded(v) {
			delete(j.snapshots, v)
		}
	}
	j.snapMu.Unlock()
	st.published = st.version
}

// snapshotNeeded reports whether a held lease is based on version v and
// could still be accepted.
func (j *Job) snapshotNeeded(v int64) bool {
	if j.st.version-v > int64(j.Spec.MaxStaleness) {
		return false
	}
	for _, l := range j.st.leases {
		if l.base == v {
			return true
		}
	}
	return false
}

// snapshotBody returns a published snapshot, or nil if it is unknown or gone.
func (j *Job) snapshotBody(version int64) []byte {
	j.snapMu.RLock()
	defer j.snapMu.RUnlock()
	if s := j.snapshots[version]; s != nil {
		return s.body
	}
	return nil
}

// requeue puts t at the front so a lost task is redone before new ones.
func (j *Job) requeue(t task) {
	st := &j.st
	st.queue = append(st.queue, task{})
	copy(st.queue[1:], st.queue)
	st.queue[0] = t
}

// releaseWorker requeues every lease of worker (it left or said bye).
func (j *Job) releaseWorker(worker string) int {
	n := 0
	for id, l := range j.st.leases {
		if l.worker == worker {
			delete(j.st.leases, id)
			j.requeue(l.task)
			n++
		}
	}
	return n
}

// releaseLeases requeues the worker's leases among ids.
func (j *Job) releaseLeases(worker string, ids []uint64) {
	for _, id := range ids {
		if l := j.st.leases[id]; l != nil && l.worker == worker {
			delete(j.st.leases, id)
			j.requeue(l.task)
		}
	}
}

func (j *Job) heldBy(worker string) int {
	n := 0
	for _, l := range j.st.leases {
		if l.worker == worker {
			n++
		}
	}
	return n
}

func (j *Job) expireLeases(now time.Time) {
	for id, l := range j.st.leases {
		if now.After(l.deadline) {
			delete(j.st.leases, id)
			j.requeue(l.task)
			j.st.leasesExpired++
			j.logf("job %s: lease %d (shard %d, examples %d..%d) of worker %s passed its deadline; queued again",
				j.ID, id, l.task.shard, l.task.start, l.task.start+l.task.count-1, l.worker)
		}
	}
}

// submission is a decoded result on its way to the loop. reason is set
// when the connection already found it invalid.
type submission struct {
	worker string
	res    *protocol.Result
	norm   float64 // L2 norm of res.Update, computed on the connection's goroutine
	reason string
	detail string
	// nonFinite marks an update with NaN or Inf: many in a row suggest the
	// model itself has diverged rather than one worker being broken.
	nonFinite bool
}

// nonFiniteCheck is how many non-finite results in a row make the job
// evaluate its model to tell divergence from broken workers.
const nonFiniteCheck = 20

// normWarmup is how many updates are accepted before the norm check starts:
// the running mean needs a few samples to mean anything.
const normWarmup = 10

// apply checks a result against the job's state and, if it passes, feeds
// it to the outer optimizer. The model is touched only on acceptance.
func (j *Job) apply(sub submission) protocol.Ack {
	st := &j.st
	res := sub.res
	ack := protocol.Ack{LeaseID: res.LeaseID, Version: st.version}
	reject := func(reason, detail string) protocol.Ack {
		st.rejected++
		st.rejections[reason]++
		ack.Reason, ack.Detail = reason, detail
		return ack
	}
	if st.state != StateRunning {
		// Leases were cleared when the job stopped; say why, not "unknown".
		return reject(protocol.ReasonNotRunning, "job is "+st.state)
	}
	l := st.leases[res.LeaseID]
	if l == nil || l.worker != sub.worker {
		return reject(protocol.ReasonUnknownLease,
			fmt.Sprintf("lease %d is not held by this worker (it expired, was never issued, or belongs to another)", res.LeaseID))
	}
	// From here on the lease is settled one way or the other.
	delete(st.leases, res.LeaseID)
	ack.Staleness = st.version - l.base
	if sub.reason != "" {
		j.requeue(l.task)
		if sub.nonFinite {
			// Each evaluation scores the whole test set: a flood of NaN
			// results must not buy one every few hundred milliseconds.
			// The first comes at once, so real divergence is caught as
			// fast as before; the run keeps counting in between.
			now := time.Now()
			if st.nonFiniteRun++; st.nonFiniteRun >= nonFiniteCheck && !st.evalRunning &&
				(st.nonFiniteEvalAt.IsZero() || now.Sub(st.nonFiniteEvalAt) >= j.nonFiniteEvalEvery) {
				j.logf("job %s: %d results in a row had NaN or Inf; evaluating the model for divergence", j.ID, st.nonFiniteRun)
				st.nonFiniteRun = 0
				st.nonFiniteEvalAt = now
				j.startEval(false)
			}
		}
		return reject(sub.reason, sub.detail)
	}
	switch {
	case res.JobID != j.ID:
		j.requeue(l.task)
		return reject(protocol.ReasonInvalid, fmt.Sprintf("result names job %q, the lease is for %q", res.JobID, j.ID))
	case len(res.Update) != j.model.NumParams:
		j.requeue(l.task)
		return reject(protocol.ReasonInvalid, fmt.Sprintf("update has %d values, the model has %d parameters", len(res.Update), j.model.NumParams))
	case res.BaseVersion != l.base:
		j.requeue(l.task)
		return reject(protocol.ReasonInvalid, fmt.Sprintf("result claims base version %d, the lease gave %d", res.BaseVersion, l.base))
	case res.Examples != l.task.count:
		j.requeue(l.task)
		return reject(protocol.ReasonInvalid, fmt.Sprintf("result covers %d examples, the lease has %d", res.Examples, l.task.count))
	}
	if ack.Staleness > int64(j.Spec.MaxStaleness) {
		j.requeue(l.task)
		return reject(protocol.ReasonStale, fmt.Sprintf("staleness %d > max_staleness %d: fetch a newer snapshot", ack.Staleness, j.Spec.MaxStaleness))
	}
	// Finite is not enough: one update of 1e30s would overflow Adam's
	// second moment to +Inf and stall the model for good.
	if r := j.Spec.MaxUpdateNormRatio; r > 0 && st.normCount >= normWarmup && st.normMean > 0 && sub.norm > r*st.normMean {
		j.requeue(l.task)
		return reject(protocol.ReasonInvalid, fmt.Sprintf("update norm %.3g is %.0fx the running mean %.3g of accepted updates (limit %gx): the worker looks broken",
			sub.norm, sub.norm/st.normMean, st.normMean, r))
	}
	scale := st.lrScale
	if j.Spec.StalenessLR == StalenessLRInverse {
		scale /= float32(1 + ack.Staleness)
	}
	st.opt.Step(st.params, res.Update, scale)
	st.nonFiniteRun = 0
	st.normCount++
	// A running mean over roughly the last 50 updates: it follows the
	// gradient norms down as training converges.
	st.normMean += (sub.norm - st.normMean) / float64(min(st.normCount, 50))
	st.version++
	st.applied++
	st.stalenessSum += ack.Staleness
	st.stalenessHist[min(ack.Staleness, stalenessBuckets-1)]++
	st.examplesSeen += int64(res.Examples)
	st.epochExamples += int64(res.Examples)
	st.remaining--
	ack.Accepted, ack.Version = true, st.version
	if st.version-st.lastEvalAt >= int64(j.Spec.EvalEvery) {
		j.startEval(false)
	}
	if st.version-st.ckptVersion >= int64(j.Spec.CheckpointEvery) {
		j.checkpoint(false)
	}
	if st.remaining == 0 {
		j.endEpoch()
	}
	return ack
}

func (j *Job) endEpoch() {
	st := &j.st
	st.epoch++
	j.logf("job %s: epoch %d complete: %d examples, version %d", j.ID, st.epoch, st.epochExamples, st.version)
	if st.epoch >= j.Spec.MaxEpochs {
		// Hand out nothing more; the final evaluation decides the outcome.
		st.queue = st.queue[:0]
		j.startEval(true)
		return
	}
	j.startEpoch()
}

// startEval evaluates a copy of the current parameters off the loop, so
// training continues while the test set is scored. final stops the job
// when the evaluation ends.
func (j *Job) startEval(final bool) {
	st := &j.st
	if final {
		st.finalEvalAfter = true
	}
	if st.evalRunning {
		return
	}
	st.evalRunning = true
	st.lastEvalAt = st.version
	params := append([]float32(nil), st.params...)
	version := st.version
	j.evals.Add(1)
	go func() {
		defer j.evals.Done()
		acc, loss := evaluate(j.model, params, j.test)
		res := EvalResult{Accuracy: acc, Loss: loss, Version: version, At: time.Now()}
		// The loop may have stopped (shutdown); then the result is dropped.
		_ = j.exec(context.Background(), func(st *jobState) { j.finishEval(res, params) })
	}()
}

// finishEval records an evaluation of params (the model at res.Version)
// and decides whether the job is over.
func (j *Job) finishEval(res EvalResult, params []float32) {
	st := &j.st
	st.evalRunning = false
	st.eval = &res
	j.logf("job %s: version %d: test accuracy %.4f, loss %.4f", j.ID, res.Version, res.Accuracy, res.Loss)
	j.recordMetric(&res)
	if st.state != StateRunning {
		return
	}
	switch {
	case math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0):
		j.finish(StateFailed, fmt.Sprintf("diverged: test loss is %v at version %d; lower optimizer.lr or max_staleness", res.Loss, res.Version))
	case res.Accuracy >= j.Spec.TargetAccuracy:
		// The job's result is the model that was measured: updates
		// applied while it was being evaluated are dropped, so the saved
		// and exported model scores exactly the recorded accuracy.
		copy(st.params, params)
		st.version = res.Version
		j.finish(StateDone, fmt.Sprintf("reached target accuracy %.4f >= %.4f at version %d", res.Accuracy, j.Spec.TargetAccuracy, res.Version))
	case st.finalEvalAfter && res.Version == st.version:
		j.finish(StateDone, fmt.Sprintf("max_epochs %d reached with accuracy %.4f (target %.4f)", j.Spec.MaxEpochs, res.Accuracy, j.Spec.TargetAccuracy))
	case st.finalEvalAfter:
		j.startEval(true) // the model moved on while this one ran
	}
}

func (j *Job) finish(state, reason string) {
	st := &j.st
	st.state, st.reason, st.doneAt = state, reason, time.Now()
	st.queue = st.queue[:0]
	clear(st.leases)
	j.logf("job %s: %s: %s", j.ID, state, reason)
	j.checkpoint(true)
}

// evaluate scores params on the whole set.
func evaluate(m *nn.Model, params []float32, set *dataset.Set) (accuracy, loss float64) {
	const chunk = 500
	ws := m.NewWorkspace(chunk)
	x := make([]float32, chunk*set.ExampleSize())
	y := make([]int32, chunk)
	var lossSum float64
	var correct int
	for start := 0; start < set.N; start += chunk {
		n := min(chunk, set.N-start)
		set.Floats(x, start, n)
		set.LabelsInt32(y, start, n)
		l, c := m.Evaluate(ws, params, x[:n*set.ExampleSize()], y[:n])
		lossSum += l
		correct += c
	}
	return float64(correct) / float64(set.N), lossSum / float64(set.N)
}

// ended reports whether a job in state will hand out no more work.
func ended(state string) bool {
	return state == StateDone || state == StateFailed || state == StateStopped
}

// JobView is a job as the API shows it.
type JobView struct {
	ID              string           `json:"id"`
	Name            string           `json:"name"`
	State           string           `json:"state"`
	Reason          string           `json:"reason,omitempty"`
	Version         int64            `json:"version"`
	Epoch           int              `json:"epoch"`
	EpochProgress   float64          `json:"epoch_progress"`
	ExamplesSeen    int64            `json:"examples_seen"`
	UpdatesApplied  int64            `json:"updates_applied"`
	UpdatesRejected int64            `json:"updates_rejected"`
	Rejections      map[string]int64 `json:"rejections"`
	LeasesIssued    int64            `json:"leases_issued"`
	LeasesExpired   int64            `json:"leases_expired"`
	LeasesHeld      int              `json:"leases_held"`
	MeanStaleness   float64          `json:"mean_staleness"`
	// StalenessHistogram[i] counts updates applied at staleness i; the
	// last bucket counts every staleness at or above its index.
	StalenessHistogram []int64          `json:"staleness_histogram"`
	ExamplesPerSec     float64          `json:"examples_per_sec"` // smoothed over a few seconds
	UpdatesPerSec      float64          `json:"updates_per_sec"`
	LR                 float64          `json:"lr"` // the outer optimizer's rate now
	Workers            int              `json:"workers"`
	MaxStaleness       int              `json:"max_staleness"`
	NumParams          int              `json:"num_params"`
	Shards             int              `json:"shards"`
	Eval               *EvalResult      `json:"eval"`
	Run                int64            `json:"run"` // how many times a coordinator has started this job
	LastCheckpoint     *CheckpointStats `json:"last_checkpoint"`
	StartedAt          time.Time        `json:"started_at"`
	DoneAt             *time.Time       `json:"done_at,omitempty"`
	Spec               JobSpec          `json:"spec"`

	// CheckpointFailure is set while the newest checkpoint could not be
	// written and is being retried.
	CheckpointFailure *CheckpointFailure `json:"checkpoint_failure,omitempty"`
}

// view copies the loop's state; call it on the loop.
func (j *Job) view(st *jobState) JobView {
	v := JobView{
		ID: j.ID, Name: j.Spec.Name, State: st.state, Reason: st.reason,
		Version: st.version, Epoch: st.epoch, ExamplesSeen: st.examplesSeen,
		UpdatesApplied: st.applied, UpdatesRejected: st.rejected,
		Rejections:   make(map[string]int64, len(st.rejections)),
		LeasesIssued: st.leasesIssued, LeasesExpired: st.leasesExpired, LeasesHeld: len(st.leases),
		MaxStaleness: j.Spec.MaxStaleness, NumParams: j.model.NumParams, Shards: len(j.shards),
		StartedAt: st.startedAt, Spec: j.Spec, Run: j.run, LastCheckpoint: j.lastCkpt.Load(),
		StalenessHistogram: slices.Clone(st.stalenessHist), LR: j.Spec.Optimizer.LR,
	}
	if st.state == StateRunning {
		v.ExamplesPerSec, v.UpdatesPerSec = st.examplesPerSec, st.updPerSec
	}
	if j.store != nil {
		failure, _, durable := j.health.get()
		v.CheckpointFailure = failure
		if ended(st.state) && (durable == nil || durable.state != st.state) {
			v.State = StateFinishing
		}
	}
	for k, n := range st.rejections {
		v.Rejections[k] = n
	}
	if st.applied > 0 {
		v.MeanStaleness = float64(st.stalenessSum) / float64(st.applied)
	}
	if st.state == StateRunning {
		v.EpochProgress = float64(st.epochExamples) / float64(j.epochSize)
	}
	if st.eval != nil {
		e := *st.eval
		v.Eval = &e
	}
	if !st.doneAt.IsZero() {
		t := st.doneAt
		v.DoneAt = &t
	}
	return v
}
