package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/crowdtrain/crowdtrain/store"
)

// The checkpoint writer. A checkpoint is written once it is durable
// (SQLite fsyncs every commit) and not before: a write that fails (disk
// full, file system read-only) stays pending and is tried again with
// backoff until it succeeds, a newer checkpoint replaces it, or the
// coordinator shuts down, which tries it once more and reports it if it
// still fails. While one is pending, the job's API view, the admin page
// and /metrics say so.

// backoff is the retry policy for a failed write: the n-th retry waits
// Min·2^(n-1), at most Max. No jitter: one coordinator retries alone.
type backoff struct {
	Min, Max time.Duration
}

// delay is how long to wait after the failures-th failure in a row (1 for
// the first).
func (b backoff) delay(failures int) time.Duration {
	d := b.Min
	for i := 1; i < failures && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// CheckpointFailure describes a checkpoint that is not yet durable because
// writing it failed: the API shows it as a job's checkpoint_failure while
// the writer retries, and nil once a write succeeds.
type CheckpointFailure struct {
	Version      int64     `json:"version"`       // the checkpoint waiting to be written
	Failures     int       `json:"failures"`      // failed attempts in a row
	PendingSince time.Time `json:"pending_since"` // first failure since the last durable checkpoint
	LastError    string    `json:"last_error"`
	NextRetry    time.Time `json:"next_retry"`
}

// durableMark is what the last successful checkpoint write made durable.
type durableMark struct {
	version int64
	state   string
}

// ckptHealth is the writer's report, read by views and /metrics off the
// writer's goroutine.
type ckptHealth struct {
	mu sync.Mutex
	// failure is nil while nothing is pending.
	failure *CheckpointFailure
	// failedWrites counts every failed attempt in the job's life in this
	// process (Prometheus counter).
	failedWrites int64
	durable      *durableMark
}

func (h *ckptHealth) get() (failure *CheckpointFailure, failedWrites int64, durable *durableMark) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failure != nil {
		f := *h.failure
		failure = &f
	}
	return failure, h.failedWrites, h.durable
}

func (h *ckptHealth) failed(op *checkpointOp, err error, failures int, now, next time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failedWrites++
	since := now
	if h.failure != nil {
		since = h.failure.PendingSince
	}
	h.failure = &CheckpointFailure{Version: op.c.Version, Failures: failures, PendingSince: since, LastError: err.Error(), NextRetry: next}
}

func (h *ckptHealth) written(op *checkpointOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failure = nil
	h.durable = &durableMark{version: op.c.Version, state: op.state}
}

// markDurable records a state read back from the store (a resumed job).
func (h *ckptHealth) markDurable(version int64, state string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.durable = &durableMark{version: version, state: state}
}

// errCheckpointNotWritten wraps the error a job's writer gives up with at
// shutdown.
var errCheckpointNotWritten = errors.New("checkpoint not written")

// writeLoop is the job's writer: checkpoints and metrics, in order, off
// the update loop. It returns when ckptCh is closed, after writing what
// was queued or pending, retrying a failed checkpoint until deadline()
// (read at the close) passes; the error says what was left unwritten.
func (j *Job) writeLoop(keep int, policy backoff, deadline func() time.Time) error {
	ctx := context.Background()
	var pending *checkpointOp // a checkpoint not yet durable
	failures := 0
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	attempt := func() {
		err := j.writeCheckpoint(ctx, pending, keep)
		if err == nil {
			runAcks(pending.acks)
			j.putBuffers(pending.bufs)
			pending, failures = nil, 0
			retry.Stop()
			return
		}
		failures++
		wait := policy.delay(failures)
		now := time.Now()
		j.health.failed(pending, err, failures, now, now.Add(wait))
		j.log.Error(fmt.Sprintf("job %s: checkpoint v%d NOT written (attempt %d; retrying in %v): %v", j.ID, pending.c.Version, failures, wait, err), "version", pending.c.Version)
		retry.Reset(wait)
	}
	for {
		var retryC <-chan time.Time
		if pending != nil {
			retryC = retry.C
		}
		select {
		case op, ok := <-j.ckptCh:
			if !ok {
				j.flushMetrics(ctx)
				return j.finalWrite(ctx, pending, keep, policy, deadline())
			}
			if pending != nil { // a newer state supersedes the failed one
				j.putBuffers(pending.bufs)
				op.acks = append(pending.acks, op.acks...)
				op.c.Credits = mergeCredits(pending.c.Credits, op.c.Credits)
			}
			pending = op
			attempt()
		case <-retryC:
			attempt()
		case m := <-j.metricCh:
			if err := j.store.AddMetric(ctx, m); err != nil {
				j.log.Error(fmt.Sprintf("job %s: recording metrics: %v", j.ID, err))
			}
		}
	}
}

