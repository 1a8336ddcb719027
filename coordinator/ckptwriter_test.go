package coordinator

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crowdtrain/crowdtrain/store"
)

func TestBackoffDoublesUpToMax(t *testing.T) {
	b := backoff{Min: time.Second, Max: 10 * time.Second}
	for failures, want := range []time.Duration{1: time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second} {
		if failures == 0 {
			continue
		}
		if got := b.delay(failures); got != want {
			t.Errorf("delay after %d failures = %v, want %v", failures, got, want)
		}
	}
	if got := b.delay(1000); got != 10*time.Second {
		t.Errorf("delay after 1000 failures = %v, want the 10s cap", got)
	}
}

// fakeSaver stands in for the store: it fails while fail says so and
// records when each attempt was made (on synctest's fake clock).
type fakeSaver struct {
	mu       sync.Mutex
	start    time.Time
	attempts []time.Duration // since start
	versions []int64
	fail     func(attempt int) error
}

func (f *fakeSaver) save(_ context.Context, c store.Checkpoint, _ int, _ store.JobState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, time.Since(f.start))
	f.versions = append(f.versions, c.Version)
	return f.fail(len(f.attempts))
}

func (f *fakeSaver) log() ([]time.Duration, []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.attempts...), append([]int64(nil), f.versions...)
}

var errDiskFull = errors.New("database or disk is full")

// writerJob is a job with just what writeLoop needs.
func writerJob(t *testing.T, f *fakeSaver) *Job {
	return &Job{ID: "j", log: LogfLogger(t.Logf), ckptCh: make(chan *checkpointOp, 1), ckptPool: make(chan *ckptBuffers, 2),
		metricCh: make(chan store.Metric, 1), saveCheckpoint: f.save}
}

func op(v int64, state string) *checkpointOp {
	return &checkpointOp{c: store.Checkpoint{JobID: "j", Version: v}, state: state}
}

// A failed write is retried after 1s, 2s, 4s... until it succeeds, and
// the job reports it pending meanwhile, then durable.
func TestWriterRetriesAFailedCheckpointWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSaver{start: time.Now(), fail: func(n int) error {
			if n <= 3 {
				return errDiskFull
			}
			return nil
		}}
		j := writerJob(t, f)
		done := make(chan error)
		go func() { done <- j.writeLoop(5, backoff{Min: time.Second, Max: time.Minute}, time.Now) }()
		j.ckptCh <- op(7, StateDone)
		time.Sleep(2 * time.Second) // attempts at 0s and 1s have failed
		synctest.Wait()
		failure, failed, durable := j.health.get()
		if failure == nil || failure.Version != 7 || failure.Failures != 2 || !failure.PendingSince.Equal(f.start) ||
			!strings.Contains(failure.LastError, "disk is full") || failed != 2 || durable != nil {
			t.Fatalf("after 2 failures: failure %+v, %d failed writes, durable %+v; want v7 pending since the start, 2 failures", failure, failed, durable)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		attempts, _ := f.log()
		want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second}
		if !slices.Equal(attempts, want) {
			t.Fatalf("attempts at %v, want %v", attempts, want)
		}
		failure, failed, durable = j.health.get()
		if failure != nil || failed != 3 || durable == nil || durable.version != 7 || durable.state != StateDone {
			t.Fatalf("after the write succeeded: failure %+v, %d failed writes, durable %+v; want none pending, v7 done durable", failure, failed, durable)
		}
		close(j.ckptCh)
		if err := <-done; err != nil {
			t.Fatalf("writer: %v", err)
		}
	})
}

// A newer checkpoint queued while an older one waits for its retry is
// written at once instead; the older is never tried again.
func TestWriterNewerCheckpointReplacesAFailedOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSaver{start: time.Now(), fail: func(n int) error {
			if n == 1 {
				return errDiskFull
			}
			return nil
		}}
		j := writerJob(t, f)
		done := make(chan error)
		go func() { done <- j.writeLoop(5, backoff{Min: 10 * time.Second, Max: time.Minute}, time.Now) }()
		j.ckptCh <- op(1, StateRunning)
		time.Sleep(time.Second)
		j.ckptCh <- op(2, StateRunning)
		time.Sleep(time.Minute)
		close(j.ckptCh)
		if err := <-done; err != nil {
			t.Fatalf("writer: %v", err)
		}
		attempts, versions := f.log()
		if !slices.Equal(versions, []int64{1, 2}) || !slices.Equal(attempts, []time.Duration{0, time.Second}) {
			t.Fatalf("wrote versions %v at %v; want v1 at 0s (failed), then v2 at 1s and nothing more", versions, attempts)
		}
		if _, _, d := j.health.get(); d == nil || d.version != 2 {
			t.Fatalf("durable %+v, want v2", d)
		}
	})
}

// At shutdown a checkpoint still failing is tried again until the
// deadline, then reported, naming the checkpoint the next start resumes
// from.
func TestWriterGivesUpAtTheShutdownDeadlineAndSaysWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSaver{start: time.Now(), fail: func(n int) error {
			if n == 1 {
				return nil // v3 is durable
			}
			return errDiskFull
		}}
		j := writerJob(t, f)
		var deadline time.Time
		done := make(chan error)
		go func() {
			done <- j.writeLoop(5, backoff{Min: time.Second, Max: time.Minute}, func() time.Time { return deadline })
		}()
		j.ckptCh <- op(3, StateRunning)
		time.Sleep(100 * time.Millisecond)
		j.ckptCh <- op(9, StateDone) // fails at 0.1s; retry due at 1.1s
		time.Sleep(100 * time.Millisecond)
		deadline = time.Now().Add(5 * time.Second)
		close(j.ckptCh)
		err := <-done
		if !errors.Is(err, errCheckpointNotWritten) || !strings.Contains(err.Error(), "v9") ||
			!strings.Contains(err.Error(), "resumes the job from its last durable checkpoint, v3") {
			t.Fatalf("writer's error = %v; want v9 not written, resuming from v3", err)
		}
		attempts, versions := f.log()
		// v3 at 0; v9 at 0.1 (failed), then at shutdown 0.2, 1.2, 3.2;
		// the next (7.2s) would pass the 5.2s deadline.
		ms := time.Millisecond
		if want := []time.Duration{0, 100 * ms, 200 * ms, 1200 * ms, 3200 * ms}; !slices.Equal(attempts, want) {
			t.Fatalf("attempts (versions %v) at %v, want %v", versions, attempts, want)
		}
		if now := time.Since(f.start); now > 5200*ms {
			t.Fatalf("writer returned at %v, after the deadline", now)
		}
	})
}
