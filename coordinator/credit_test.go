package coordinator

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/store"
)

// durable is what a coordinator started on path after a crash would find:
// the volunteer's credited and refuted examples, and the examples the
// job's latest checkpoint holds.
func durable(t *testing.T, path, job, volunteer string) (credited, refuted, seen int64) {
	t.Helper()
	r, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	vols, err := r.Volunteers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.ID == volunteer {
			credited, refuted = v.Examples, v.RefutedExamples
		}
	}
	c, err := r.LatestCheckpoint(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	var p progress
	if err := json.Unmarshal(c.Progress, &p); err != nil {
		t.Fatal(err)
	}
	return credited, refuted, p.ExamplesSeen
}

// A result's credit is durable only with the checkpoint that holds the
// result: a crash before it (simulated by reading the file while the
// writer is never closed) finds neither; a failed write keeps the credit
// for the checkpoint that replaces it, which adds it once; a refutation
// settled later goes with the next checkpoint even though the model did
// not move.
func TestCreditIsDurableWithItsCheckpoint(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ct.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	j := tinyJob(t, "checkpoint_every: 1000\n")
	j.st.spot.Rate = 0
	if err := db.CreateJob(ctx, store.JobRecord{ID: j.ID, Name: "tiny", Spec: []byte(`{}`), State: StateRunning}); err != nil {
		t.Fatal(err)
	}
	book := newVolunteerBook()
	if err := book.load(ctx, db, LogfLogger(t.Logf)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { book.close(time.Now().Add(10 * time.Second)) })
	fails := make(chan error, 1)
	j.ledger, j.credits, j.store = book, book, db
	j.ckptCh, j.ckptPool, j.metricCh = make(chan *checkpointOp, 1), make(chan *ckptBuffers, 2), make(chan store.Metric, 64)
	j.saveCheckpoint = func(ctx context.Context, c store.Checkpoint, keep int, st store.JobState) error {
		select {
		case err := <-fails:
			return err
		default:
			return db.SaveCheckpointState(ctx, c, keep, st)
		}
	}
	written := make(chan error, 1)
	// Retries wait an hour: a failed checkpoint is only ever replaced here.
	go func() { written <- j.writeLoop(3, backoff{Min: time.Hour, Max: time.Hour}, time.Now) }()
	waitDurable := func(version int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if _, _, d := j.health.get(); d != nil && d.version == version {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("checkpoint v%d not written", version)
			}
		}
	}
	j.checkpoint(true) // the job's first checkpoint, at version 0
	waitDurable(0)
	j.join("w", member{volunteer: "k-a", address: "127.0.0.2"})
	accept := func() int64 {
		t.Helper()
		l := startedLease(t, j, "w")
		if a := j.apply(submissionOf(j, "w", "k-a", l)); !a.Accepted {
			t.Fatalf("result refused: %+v", a)
		}
		return int64(l.Count)
	}

	n1 := accept() + accept()
	if got := book.byID["k-a"].Examples; got != n1 {
		t.Fatalf("the live book shows %d examples, want %d at once", got, n1)
	}
	if cr, _, seen := durable(t, path, j.ID, "k-a"); cr != 0 || seen != 0 {
		t.Fatalf("crash before a checkpoint: %d examples credited, %d in the model; want 0 and 0", cr, seen)
	}

	// The checkpoint holding them fails to write; a newer one replaces it.
	fails <- errDiskFull
	j.checkpoint(true)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if f, _, _ := j.health.get(); f != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failing write was not attempted")
		}
	}
	if cr, _, _ := durable(t, path, j.ID, "k-a"); cr != 0 {
		t.Fatalf("crash after a failed checkpoint: %d examples credited, want 0", cr)
	}
	n2 := n1 + accept()
	j.checkpoint(true)
	waitDurable(j.st.model.Version)
	cr, _, seen := durable(t, path, j.ID, "k-a")
	t.Logf("after the retried checkpoint: %d examples credited, %d in the model", cr, seen)
	if cr != n2 || seen != n2 {
		t.Fatalf("after the checkpoint that replaced the failed one: %d examples credited, %d in the model; want %d each (once)", cr, seen, n2)
	}

	// A spot check refutes one result after the fact: the model does not
	// move, but the checkpoint writes the refutation.
	book.Refute("k-a", j.ID, n1/2, float64(n1/2)*j.flopsPerExample)
	if !j.dirty() {
		t.Fatal("a refutation not yet durable leaves the job clean: no checkpoint would write it")
	}
	j.checkpoint(false)
	if j.dirty() {
		t.Fatal("after the checkpoint took the refutation the job is still dirty")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if cr, _, _ := durable(t, path, j.ID, "k-a"); cr == n2-n1/2 {
			break
		}
		if time.Now().After(deadline) {
			cr, ref, _ := durable(t, path, j.ID, "k-a")
			t.Fatalf("after the refutation's checkpoint: %d credited, %d refuted; want %d, %d", cr, ref, n2-n1/2, n1/2)
		}
	}

	// More work, then a crash: the credit stays at what the model holds.
	accept()
	cr, ref, seen := durable(t, path, j.ID, "k-a")
	if cr != n2-n1/2 || ref != n1/2 || cr+ref > seen {
		t.Fatalf("crash after unsaved work: %d credited + %d refuted, %d in the model; want %d + %d <= %d",
			cr, ref, seen, n2-n1/2, n1/2, n2)
	}
	close(j.ckptCh)
	if err := <-written; err != nil {
		t.Fatal(err)
	}
}
