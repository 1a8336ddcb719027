package coordinator_test

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// getAs GETs path as worker (its X-Crowdtrain-Worker header; "" sends
// none) and returns the response with its body read.
func (g *testGrid) getAs(worker, path string) (*http.Response, []byte) {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodGet, g.http.URL+path, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	if worker != "" {
		req.Header.Set(coordinator.WorkerHeader, worker)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp, b
}

// A worker that asks for a snapshot the cache evicted is served the
// current one, named in the response; its result from it is accepted at
// that version's staleness, one naming any other version is not. A worker
// that did not say it reads the header, or a request that names no
// worker, gets 410 as before.
func TestEvictedSnapshotServedNewer(t *testing.T) {
	g := newTestGrid(t, deltaJob(t, jobspec.CodecFP32))
	a := g.joinRawHello(func(h *protocol.Hello) { h.SnapshotRebase = true })
	b := g.joinRawHello(nil)
	driver := g.joinRaw()
	n := a.welcome.Job.NumParams
	held := a.leases(2)
	old := b.leases(1)[0]
	if held[0].BaseVersion != 0 || held[1].BaseVersion != 0 || old.BaseVersion != 0 {
		t.Fatalf("bases %d %d %d, want version 0", held[0].BaseVersion, held[1].BaseVersion, old.BaseVersion)
	}
	var last protocol.Lease
	for range 3 {
		last = driver.leases(1)[0]
		driver.send(&protocol.Result{LeaseID: last.ID, JobID: last.JobID, BaseVersion: last.BaseVersion, Codec: protocol.CodecF32,
			Update: smallUpdate(n), Examples: last.Count, LossSum: 1})
		if ack := driver.ack(last.ID); !ack.Accepted {
			t.Fatalf("driver's result rejected: %+v", ack)
		}
	}
	cur := driver.leases(1)[0] // publishes the current version
	coordinator.SetSnapshotCacheBytes(g.job, 1)
	if cur.BaseVersion < 3 {
		t.Fatalf("current version %d, want 3 or more", cur.BaseVersion)
	}
	_, want := g.getAs("", pathOf(t, cur.SnapshotURL))

	for _, c := range []struct {
		name, worker, url string
	}{
		{"a worker that did not say it reads the header", b.welcome.WorkerID, old.SnapshotURL},
		{"a request naming no worker", "", held[0].SnapshotURL},
		{"a worker holding no lease on the version", a.welcome.WorkerID, strings.TrimSuffix(held[0].SnapshotURL, "/0") + "/1"},
	} {
		resp, body := g.getAs(c.worker, pathOf(t, c.url))
		if resp.StatusCode != http.StatusGone {
			t.Errorf("%s: %s, want 410: %s", c.name, resp.Status, body)
		}
	}

	resp, body := g.getAs(a.welcome.WorkerID, pathOf(t, held[0].SnapshotURL))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("evicted version 0 for a worker that reads the header: %s %s", resp.Status, body)
	}
	if got := resp.Header.Get(coordinator.SnapshotVersionHeader); got != strconv.FormatInt(cur.BaseVersion, 10) {
		t.Fatalf("%s: %q, want the current version %d", coordinator.SnapshotVersionHeader, got, cur.BaseVersion)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q on a body that is not its URL's version, want no-store", cc)
	}
	if !bytes.Equal(body, want) || len(body) != 4*n {
		t.Fatalf("served %d bytes, not the current version's %d", len(body), len(want))
	}

	version := g.jobView().Version
	a.send(&protocol.Result{LeaseID: held[0].ID, JobID: held[0].JobID, BaseVersion: cur.BaseVersion, Codec: protocol.CodecF32,
		Update: smallUpdate(n), Examples: held[0].Count, LossSum: 1})
	ack := a.ack(held[0].ID)
	if !ack.Accepted {
		t.Fatalf("result from the version served in place of the lease's rejected: %+v", ack)
	}
	if ack.Staleness != version-cur.BaseVersion {
		t.Errorf("staleness %d, want %d (from the version served, not the lease's 0)", ack.Staleness, version-cur.BaseVersion)
	}
	a.send(&protocol.Result{LeaseID: held[1].ID, JobID: held[1].JobID, BaseVersion: 1, Codec: protocol.CodecF32,
		Update: smallUpdate(n), Examples: held[1].Count, LossSum: 1})
	if ack := a.ack(held[1].ID); ack.Accepted || ack.Reason != protocol.ReasonInvalid {
		t.Errorf("a result naming a version neither leased nor served: %+v, want refused as invalid", ack)
	}

	sc := g.jobView().SnapshotCache
	if sc.Rebased != 1 || sc.RebasedResults != 1 || sc.Evictions == 0 || sc.Versions != 1 || sc.Limit != 1 {
		t.Errorf("snapshot cache view %+v: want 1 rebased and its result, evictions, 1 version, limit 1", sc)
	}
	_, metrics := g.getAs("", "/metrics")
	for _, m := range []string{"crowdtrain_job_snapshot_cache_bytes", "crowdtrain_job_snapshot_cache_evictions_total", "crowdtrain_job_snapshot_rebased_total"} {
		if !bytes.Contains(metrics, []byte(m+`{job="`+g.job.ID+`"}`)) {
			t.Errorf("/metrics has no %s for the job", m)
		}
	}
}

// pathOf is the path of an absolute URL the coordinator handed out.
func pathOf(t *testing.T, u string) string {
	t.Helper()
	i := strings.Index(u, "/api/")
	if i < 0 {
		t.Fatalf("%q is not a coordinator URL", u)
	}
	return u[i:]
}

