package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crowdtrain/crowdtrain/store"
)

// Durability defaults (documented in docs/SECURITY.md, "Durability").
const (
	defaultCheckpointRetryMin   = time.Second
	defaultCheckpointRetryMax   = time.Minute
	defaultStoreShutdownTimeout = 20 * time.Second
	defaultMaxWorkerRecords     = 10_000
	defaultWorkerRecordMaxAge   = 30 * 24 * time.Hour
	defaultWorkerRecordQueue    = 1024
)

func (c *Config) setDurabilityDefaults() {
	orDefault(&c.CheckpointRetryMin, defaultCheckpointRetryMin)
	orDefault(&c.CheckpointRetryMax, defaultCheckpointRetryMax)
	c.CheckpointRetryMax = max(c.CheckpointRetryMax, c.CheckpointRetryMin)
	orDefault(&c.StoreShutdownTimeout, defaultStoreShutdownTimeout)
	orDefault(&c.MaxWorkerRecords, defaultMaxWorkerRecords)
	if c.WorkerRecordMaxAge < 0 {
		c.WorkerRecordMaxAge = 0
	} else if c.WorkerRecordMaxAge == 0 {
		c.WorkerRecordMaxAge = defaultWorkerRecordMaxAge
	}
	orDefault(&c.WorkerRecordQueue, defaultWorkerRecordQueue)
}

// waitForStore waits for the job writers (closed by Close, retrying a
// failed final checkpoint through the first half of the timeout) and the
// worker recorder, but never past start+StoreShutdownTimeout: a frozen
// file system must not hang shutdown.
func (s *Server) waitForStore(start time.Time) error {
	timeout := s.cfg.StoreShutdownTimeout
	hardStop := start.Add(timeout)
	writersDone := make(chan struct{})
	go func() {
		s.writers.Wait()
		close(writersDone)
	}()
	var recordsErr error
	if s.workerRecords != nil {
		recordsErr = s.workerRecords.close(hardStop) // meanwhile the writers go on
	}
	recordsErr = errors.Join(recordsErr, s.volunteers.close(hardStop))
	var errs []error
	timer := time.NewTimer(time.Until(hardStop))
	defer timer.Stop()
	select {
	case <-writersDone:
	case <-timer.C:
		errs = append(errs, fmt.Errorf("the store (%s) did not finish writing the final checkpoints within %v: its file system "+
			"may be frozen or failing; the next start resumes each job from its last durable checkpoint", s.cfg.Store.Path(), timeout))
	}
	s.mu.Lock()
	errs = append(errs, s.writerErrs...)
	s.mu.Unlock()
	return errors.Join(append(errs, recordsErr)...) // checkpoints first: they matter most
}

// workerRecorder writes worker records off the join path: joining and
// leaving only put a record in a bounded map, coalesced by worker id, and
// one goroutine writes whatever has gathered in one transaction, then
// prunes the table to its bounds. Under pressure (the map is full) a
// record is dropped and counted: a worker record is history, not state,
// unlike a checkpoint, which is never dropped.
type workerRecorder struct {
	db      *store.Store
	maxRows int
	maxAge  time.Duration
	limit   int
	log     *slog.Logger

	mu      sync.Mutex
	pending map[string]store.WorkerRecord
	dropped atomic.Int64
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	failed  atomic.Int64 // failed batch writes
}

func newWorkerRecorder(db *store.Store, maxRows int, maxAge time.Duration, limit int, log *slog.Logger) *workerRecorder {
	r := &workerRecorder{db: db, maxRows: maxRows, maxAge: maxAge, limit: limit, log: log,
		pending: map[string]store.WorkerRecord{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r
}

// record queues w; it never blocks.
func (r *workerRecorder) record(w store.WorkerRecord) {
	r.mu.Lock()
	_, queued := r.pending[w.ID]
	if !queued && len(r.pending) >= r.limit {
		r.mu.Unlock()
		if r.dropped.Add(1)%1000 == 1 {
			r.log.Warn(fmt.Sprintf("worker records: %d waiting to be written (the limit); dropping worker %s's record (%d dropped so far)",
				r.limit, w.ID, r.dropped.Load()), logWorker, w.ID)
		}
		return
	}
	r.pending[w.ID] = w
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *workerRecorder) run() {
	defer close(r.done)
	for {
		select {
		case <-r.wake:
			r.flush()
		case <-r.stop:
			r.flush()
			return
		}
	}
}

func (r *workerRecorder) flush() {
	r.mu.Lock()
	batch := make([]store.WorkerRecord, 0, len(r.pending))
	for _, w := range r.pending {
		batch = append(batch, w)
	}
	clear(r.pending)
	r.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	ctx := context.Background()
	if err := r.db.UpsertWorkers(ctx, batch); err != nil {
		r.failed.Add(1)
		r.log.Error(fmt.Sprintf("worker records: %d not written: %v", len(batch), err))
		return
	}
	var cut time.Time
	if r.maxAge > 0 {
		cut = time.Now().Add(-r.maxAge)
	}
	if _, err := r.db.PruneWorkers(ctx, r.maxRows, cut); err != nil {
		r.log.Error(fmt.Sprintf("worker records: pruning: %v", err))
	}
}

// close writes what is queued and stops, waiting no later than deadline.
func (r *workerRecorder) close(deadline time.Time) error {
	close(r.stop)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-r.done:
		return nil
	case <-t.C:
		return fmt.Errorf("worker records: the store did not take the last ones before the shutdown deadline; they are lost (history only)")
	}
}

// durabilityCollector exports the writers' health to /metrics.
type durabilityCollector struct {
	s                                             *Server
	failures, pendingSince, lastError, recDropped *prometheus.Desc
}

func newDurabilityCollector(s *Server) *durabilityCollector {
	return &durabilityCollector{
		s: s,
		failures: prometheus.NewDesc("crowdtrain_checkpoint_write_failures_total",
			"Failed attempts to write a checkpoint (each is retried).", []string{"job"}, nil),
		pendingSince: prometheus.NewDesc("crowdtrain_checkpoint_pending_since_seconds",
			"Unix time of the first failed write of the job's pending checkpoint; 0 when every checkpoint is written.", []string{"job"}, nil),
		lastError: prometheus.NewDesc("crowdtrain_checkpoint_last_error_info",
			"1 while a checkpoint write is failing, labelled with the last error.", []string{"job", "error"}, nil),
		recDropped: prometheus.NewDesc("crowdtrain_worker_records_dropped_total",
			"Worker records not written because too many were waiting.", nil, nil),
	}
}

func (c *durabilityCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.failures
	ch <- c.pendingSince
	ch <- c.lastError
	ch <- c.recDropped
}

func (c *durabilityCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	jobs := slices.Clone(c.s.jobs)
	c.s.mu.Unlock()
	for _, j := range jobs {
		if j.store == nil {
			continue
		}
		failure, failed, _ := j.health.get()
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(failed), j.ID)
		since := 0.0
		if failure != nil {
			since = float64(failure.PendingSince.UnixNano()) / 1e9
			ch <- prometheus.MustNewConstMetric(c.lastError, prometheus.GaugeValue, 1, j.ID, failure.LastError)
		}
		ch <- prometheus.MustNewConstMetric(c.pendingSince, prometheus.GaugeValue, since, j.ID)
	}
	if r := c.s.workerRecords; r != nil {
		ch <- prometheus.MustNewConstMetric(c.recDropped, prometheus.CounterValue, float64(r.dropped.Load()))
	}
}
