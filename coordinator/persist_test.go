package coordinator_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// newStoredGrid is a test grid whose coordinator keeps everything in a
// real SQLite file.
func newStoredGrid(t *testing.T, db *store.Store, spec *jobspec.Spec) *testGrid {
	t.Helper()
	return newStoredGridWith(t, db, spec, nil)
}

// newStoredGridWith is newStoredGrid with edit, if not nil, changing the
// coordinator's Config first.
func newStoredGridWith(t *testing.T, db *store.Store, spec *jobspec.Spec, edit func(*coordinator.Config)) *testGrid {
	t.Helper()
	train, test := loadMNIST(t)
	cfg := coordinator.Config{Train: train, Test: test, Logf: t.Logf, Store: db, AdminToken: testAdminToken,
		CheckpointInterval: 50 * time.Millisecond, KeepCheckpoints: 3, IdleRetry: 50 * time.Millisecond}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := &testGrid{t: t, srv: srv}
	resumed, err := srv.ResumeJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case len(resumed) > 0:
		g.job = resumed[0]
	case spec != nil:
		if g.job, err = srv.AddJob(*spec); err != nil {
			t.Fatal(err)
		}
	}
	g.http = newHTTPServer(srv)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	t.Cleanup(g.close)
	return g
}

// A clean Close writes a final checkpoint; a new coordinator on the same
// database resumes the job exactly there, in a new run whose snapshot URLs
// cannot collide with the old ones.
func TestCloseCheckpointsAndResumeContinues(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := quietJob(t)
	g := newStoredGrid(t, db, &spec)
	rc := g.joinRaw()
	n := rc.welcome.Job.NumParams
	var first protocol.Lease
	for i := range 7 {
		l := rc.leases(1)[0]
		if i == 0 {
			first = l
		}
		u := make(protocol.Floats, n)
		for k := range u {
			u[k] = float32(i+1) * 1e-3
		}
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32, Update: u, Examples: l.Count, LossSum: 1})
		if a := rc.ack(l.ID); !a.Accepted {
			t.Fatalf("result %d: %+v", i, a)
		}
	}
	rc.leases(1) // publishes version 7
	before := g.jobView()
	rc.conn.CloseNow() // a silent peer would hold the going-away handshake
	g.close()

	c, err := db.LatestCheckpoint(context.Background(), before.ID)
	if err != nil || c.Version != 7 {
		t.Fatalf("after Close: latest checkpoint v%d (%v), want v7", c.Version, err)
	}
	g2 := newStoredGrid(t, db, nil)
	if g2.job == nil || g2.job.ID != before.ID {
		t.Fatalf("job %s not resumed", before.ID)
	}
	v := g2.jobView()
	if v.Version != 7 || v.Run != 2 || v.UpdatesApplied != 7 || v.ExamplesSeen != before.ExamplesSeen ||
		before.BytesIn < 7*4*int64(n) || v.BytesIn != before.BytesIn || v.Compression != before.Compression {
		t.Fatalf("resumed %+v, want version 7 in run 2 with the counters kept", v)
	}
	rc2 := g2.joinRaw()
	l := rc2.leases(1)[0]
	if l.BaseVersion != 7 || l.SnapshotURL == first.SnapshotURL {
		t.Fatalf("lease after resume: base %d at %s", l.BaseVersion, l.SnapshotURL)
	}
	// The old run's snapshot URLs are gone, not reused for new contents.
	if code := g2.getJSON(first.SnapshotURL, nil); code != http.StatusGone {
		t.Errorf("old run's snapshot URL: %d, want 410", code)
	}
	var cks []map[string]any
	if code := g2.getJSON("/api/v1/jobs/"+before.ID+"/checkpoints", &cks); code != http.StatusOK || len(cks) == 0 || len(cks) > 3 {
		t.Fatalf("checkpoints: %d, %d entries (keep 3)", code, len(cks))
	}
	for _, k := range []string{"version", "created_at", "bytes"} {
		if _, ok := cks[0][k]; !ok {
			t.Errorf("checkpoint entry has no %q: %v", k, cks[0])
		}
	}
	var ms []map[string]any
	if code := g2.getJSON("/api/v1/jobs/"+before.ID+"/metrics", &ms); code != http.StatusOK {
		t.Fatalf("metrics: %d", code)
	}
}

// A finished job stays finished: resumed, it is served as it ended and
// hands out no work.
func TestFinishedJobIsNotTrainedAgain(t *testing.T) {
	testenv.Long(t, "trains a job to its end, then resumes it")
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Done within seconds: the first evaluation passes the target. (A
	// model driven to divergence can stall first: a dead network sends
	// the same update for every batch, and those are refused as replays.)
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy = 0.5
	})
	g := newStoredGrid(t, db, &spec)
	g.addWorker(1, nil)
	ended := g.waitDone(2 * time.Minute)
	g.close()

	g2 := newStoredGrid(t, db, nil)
	if g2.job != nil {
		t.Fatalf("finished job %s was resumed for training", g2.job.ID)
	}
	var v coordinator.JobView
	if code := g2.getJSON("/api/v1/jobs/"+ended.ID, &v); code != http.StatusOK || v.State != ended.State || v.Reason != ended.Reason {
		t.Fatalf("after restart: %d %s (%s), want %s (%s)", code, v.State, v.Reason, ended.State, ended.Reason)
	}
	rc := g2.joinRaw()
	rc.send(&protocol.Want{N: 1})
	if m, ok := rc.read().(*protocol.Idle); !ok {
		t.Fatalf("a worker asking the finished job for work got %T, want idle", m)
	}
}