// With a snapshot cache that holds only the current version, native
// workers whose leases are granted on a version that is gone by the time
// they fetch it are served the current one, and the job still trains to
// its target: no result refused as invalid (a result naming a version it
// was not served), the rebases counted, and the cache never over one
// version. (Named for the training shard of scripts/test-e2e.sh.)
func TestMLPTrainsWithATinySnapshotCache(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.Snapshot = jobspec.SnapshotGranted // the base is fixed long before the fetch
		s.TargetAccuracy = 0.9
	})
	g := newTestGridWith(t, spec, func(c *coordinator.Config) { c.SnapshotCacheBytes = 1 })
	for range 2 {
		g.addWorkerWith(1, nil, func(c *worker.Config) { c.Prefetch = 3 })
	}
	bodyBytes := int64(4 * modelParams(t, spec))
	most := int64(0)
	v := g.waitFor("the job to reach 90% accuracy", 3*time.Minute, func(v coordinator.JobView) bool {
		most = max(most, v.SnapshotCache.Bytes)
		return v.State != coordinator.StateRunning && v.State != coordinator.StateFinishing
	})
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.9 {
		t.Fatalf("job %s (%s), eval %+v: want done at 90%%", v.State, v.Reason, v.Eval)
	}
	sc := v.SnapshotCache
	t.Logf("snapshot cache: %+v; %d updates applied, rejections %v", sc, v.UpdatesApplied, v.Rejections)
	if sc.Rebased == 0 {
		t.Error("no lease was rebased: the test shows nothing")
	}
	if most > bodyBytes {
		t.Errorf("the cache held %d bytes, over the current version's %d", most, bodyBytes)
	}
	if n := v.Rejections[protocol.ReasonInvalid]; n != 0 {
		t.Errorf("%d results refused as invalid", n)
	}
}

// A native worker served the current version in place of its lease's
// evicted one computes from it and names it: its results are accepted, none
// refused as invalid. (The fast tier's check of the worker's side; the
// training to a target is TestMLPTrainsWithATinySnapshotCache.)
func TestWorkerNamesTheVersionServedInPlaceOfAnEvictedOne(t *testing.T) {
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.Snapshot = jobspec.SnapshotGranted
		s.TargetAccuracy = 1
		s.EvalEvery = 1 << 30
	})
	g := newTestGridWith(t, spec, func(c *coordinator.Config) { c.SnapshotCacheBytes = 1 })
	var ws []*worker.Worker
	for range 2 {
		ws = append(ws, g.addWorkerWith(1, nil, func(c *worker.Config) { c.Prefetch = 3 }))
	}
	v := g.waitFor("5 rebased leases and 30 results", 30*time.Second, func(v coordinator.JobView) bool {
		return v.SnapshotCache.RebasedResults >= 5 && v.UpdatesApplied >= 30
	})
	if n := v.Rejections[protocol.ReasonInvalid]; n != 0 {
		t.Errorf("%d results refused as invalid: a worker named a version it was not served", n)
	}
	if v.SnapshotCache.RebasedResults == 0 {
		t.Errorf("snapshot cache %+v: no result named the version served in place of its lease's", v.SnapshotCache)
	}
	// The job counts a result when it applies it; the worker when the
	// acknowledgement arrives, a moment later.
	waitUntil(t, "the workers count 30 accepted results", func() bool {
		accepted := int64(0)
		for _, w := range ws {
			accepted += w.Stats().Accepted
		}
		return accepted >= 30
	})
}

// In an f16 job the evicted version's f16 URL serves the current version's
// f16 body, named in the header, to a worker that reads it.
func TestEvictedF16SnapshotServedNewer(t *testing.T) {
	g := newTestGrid(t, deltaJob(t, jobspec.CodecFP16))
	a := g.joinRawHello(func(h *protocol.Hello) {
		h.SnapshotRebase = true
		h.SnapshotCodecs = []string{protocol.SnapshotF32, protocol.SnapshotF16}
	})
	n := a.welcome.Job.NumParams
	held := a.leases(1)[0]
	if !strings.HasSuffix(held.SnapshotURL, "/f16") {
		t.Fatalf("an f16 worker's lease names %q", held.SnapshotURL)
	}
	var cur protocol.Lease
	for range 3 {
		cur = a.leases(1)[0]
		a.send(&protocol.Result{LeaseID: cur.ID, JobID: cur.JobID, BaseVersion: cur.BaseVersion, Codec: protocol.CodecF32,
			Update: smallUpdate(n), Examples: cur.Count, LossSum: 1})
		if ack := a.ack(cur.ID); !ack.Accepted {
			t.Fatalf("result rejected: %+v", ack)
		}
	}
	cur = a.leases(1)[0]
	coordinator.SetSnapshotCacheBytes(g.job, 1)
	_, want := g.getAs("", pathOf(t, cur.SnapshotURL))
	resp, body := g.getAs(a.welcome.WorkerID, pathOf(t, held.SnapshotURL))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(coordinator.SnapshotVersionHeader) != strconv.FormatInt(cur.BaseVersion, 10) {
		t.Fatalf("evicted f16 version %d: %s, %s %q; want 200 naming %d", held.BaseVersion, resp.Status,
			coordinator.SnapshotVersionHeader, resp.Header.Get(coordinator.SnapshotVersionHeader), cur.BaseVersion)
	}
	if len(body) != 2*n || !bytes.Equal(body, want) {
		t.Fatalf("served %d bytes, not the current version's f16 body of %d", len(body), len(want))
	}
}
