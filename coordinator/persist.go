package coordinator

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// Persistence. A checkpoint is a copy of the loop's state taken on the
// loop (the only pause training sees) and written by the job's writer
// goroutine in one SQLite transaction. Only the newest unwritten copy is
// kept: if the writer is still busy, a newer checkpoint replaces the
// queued one rather than piling up.

// progress is the part of a checkpoint that is neither parameters nor
// optimizer state: where the epoch stands and the job's counters.
type progress struct {
	Epoch          int              `json:"epoch"`
	Tasks          [][3]int         `json:"tasks"` // not yet done this epoch: shard, start, count
	ExamplesSeen   int64            `json:"examples_seen"`
	EpochExamples  int64            `json:"epoch_examples"`
	Applied        int64            `json:"applied"`
	Rejected       int64            `json:"rejected"`
	Rejections     map[string]int64 `json:"rejections"`
	LeasesIssued   int64            `json:"leases_issued"`
	LeasesExpired  int64            `json:"leases_expired"`
	StalenessSum   int64            `json:"staleness_sum"`
	StalenessHist  []int64          `json:"staleness_hist,omitempty"`
	NormMean       float64          `json:"norm_mean"`
	NormCount      int64            `json:"norm_count"`
	Clipped        int64            `json:"clipped,omitempty"`
	LastEvalAt     int64            `json:"last_eval_at"`
	Eval           *EvalResult      `json:"eval,omitempty"`
	FinalEvalAfter bool             `json:"final_eval_after,omitempty"`
	StartedAt      time.Time        `json:"started_at"`
	// Round and RoundResults are a round mode's open round and how many
	// results it holds; their sum is the last vector of the optimizer
	// state blob when RoundResults > 0.
	Round        uint64 `json:"round,omitempty"`
	RoundResults int    `json:"round_results,omitempty"`
	// SpotChecks keeps each volunteer's trust and strikes across a restart.
	SpotChecks *spotProgress `json:"spot_checks,omitempty"`
	// Rechecks: the validation's second opinions (recheck.go), whose
	// credited examples are credit outside examples_seen.
	Rechecks *RecheckView `json:"validation_rechecks,omitempty"`
	// Clip is the asynchronous robust clip's state once its warm-up is
	// over (nil before, and in round modes).
	Clip *clipProgress `json:"clip,omitempty"`
	// Wire is the job's wire counters (wire.go); older checkpoints have
	// none and start them at 0.
	Wire *wireProgress `json:"wire,omitempty"`
	// RelayApplied are the ids of the relay aggregates applied lately
	// (relayroot.go): a redelivery of one is acknowledged, not applied.
	RelayApplied []string `json:"relay_applied,omitempty"`
}

// clipProgress is engine.ClipState in a checkpoint: the centre as
// little-endian float32s (base64 in the JSON).
type clipProgress struct {
	Centre []byte    `json:"centre"`
	Dists  []float64 `json:"dists"`
	Next   int       `json:"next"`
}

// CheckpointStats describes the newest checkpoint written in this run, with what it cost: the API shows it as a job's last_checkpoint.
type CheckpointStats struct {
	Version int64     `json:"version"`
	At      time.Time `json:"at"`
	Bytes   int64     `json:"bytes"`
	PauseMs float64   `json:"pause_ms"` // how long the update loop stopped to copy the state
	WriteMs float64   `json:"write_ms"` // how long the SQLite transaction took
	// RoundResults is how many results of an open round it holds.
	RoundResults int `json:"round_results,omitempty"`
}

// checkpointOp is one checkpoint on its way to the writer, with the job's
// state at that moment.
type checkpointOp struct {
	c      store.Checkpoint
	bufs   *ckptBuffers
	state  string
	reason string
	doneAt time.Time
	pause  time.Duration
	// roundResults is the partial round the checkpoint holds.
	roundResults int
	// acks acknowledge the relay aggregates whose effect the checkpoint
	// holds: run once it is durable (relayroot.go).
	acks []func()
}

// ckptBuffers hold a checkpoint's copies. They go back to the job's pool
// once written, so a checkpoint copies into memory it already has instead
// of allocating (and zeroing) a new copy of a large model each time.
type ckptBuffers struct {
	params, opt []byte
}

func (j *Job) getBuffers() *ckptBuffers {
	select {
	case b := <-j.ckptPool:
		return b
	default:
		return &ckptBuffers{}
	}
}

func (j *Job) putBuffers(b *ckptBuffers) {
	if b == nil {
		return
	}
	select {
	case j.ckptPool <- b:
	default:
	}
}

