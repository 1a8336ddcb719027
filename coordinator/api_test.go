package coordinator_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// The API's field names are an interface other tools rely on.
func TestAPIFields(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	rc := g.joinRaw()
	rc.leases(1)

	if code := g.getJSON("/healthz", nil); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}
	var jobs []map[string]any
	if code := g.getJSON("/api/v1/jobs", &jobs); code != http.StatusOK || len(jobs) != 1 {
		t.Fatalf("jobs: status %d, %d jobs", code, len(jobs))
	}
	for _, k := range []string{"id", "name", "state", "version", "epoch", "examples_seen", "updates_applied",
		"updates_rejected", "rejections", "workers", "max_staleness", "eval"} {
		if _, ok := jobs[0][k]; !ok {
			t.Errorf("job has no %q: %v", k, jobs[0])
		}
	}
	rej, _ := jobs[0]["rejections"].(map[string]any)
	for _, k := range []string{"stale", "invalid"} {
		if _, ok := rej[k]; !ok {
			t.Errorf("rejections has no %q: %v", k, rej)
		}
	}
	if jobs[0]["state"] != "running" || jobs[0]["workers"] != 1.0 {
		t.Errorf("state %v workers %v, want running with 1 worker", jobs[0]["state"], jobs[0]["workers"])
	}
	var one map[string]any
	if code := g.getJSON("/api/v1/jobs/"+g.job.ID, &one); code != http.StatusOK || one["id"] != g.job.ID {
		t.Fatalf("job by id: %d %v", code, one["id"])
	}
	if code := g.getJSON("/api/v1/jobs/nope", nil); code != http.StatusNotFound {
		t.Errorf("unknown job: status %d, want 404", code)
	}
	var workers []map[string]any
	if code := g.getJSON("/api/v1/workers", &workers); code != http.StatusOK || len(workers) != 1 {
		t.Fatalf("workers: status %d, %d workers", code, len(workers))
	}
	for _, k := range []string{"id", "kind", "backend", "examples", "accepted", "rejected", "connected_at", "last_seen"} {
		if _, ok := workers[0][k]; !ok {
			t.Errorf("worker has no %q: %v", k, workers[0])
		}
	}
	if workers[0]["kind"] != "native" || workers[0]["backend"] != "raw" {
		t.Errorf("worker kind/backend %v/%v", workers[0]["kind"], workers[0]["backend"])
	}
}

// Snapshots and shards are immutable resources a cache may keep.
func TestSnapshotsAndShardsAreImmutable(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	rc := g.joinRaw()
	l := rc.leases(1)[0]
	for _, path := range []string{l.SnapshotURL, l.ShardURL} {
		resp, err := http.Get(g.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		etag := resp.Header.Get("ETag")
		if resp.StatusCode != http.StatusOK || etag == "" || resp.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" {
			t.Fatalf("GET %s: %s, ETag %q, Cache-Control %q", path, resp.Status, etag, resp.Header.Get("Cache-Control"))
		}
		req, _ := http.NewRequest(http.MethodGet, g.http.URL+path, nil)
		req.Header.Set("If-None-Match", etag)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %s, want 304", path, resp.Status)
		}
	}
	if code := g.getJSON("/api/v1/jobs/"+g.job.ID+"/snapshots/1/12345", nil); code != http.StatusGone {
		t.Errorf("unpublished snapshot: %d, want 410", code)
	}
	if code := g.getJSON("/api/v1/jobs/"+g.job.ID+"/shards/v2/100000", nil); code != http.StatusNotFound {
		t.Errorf("unknown shard: %d, want 404", code)
	}
	// A shard URL of format 1 (a worker or cache from before format 2)
	// never gets format 2's bytes: it is gone, and the answer says why.
	for _, old := range []string{"/shards/0", "/shards/v1/0", "/shards/v3/0"} {
		resp, err := http.Get(g.http.URL + "/api/v1/jobs/" + g.job.ID + old)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusGone || !strings.Contains(string(body), "serves format 2") || !strings.Contains(string(body), "update the worker") {
			t.Errorf("GET %s: %s %s; want 410 naming format 2", old, resp.Status, body)
		}
	}
}

// A worker outlives its coordinator: when the coordinator comes back on
// the same address, the worker reconnects by itself and works again.
func TestWorkerReconnectsWhenCoordinatorRestarts(t *testing.T) {
	train, test := loadMNIST(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	start := func(ln net.Listener) (*coordinator.Server, *http.Server) {
		srv, err := coordinator.New(coordinator.Config{Train: train, Test: test, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.AddJob(quietJob(t)); err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{Handler: srv.Handler()}
		go hs.Serve(ln)
		return srv, hs
	}
	stopServer := func(srv *coordinator.Server, hs *http.Server) {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}
	srv1, hs1 := start(ln)

	b, _ := cpu.New(1)
	w, err := worker.New(worker.Config{Coordinator: "ws://" + addr + "/ws", Backend: b, Logf: t.Logf,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	waitStats := func(what string, cond func(worker.Stats) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond(w.Stats()) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, w.Stats())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitStats("the first results", func(s worker.Stats) bool { return s.Accepted >= 3 })
	first := w.Stats()
	stopServer(srv1, hs1)
	waitStats("the worker to notice", func(s worker.Stats) bool { return !s.Connected })

	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again to restart: %v", addr, err)
	}
	srv2, hs2 := start(ln2)
	defer stopServer(srv2, hs2)
	waitStats("results on the restarted coordinator", func(s worker.Stats) bool {
		return s.Connects >= 2 && s.Accepted >= first.Accepted+3
	})
	if s := w.Stats(); s.JobID == first.JobID {
		t.Errorf("worker still on the old job %s", s.JobID)
	}
}

// Snapshots live only within the job's snapshot cache, so memory stays
// bounded in bytes even with a huge max_staleness: past the bound the
// oldest go, the current version stays.
func TestSnapshotsArePrunedPastTheCacheBound(t *testing.T) {
	g := newTestGrid(t, jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy = 1
		s.EvalEvery = 1 << 30
		s.MaxStaleness = 1 << 20
	}))
	rc := g.joinRaw()
	coordinator.SetSnapshotCacheBytes(g.job, int64(2*4*rc.welcome.Job.NumParams)) // two versions
	var first protocol.Lease
	for i := range 5 {
		l := rc.leases(1)[0]
		if i == 0 {
			first = l
		}
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: smallUpdate(rc.welcome.Job.NumParams), Examples: l.Count, LossSum: 1})
		if a := rc.ack(l.ID); !a.Accepted {
			t.Fatalf("result %d rejected: %+v", i, a)
		}
	}
	held := rc.leases(1)[0] // publishes version 5: versions 4 and 5 stay
	if code := g.getJSON(first.SnapshotURL, nil); code != http.StatusGone {
		t.Errorf("snapshot of version %d, past the cache's bound: status %d, want 410", first.BaseVersion, code)
	}
	if code := g.getJSON(held.SnapshotURL, nil); code != http.StatusOK {
		t.Errorf("snapshot of the current version: status %d, want 200", code)
	}
	if sc := g.jobView().SnapshotCache; sc.Versions != 2 || sc.Bytes > sc.Limit {
		t.Errorf("snapshot cache %+v: want two versions within the bound", sc)
	}
}