// finalWrite tries a pending checkpoint until it is written or the
// deadline passes.
func (j *Job) finalWrite(ctx context.Context, op *checkpointOp, keep int, policy backoff, deadline time.Time) error {
	if op == nil {
		return nil
	}
	defer j.putBuffers(op.bufs)
	for failures := 1; ; failures++ {
		err := j.writeCheckpoint(ctx, op, keep)
		if err == nil {
			runAcks(op.acks)
			return nil
		}
		now := time.Now()
		wait := policy.delay(failures)
		j.health.failed(op, err, failures, now, now.Add(wait))
		if now.Add(wait).After(deadline) {
			durable := "no checkpoint: it starts from version 0"
			if _, _, d := j.health.get(); d != nil {
				durable = fmt.Sprintf("its last durable checkpoint, v%d", d.version)
			}
			return fmt.Errorf("job %s: %w: v%d (state %s) failed %d times at shutdown, last: %v; free space or fix the file system: "+
				"the next start resumes the job from %s", j.ID, errCheckpointNotWritten, op.c.Version, op.state, failures, err, durable)
		}
		j.log.Error(fmt.Sprintf("job %s: checkpoint v%d NOT written at shutdown (attempt %d; retrying in %v): %v", j.ID, op.c.Version, failures, wait, err), "version", op.c.Version)
		time.Sleep(wait)
	}
}

func (j *Job) flushMetrics(ctx context.Context) {
	for {
		select {
		case m := <-j.metricCh:
			if err := j.store.AddMetric(ctx, m); err != nil {
				j.log.Error(fmt.Sprintf("job %s: recording metrics: %v", j.ID, err))
			}
		default:
			return
		}
	}
}

// writeCheckpoint writes op once; nil means it is durable.
func (j *Job) writeCheckpoint(ctx context.Context, op *checkpointOp, keep int) error {
	if j.verbose {
		j.logf("job %s: writing checkpoint v%d", j.ID, op.c.Version)
	}
	start := time.Now()
	// With the job's state in the same transaction: a finished job is never
	// found without its final checkpoint.
	err := j.saveCheckpoint(ctx, op.c, keep, store.JobState{State: op.state, Reason: op.reason, DoneAt: op.doneAt})
	took := time.Since(start)
	if err != nil {
		return err
	}
	info := CheckpointStats{
		Version: op.c.Version, At: op.c.CreatedAt,
		Bytes:   int64(len(op.c.Params) + len(op.c.OptState) + len(op.c.Progress)),
		PauseMs: float64(op.pause.Microseconds()) / 1000, WriteMs: float64(took.Microseconds()) / 1000,
		RoundResults: op.roundResults,
	}
	j.lastCkpt.Store(&info)
	j.health.written(op)
	if j.onCheckpoint != nil {
		j.onCheckpoint(took)
	}
	if j.verbose || op.state != StateRunning && op.state != StatePaused {
		j.log.Info(fmt.Sprintf("job %s: checkpoint v%d written (%s): %.1f MB in %v (loop paused %v)", j.ID, op.c.Version, op.state,
			float64(info.Bytes)/1e6, took.Round(time.Millisecond), op.pause.Round(time.Microsecond)), "version", op.c.Version)
	}
	return nil
}