// checkpoint copies the state for the writer. Unless force is set, it
// does nothing when the model has not moved since the last checkpoint or
// when the writer still has one queued.
func (j *Job) checkpoint(force bool) {
	if j.store == nil {
		return
	}
	st := &j.st
	if !force && (!j.dirty() || len(j.ckptCh) > 0) {
		return
	}
	start := time.Now()
	bufs := j.getBuffers()
	op := &checkpointOp{c: j.copyState(bufs), bufs: bufs, state: st.state, reason: st.reason, doneAt: st.doneAt,
		roundResults: st.agg.Partial().Results}
	op.pause = time.Since(start)
	op.acks, st.relay.acks = st.relay.acks, nil
	select { // latest wins
	case old := <-j.ckptCh:
		j.putBuffers(old.bufs)
		op.acks = append(old.acks, op.acks...) // the newer holds the older's effect
		op.c.Credits = mergeCredits(old.c.Credits, op.c.Credits)
	default:
	}
	j.ckptCh <- op
	st.ckptVersion, st.ckptApplied, st.ckptAt = st.model.Version, st.applied, time.Now()
	st.ckptSpot = st.spot.Counters
}

// dirty reports whether the state moved since the last checkpoint: a new
// version, results accepted into a round that has not closed yet, credit
// not yet durable (a spot check's, settled after its results), or a spot
// check decided (a strike must survive a restart though the model did not
// move since).
func (j *Job) dirty() bool {
	return j.st.model.Version != j.st.ckptVersion || j.st.applied != j.st.ckptApplied ||
		j.st.spot.Counters != j.st.ckptSpot || j.credits != nil && j.credits.creditPending(j.ID)
}

// creditSource keeps a job's credit until a checkpoint takes it
// (volunteerBook).
type creditSource interface {
	takeCredit(job string) []store.VolunteerCredit
	creditPending(job string) bool
}

// copyState snapshots everything a resumed job needs, into bufs.
func (j *Job) copyState(bufs *ckptBuffers) store.Checkpoint {
	st := &j.st
	p := progress{
		Epoch: st.epoch, ExamplesSeen: st.examplesSeen, EpochExamples: st.epochExamples,
		Applied: st.applied, Rejected: st.rejected, Rejections: st.rejections,
		LeasesIssued: st.leasesIssued, LeasesExpired: st.leasesExpired, StalenessSum: st.stalenessSum, StalenessHist: st.stalenessHist,
		Clipped: st.clipped, LastEvalAt: st.lastEvalAt, Eval: st.eval,
		FinalEvalAfter: st.finalEvalAfter, StartedAt: st.startedAt,
		Wire:         j.wire.progress(),
		RelayApplied: st.relay.applied.list(),
	}
	p.NormMean, p.NormCount = st.norms.Progress()
	// Leased tasks are not done: a resumed job hands them out again.
	leases, queue := st.sched.Leases(), st.sched.Queue()
	p.Tasks = make([][3]int, 0, len(queue)+len(leases))
	for _, l := range leases {
		if l.Pending() { // a copy's task is its primary's; a superseded one's is done
			p.Tasks = append(p.Tasks, [3]int{l.Task.Shard, l.Task.Start, l.Task.Count})
		}
	}
	for _, t := range queue {
		p.Tasks = append(p.Tasks, [3]int{t.Shard, t.Start, t.Count})
	}
	// A partial round is kept whole: its results' examples are done, and
	// a resumed job closes the round with them.
	partial := st.agg.Partial()
	p.Round, p.RoundResults = partial.Round, partial.Results
	p.SpotChecks = j.spotSave()
	if r := j.recheckView(); r != (RecheckView{}) {
		p.Rechecks = &r
	}
	if a, ok := st.agg.(*engine.Async); ok && a.Clip != nil {
		if cs, ok := a.Clip.State(); ok {
			p.Clip = &clipProgress{Centre: protocol.AppendFloats(nil, cs.Centre), Dists: cs.Dists, Next: cs.Next}
		}
	}
	prog, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("coordinator: encoding progress: %v", err)) // only plain types: a bug
	}
	vectors, steps := st.model.Opt.State()
	if partial.Results > 0 {
		vectors = append(vectors[:len(vectors):len(vectors)], partial.Sum)
	}
	bufs.params = protocol.AppendFloats(bufs.params[:0], st.model.Params)
	bufs.opt = appendOptState(bufs.opt[:0], vectors, steps)
	c := store.Checkpoint{
		JobID: j.ID, Version: st.model.Version, Epoch: st.epoch, CreatedAt: time.Now(),
		Params: bufs.params, OptState: bufs.opt, Progress: prog,
		KeepVersion0: j.rlReference != nil, // rlreference.go
	}
	// The credit of every result this state holds, and of no other: the
	// ledger's durable credit moves only with the model (ledgerstore.go).
	if j.credits != nil {
		c.Credits = j.credits.takeCredit(j.ID)
	}
	return c
}

