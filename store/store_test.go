package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	crashChildMain() // returns unless this process is a crash test's child
	m.Run()
}

// openTemp opens a new database in a fresh temporary directory.
func openTemp(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "crowdtrain.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustCreateJob(t testing.TB, s *Store, id string) {
	t.Helper()
	if err := s.CreateJob(context.Background(), JobRecord{ID: id, Name: "job " + id, Spec: []byte(`{}`), State: "running"}); err != nil {
		t.Fatal(err)
	}
}

// pattern fills n bytes with a function of seed and position, so a reader
// can tell whose data it got and whether it is whole.
func pattern(seed int64, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], uint64(seed)<<40^uint64(i)*0x9E3779B97F4A7C15)
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(seed + int64(i))
	}
	return b
}

func sameTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
	if !got.IsZero() && got.Location() != time.UTC {
		t.Errorf("%s location = %v, want UTC", what, got.Location())
	}
}

func TestJobs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobs.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
	cet := time.FixedZone("CET", 3600)
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 123456789, cet) // nanoseconds and a zone: stored exactly, returned in UTC
	b := JobRecord{ID: "b", Name: "second", Spec: []byte(`{"model":"mlp"}`), State: "paused", Reason: "operator",
		CreatedAt: t0.Add(time.Hour), Incarnation: 7}
	a := JobRecord{ID: "a", Name: "first", Spec: []byte(`{"model":"cnn"}`), State: "running", CreatedAt: t0}
	for _, j := range []JobRecord{b, a} {
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := s.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].ID != "a" || jobs[1].ID != "b" {
		t.Fatalf("Jobs() = %+v, want a then b (oldest first)", jobs)
	}
	for i, want := range []JobRecord{a, b} {
		got := jobs[i]
		if got.ID != want.ID || got.Name != want.Name || !bytes.Equal(got.Spec, want.Spec) || got.State != want.State ||
			got.Reason != want.Reason || got.Incarnation != want.Incarnation {
			t.Errorf("job %d = %+v, want %+v", i, got, want)
		}
		sameTime(t, "CreatedAt", got.CreatedAt, want.CreatedAt)
		sameTime(t, "DoneAt", got.DoneAt, time.Time{})
	}

	if err := s.CreateJob(ctx, a); !errors.Is(err, ErrExists) {
		t.Errorf("CreateJob(duplicate) = %v, want ErrExists", err)
	}
	if err := s.CreateJob(ctx, JobRecord{State: "running"}); err == nil {
		t.Error("CreateJob(empty ID) succeeded")
	}
	if err := s.CreateJob(ctx, JobRecord{ID: "c", State: "sleeping"}); err == nil {
		t.Error("CreateJob(state sleeping) succeeded")
	}
	if err := s.CreateJob(ctx, JobRecord{ID: "c", State: "running"}); err != nil { // zero CreatedAt: now
		t.Fatal(err)
	} else if c, err := s.Job(ctx, "c"); err != nil || time.Since(c.CreatedAt) > time.Minute || c.Spec == nil {
		t.Errorf("Job(c) = %+v, %v: want CreatedAt now and an empty, non-nil spec", c, err)
	}

	done := t0.Add(2 * time.Hour)
	if err := s.UpdateJobState(ctx, "a", "done", "max epochs", done); err != nil {
		t.Fatal(err)
	}
	got, err := s.Job(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "done" || got.Reason != "max epochs" {
		t.Errorf("after UpdateJobState: %+v", got)
	}
	sameTime(t, "DoneAt", got.DoneAt, done)
	if err := s.UpdateJobState(ctx, "a", "running", "", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Job(ctx, "a"); !got.DoneAt.IsZero() || got.State != "running" {
		t.Errorf("after resuming: %+v, want zero DoneAt", got)
	}
	if err := s.UpdateJobState(ctx, "a", "stopped", "stopped by operator", done); err != nil {
		t.Errorf("UpdateJobState(stopped) = %v", err)
	}
	if err := s.UpdateJobSpec(ctx, "a", []byte(`{"max_staleness":16}`)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Job(ctx, "a"); string(got.Spec) != `{"max_staleness":16}` {
		t.Errorf("spec after UpdateJobSpec: %s", got.Spec)
	}
	if err := s.UpdateJobSpec(ctx, "nope", []byte("{}")); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateJobSpec(missing) = %v, want ErrNotFound", err)
	}
	if err := s.UpdateJobState(ctx, "nope", "done", "", done); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateJobState(missing) = %v, want ErrNotFound", err)
	}
	if err := s.UpdateJobState(ctx, "a", "exploded", "", done); err == nil {
		t.Error("UpdateJobState(bad state) succeeded")
	}
	if _, err := s.Job(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Job(missing) = %v, want ErrNotFound", err)
	}

	for want := int64(1); want <= 3; want++ {
		if n, err := s.NextIncarnation(ctx, "a"); err != nil || n != want {
			t.Fatalf("NextIncarnation = %d, %v, want %d", n, err, want)
		}
	}
	if _, err := s.NextIncarnation(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("NextIncarnation(missing) = %v, want ErrNotFound", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.NextIncarnation(ctx, "a"); err != nil || n != 4 {
		t.Errorf("NextIncarnation after reopening = %d, %v, want 4", n, err)
	}
	if n, err := s.NextIncarnation(ctx, "b"); err != nil || n != 8 {
		t.Errorf("NextIncarnation(b) = %d, %v, want 8", n, err)
	}
}

func TestCheckpoints(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	mustCreateJob(t, s, "j")
	if _, err := s.LatestCheckpoint(ctx, "j"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LatestCheckpoint(no checkpoints) = %v, want ErrNotFound", err)
	}
	if _, err := s.LatestCheckpoint(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LatestCheckpoint(missing job) = %v, want ErrNotFound", err)
	}
	if list, err := s.Checkpoints(ctx, "j"); err != nil || list == nil || len(list) != 0 {
		t.Errorf("Checkpoints(none) = %v, %v, want an empty list", list, err)
	}
	if _, err := s.Checkpoints(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Checkpoints(missing job) = %v, want ErrNotFound", err)
	}

	t0 := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	mk := func(v int64, n int) Checkpoint {
		return Checkpoint{JobID: "j", Version: v, Epoch: int(v / 3), CreatedAt: t0.Add(time.Duration(v) * time.Second),
			Params: pattern(v, n), OptState: pattern(-v, 2*n+12), Progress: []byte(fmt.Sprintf(`{"v":%d}`, v))}
	}
	size := func(c Checkpoint) int64 { return int64(len(c.Params) + len(c.OptState) + len(c.Progress)) }
	saved := map[int64]Checkpoint{}
	for v := int64(1); v <= 8; v++ {
		c := mk(v, 1000*int(v)+5) // sizes differ so Bytes is checked per row
		if err := s.SaveCheckpoint(ctx, c, 3); err != nil {
			t.Fatal(err)
		}
		saved[v] = c
	}
	list, err := s.Checkpoints(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("Checkpoints after 8 saves with keep=3: %+v", list)
	}
	for i, ci := range list {
		want := saved[int64(8-i)]
		if ci.Version != want.Version || ci.Epoch != want.Epoch || ci.Bytes != size(want) {
			t.Errorf("Checkpoints[%d] = %+v, want version %d epoch %d bytes %d", i, ci, want.Version, want.Epoch, size(want))
		}
		sameTime(t, "CreatedAt", ci.CreatedAt, want.CreatedAt)
	}
	equal := func(got, want Checkpoint) {
		t.Helper()
		if got.JobID != want.JobID || got.Version != want.Version || got.Epoch != want.Epoch ||
			!bytes.Equal(got.Params, want.Params) || !bytes.Equal(got.OptState, want.OptState) || !bytes.Equal(got.Progress, want.Progress) {
			t.Errorf("checkpoint v%d (%d/%d/%d bytes) differs from the one saved, v%d (%d/%d/%d bytes)",
				got.Version, len(got.Params), len(got.OptState), len(got.Progress),
				want.Version, len(want.Params), len(want.OptState), len(want.Progress))
		}
		sameTime(t, "CreatedAt", got.CreatedAt, want.CreatedAt)
	}
	latest, err := s.LatestCheckpoint(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	equal(latest, saved[8])
	if c, err := s.Checkpoint(ctx, "j", 6); err != nil {
		t.Fatal(err)
	} else {
		equal(c, saved[6])
	}
	if _, err := s.Checkpoint(ctx, "j", 5); !errors.Is(err, ErrNotFound) {
		t.Errorf("Checkpoint(pruned v5) = %v, want ErrNotFound", err)
	}

	// Same version again: replaced, not added.
	again := mk(8, 777)
	again.Progress = []byte(`{"again":true}`)
	if err := s.SaveCheckpoint(ctx, again, 3); err != nil {
		t.Fatal(err)
	}
	if latest, err := s.LatestCheckpoint(ctx, "j"); err != nil {
		t.Fatal(err)
	} else {
		equal(latest, again)
	}
	if list, _ := s.Checkpoints(ctx, "j"); len(list) != 3 || list[0].Bytes != size(again) {
		t.Errorf("after replacing v8: %+v", list)
	}

	// keep < 1 is 1; an older version than the newest kept is pruned at once.
	if err := s.SaveCheckpoint(ctx, mk(9, 10), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveCheckpoint(ctx, mk(2, 10), 1); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.Checkpoints(ctx, "j"); len(list) != 1 || list[0].Version != 9 {
		t.Errorf("after keep=0 then an old version with keep=1: %+v, want only v9", list)
	}

	// nil BLOBs come back empty.
	if err := s.SaveCheckpoint(ctx, Checkpoint{JobID: "j", Version: 10}, 5); err != nil {
		t.Fatal(err)
	}
	if c, err := s.LatestCheckpoint(ctx, "j"); err != nil || c.Version != 10 || len(c.Params)+len(c.OptState)+len(c.Progress) != 0 || c.CreatedAt.IsZero() {
		t.Errorf("empty checkpoint = %+v, %v", c, err)
	}

	if err := s.SaveCheckpoint(ctx, Checkpoint{JobID: "nope", Version: 1, Params: []byte{1}}, 3); !errors.Is(err, ErrNotFound) {
		t.Errorf("SaveCheckpoint(missing job) = %v, want ErrNotFound", err)
	}
	if err := s.SaveCheckpoint(ctx, Checkpoint{Version: 1}, 3); err == nil {
		t.Error("SaveCheckpoint(empty job ID) succeeded")
	}
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	mustCreateJob(t, s, "j")
	mustCreateJob(t, s, "other")
	if list, err := s.Metrics(ctx, "j", 0); err != nil || list == nil || len(list) != 0 {
		t.Errorf("Metrics(none) = %v, %v, want an empty list", list, err)
	}
	t0 := time.Date(2025, 6, 1, 0, 0, 0, 999, time.UTC)
	var want []Metric
	for i := range 10 {
		m := Metric{JobID: "j", At: t0.Add(time.Duration(i) * time.Second), Version: int64(i * 10),
			ExamplesPerSec: 1000.5 + float64(i), UpdatesPerSec: 3.25}
		if i%3 == 0 {
			acc, loss := 0.5+float64(i)/100, 2.0/float64(i+1)
			m.Accuracy, m.Loss = &acc, &loss
			m.Note = "eval"
		}
		if err := s.AddMetric(ctx, m); err != nil {
			t.Fatal(err)
		}
		want = append(want, m)
	}
	if err := s.AddMetric(ctx, Metric{JobID: "other", At: t0, ExamplesPerSec: 1}); err != nil {
		t.Fatal(err)
	}
	check := func(got, want []Metric) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("got %d metrics, want %d", len(got), len(want))
		}
		eqp := func(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
		for i := range got {
			g, w := got[i], want[i]
			if g.JobID != w.JobID || g.Version != w.Version || !eqp(g.Accuracy, w.Accuracy) || !eqp(g.Loss, w.Loss) ||
				g.ExamplesPerSec != w.ExamplesPerSec || g.UpdatesPerSec != w.UpdatesPerSec || g.Note != w.Note {
				t.Errorf("metric %d = %+v, want %+v", i, g, w)
			}
			sameTime(t, "At", g.At, w.At)
		}
	}
	all, err := s.Metrics(ctx, "j", 0)
	if err != nil {
		t.Fatal(err)
	}
	check(all, want)
	last3, err := s.Metrics(ctx, "j", 3)
	if err != nil {
		t.Fatal(err)
	}
	check(last3, want[7:])
	if many, err := s.Metrics(ctx, "j", 100); err != nil || len(many) != 10 {
		t.Errorf("Metrics(limit 100) = %d rows, %v", len(many), err)
	}

	nan := math.NaN()
	if err := s.AddMetric(ctx, Metric{JobID: "j", Loss: &nan}); err == nil {
		t.Error("AddMetric(NaN loss) succeeded")
	}
	if err := s.AddMetric(ctx, Metric{JobID: "j", ExamplesPerSec: math.Inf(1)}); err == nil {
		t.Error("AddMetric(+Inf) succeeded")
	}
	if err := s.AddMetric(ctx, Metric{JobID: "nope"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("AddMetric(missing job) = %v, want ErrNotFound", err)
	}
	if _, err := s.Metrics(ctx, "nope", 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("Metrics(missing job) = %v, want ErrNotFound", err)
	}
}

func TestWorkers(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	if list, err := s.Workers(ctx); err != nil || list == nil || len(list) != 0 {
		t.Errorf("Workers(none) = %v, %v", list, err)
	}
	t1 := time.Date(2025, 2, 3, 4, 5, 6, 7, time.UTC)
	w := WorkerRecord{ID: "w1", JobID: "j", Kind: "native", Backend: "gonum", Client: "crowdtrain/1", Remote: "10.0.0.1:5000",
		Threads: 8, FirstSeen: t1, LastSeen: t1, Examples: 100, Accepted: 3, Rejected: 1}
	if err := s.UpsertWorker(ctx, w); err != nil {
		t.Fatal(err)
	}
	w2 := WorkerRecord{ID: "w0", Kind: "browser", LastSeen: t1.Add(time.Minute)} // zero FirstSeen: LastSeen
	if err := s.UpsertWorker(ctx, w2); err != nil {
		t.Fatal(err)
	}
	upd := w
	upd.FirstSeen = t1.Add(time.Hour) // ignored: the first insert's FirstSeen stays
	upd.LastSeen = t1.Add(2 * time.Hour)
	upd.JobID, upd.Backend, upd.Threads, upd.Examples, upd.Accepted, upd.Rejected = "k", "wasm", 4, 5000, 40, 2
	if err := s.UpsertWorker(ctx, upd); err != nil {
		t.Fatal(err)
	}
	list, err := s.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "w1" || list[1].ID != "w0" {
		t.Fatalf("Workers() = %+v, want w1 then w0", list)
	}
	got := list[0]
	sameTime(t, "FirstSeen", got.FirstSeen, t1)
	sameTime(t, "LastSeen", got.LastSeen, upd.LastSeen)
	got.FirstSeen, got.LastSeen, upd.FirstSeen, upd.LastSeen = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if got != upd {
		t.Errorf("worker = %+v, want %+v", got, upd)
	}
	sameTime(t, "w0 FirstSeen", list[1].FirstSeen, w2.LastSeen)
	if err := s.UpsertWorker(ctx, WorkerRecord{}); err == nil {
		t.Error("UpsertWorker(empty ID) succeeded")
	}
}

// TestConcurrent runs writers and readers at once: no SQLITE_BUSY, no
// lost rows.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	mustCreateJob(t, s, "j")
	const goroutines, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, 4*goroutines)
	for g := range goroutines {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range each {
				v := int64(g*each + i)
				if err := s.SaveCheckpoint(ctx, Checkpoint{JobID: "j", Version: v, Params: pattern(v, 64<<10)}, 3); err != nil {
					errs <- err
					return
				}
				if err := s.AddMetric(ctx, Metric{JobID: "j", Version: v}); err != nil {
					errs <- err
					return
				}
				if _, err := s.NextIncarnation(ctx, "j"); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range each {
				if c, err := s.LatestCheckpoint(ctx, "j"); err != nil && !errors.Is(err, ErrNotFound) {
					errs <- err
					return
				} else if err == nil && !bytes.Equal(c.Params, pattern(c.Version, 64<<10)) {
					errs <- fmt.Errorf("checkpoint v%d is not what was written", c.Version)
					return
				}
				if _, err := s.Metrics(ctx, "j", 5); err != nil {
					errs <- err
					return
				}
				if _, err := s.Jobs(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m, _ := s.Metrics(ctx, "j", 0); len(m) != goroutines*each {
		t.Errorf("%d metrics, want %d", len(m), goroutines*each)
	}
	if j, _ := s.Job(ctx, "j"); j.Incarnation != goroutines*each {
		t.Errorf("incarnation %d, want %d", j.Incarnation, goroutines*each)
	}
	if list, _ := s.Checkpoints(ctx, "j"); len(list) != 3 || list[0].Version != goroutines*each-1 {
		t.Errorf("checkpoints %+v, want the 3 newest", list)
	}
}

func TestSaveCheckpointStateDropsNewerAndSetsState(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateJob(ctx, JobRecord{ID: "j", Name: "j", Spec: []byte("{}"), State: "running"}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []int64{10, 20, 30} {
		if err := s.SaveCheckpoint(ctx, Checkpoint{JobID: "j", Version: v, Params: []byte{byte(v)}}, 5); err != nil {
			t.Fatal(err)
		}
	}
	done := time.Now()
	if err := s.SaveCheckpointState(ctx, Checkpoint{JobID: "j", Version: 25, Params: []byte{25}}, 5,
		JobState{State: "done", Reason: "target reached", DoneAt: done}); err != nil {
		t.Fatal(err)
	}
	c, err := s.LatestCheckpoint(ctx, "j")
	if err != nil || c.Version != 25 {
		t.Fatalf("latest v%d (%v), want the final v25", c.Version, err)
	}
	infos, _ := s.Checkpoints(ctx, "j")
	if len(infos) != 3 || infos[0].Version != 25 || infos[2].Version != 10 {
		t.Fatalf("checkpoints %+v, want 25, 20, 10", infos)
	}
	j, err := s.Job(ctx, "j")
	if err != nil || j.State != "done" || j.Reason != "target reached" || !j.DoneAt.Equal(done) {
		t.Fatalf("job %+v (%v)", j, err)
	}
	if err := s.SaveCheckpointState(ctx, Checkpoint{JobID: "j", Version: 26}, 5, JobState{State: "finished"}); err == nil {
		t.Fatal("an unknown state was accepted")
	}
}