// appendOptState appends the optimizer's step count and vectors to b:
// steps int64, count uint32, then per vector its length uint64 and its
// little-endian float32s.
func appendOptState(b []byte, vectors [][]float32, steps int64) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(steps))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(vectors)))
	for _, v := range vectors {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(v)))
		b = protocol.AppendFloats(b, v)
	}
	return b
}

var errBadOptState = errors.New("checkpoint optimizer state is malformed")

// decodeCheckpointFloats decodes a checkpoint's float32s into dst. A job
// that failed by diverging may have been checkpointed with NaN or Inf in
// its model or optimizer state; it is served as it ended and never trained
// again, so with allowNonFinite its values are taken as they are (and a
// restart never fails on it).
func decodeCheckpointFloats(dst []float32, b []byte, allowNonFinite bool) error {
	if allowNonFinite && len(b) == 4*len(dst) {
		protocol.CopyFloats(dst, b)
		return nil
	}
	return protocol.DecodeFloatsInto(dst, b)
}

func decodeOptState(b []byte, allowNonFinite bool) ([][]float32, int64, error) {
	if len(b) < 12 {
		return nil, 0, errBadOptState
	}
	steps := int64(binary.LittleEndian.Uint64(b))
	count := binary.LittleEndian.Uint32(b[8:])
	b = b[12:]
	if count > 16 {
		return nil, 0, errBadOptState
	}
	vectors := make([][]float32, count)
	for i := range vectors {
		if len(b) < 8 {
			return nil, 0, errBadOptState
		}
		n := binary.LittleEndian.Uint64(b)
		b = b[8:]
		if n > uint64(len(b))/4 {
			return nil, 0, errBadOptState
		}
		vectors[i] = make([]float32, n)
		if err := decodeCheckpointFloats(vectors[i], b[:4*n], allowNonFinite); err != nil {
			return nil, 0, fmt.Errorf("%w: %v", errBadOptState, err)
		}
		b = b[4*n:]
	}
	if len(b) != 0 {
		return nil, 0, errBadOptState
	}
	return vectors, steps, nil
}

// restore loads a checkpoint into a freshly built job (before its loop
// starts).
func (j *Job) restore(c store.Checkpoint) error {
	st := &j.st
	failed := st.state == StateFailed
	if err := decodeCheckpointFloats(st.model.Params, c.Params, failed); err != nil {
		return fmt.Errorf("checkpoint v%d parameters: %w", c.Version, err)
	}
	vectors, steps, err := decodeOptState(c.OptState, failed)
	if err != nil {
		return fmt.Errorf("checkpoint v%d: %w", c.Version, err)
	}
	var p progress
	if err := json.Unmarshal(c.Progress, &p); err != nil {
		return fmt.Errorf("checkpoint v%d progress: %w", c.Version, err)
	}
	partial := engine.Partial{Round: p.Round, Results: p.RoundResults}
	if p.RoundResults > 0 {
		if len(vectors) == 0 {
			return fmt.Errorf("checkpoint v%d: a partial round of %d results without its sum", c.Version, p.RoundResults)
		}
		partial.Sum, vectors = vectors[len(vectors)-1], vectors[:len(vectors)-1]
	}
	if want, _ := st.model.Opt.State(); len(vectors) != len(want) {
		// The spec was stored with a new mode whose own checkpoint did not
		// land before the coordinator died: the state is the old optimizer's.
		j.log.Warn(fmt.Sprintf("job %s: checkpoint v%d holds the state of another outer optimizer (%d vectors, this one has %d): a mode change not yet checkpointed; starting the optimizer fresh",
			j.ID, c.Version, len(vectors), len(want)))
	} else if err := st.model.Opt.SetState(vectors, steps); err != nil {
		return fmt.Errorf("checkpoint v%d optimizer state: %w", c.Version, err)
	}
	if _, async := st.agg.(*engine.Async); async && partial.Results > 0 {
		// Same window, the other way: a round mode's partial round under a
		// spec stored as async. Its results mean nothing to async.
		j.log.Warn(fmt.Sprintf("job %s: checkpoint v%d holds %d results of a round, but the job is now async (a mode change not yet checkpointed); dropping them",
			j.ID, c.Version, partial.Results))
	} else if err := st.agg.Restore(partial); err != nil {
		return fmt.Errorf("checkpoint v%d: %w", c.Version, err)
	}
	st.model.Version, st.epoch = c.Version, p.Epoch
	st.relay.applied.restore(p.RelayApplied)
	st.relay.resumedAt = c.Version
	j.restoreClip(c.Version, p.Clip)
	tasks := make([]engine.Task, 0, len(p.Tasks))
	st.remaining = 0
	for _, t := range p.Tasks {
		if t[0] < 0 || t[0] >= len(j.shards) || t[1] < 0 || t[2] < 1 || t[1]+t[2] > len(j.shards[t[0]].Indices) {
			return fmt.Errorf("checkpoint v%d progress names task %v outside the job's shards", c.Version, t)
		}
		tasks = append(tasks, engine.Task{Shard: t[0], Start: t[1], Count: t[2]})
		st.remaining += int64(t[2])
	}
	st.sched.SetQueue(carve(tasks, st.spec.BatchSize*st.spec.TaskSteps()))
	st.examplesSeen, st.epochExamples = p.ExamplesSeen, p.EpochExamples
	j.wire.restore(p.Wire)
	st.applied, st.rejected = p.Applied, p.Rejected
	for k, v := range p.Rejections {
		st.rejections[k] = v
	}
	st.leasesIssued, st.leasesExpired, st.stalenessSum = p.LeasesIssued, p.LeasesExpired, p.StalenessSum
	copy(st.stalenessHist, p.StalenessHist) // older checkpoints have none
	st.norms.Restore(p.NormMean, p.NormCount)
	st.clipped = p.Clipped
	st.lastEvalAt, st.eval, st.finalEvalAfter = p.LastEvalAt, p.Eval, p.FinalEvalAfter
	if !p.StartedAt.IsZero() {
		st.startedAt = p.StartedAt
	}
	j.spotRestore(p.SpotChecks)
	j.recheckRestore(p.Rechecks)
	st.ckptVersion, st.ckptApplied, st.ckptSpot = c.Version, st.applied, st.spot.Counters
	// A checkpoint taken after the last epoch's tasks were done but before
	// the final evaluation finished: evaluate again.
	if st.state == StateRunning && st.remaining == 0 && st.epoch >= st.spec.MaxEpochs {
		st.finalEvalAfter = true
	} else if st.state == StateRunning && st.remaining == 0 {
		j.startEpoch()
	}
	return nil
}

// recordMetric queues a metrics row: throughput since the previous row,
// and the evaluation if there is one. Never blocks the loop: when the
// writer is far behind, the row is dropped.
func (j *Job) recordMetric(eval *EvalResult) {
	j.addMetric(eval, "")
}

// recordNote records a metrics row saying what an operator changed.
func (j *Job) recordNote(note string) {
	j.addMetric(nil, note)
}

func (j *Job) addMetric(eval *EvalResult, note string) {
	if j.store == nil && j.onMetric == nil {
		return
	}
	st := &j.st
	now := time.Now()
	m := store.Metric{JobID: j.ID, At: now, Version: st.model.Version}
	if dt := now.Sub(st.metricAt).Seconds(); !st.metricAt.IsZero() && dt > 0 {
		m.ExamplesPerSec = float64(st.examplesSeen-st.metricExamples) / dt
		m.UpdatesPerSec = float64(st.applied-st.metricApplied) / dt
	}
	st.metricAt, st.metricExamples, st.metricApplied = now, st.examplesSeen, st.applied
	if eval != nil {
		m.Version = eval.Version
		if !math.IsNaN(eval.Loss) && !math.IsInf(eval.Loss, 0) {
			acc, loss := eval.Accuracy, eval.Loss
			m.Accuracy, m.Loss = &acc, &loss
		} else {
			m.Note = "non-finite loss"
		}
	}
	if note != "" {
		m.Note = note
	}
	if j.onMetric != nil {
		j.onMetric(m)
	}
	if j.store == nil {
		return
	}
	select {
	case j.metricCh <- m:
	default:
	}
}

// restoreClip puts the asynchronous clip's state back. One that does not
// fit (the job is now in a round mode, or the model changed) is dropped
// with a log line: the clip warms up again.
func (j *Job) restoreClip(version int64, p *clipProgress) {
	a, ok := j.st.agg.(*engine.Async)
	if !ok || a.Clip == nil || p == nil {
		return
	}
	centre := make([]float32, len(p.Centre)/4)
	err := protocol.DecodeFloatsInto(centre, p.Centre)
	if err == nil {
		err = a.Clip.SetState(engine.ClipState{Centre: centre, Dists: p.Dists, Next: p.Next})
	}
	if err != nil {
		j.log.Warn(fmt.Sprintf("job %s: checkpoint v%d: the robust clip's state does not fit (%v); it warms up again", j.ID, version, err))
	}
}
