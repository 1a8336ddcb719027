package coordinator_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/internal/testlink"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// steadyBackend takes at least step for each batch: a device whose speed
// does not depend on how busy the test machine is, so that the time on
// the wire is what the test varies.
type steadyBackend struct {
	worker.Backend
	step time.Duration
}

func (b steadyBackend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	time.Sleep(b.step)
	return b.Backend.Gradient(params, x, labels, grad)
}

// workerView finds worker id in GET /api/v1/workers.
func (g *testGrid) workerView(id string) (coordinator.WorkerView, bool) {
	g.t.Helper()
	var views []coordinator.WorkerView
	if code := g.getJSON("/api/v1/workers", &views); code != http.StatusOK {
		g.t.Fatalf("GET /api/v1/workers: status %d", code)
	}
	for _, v := range views {
		if v.ID == id {
			return v, true
		}
	}
	return coordinator.WorkerView{}, false
}

// A worker behind a slow uplink (2 Mbit/s up, 40 ms of round trip) and
// one on loopback train an asynchronous job with dynamic local steps. The
// loopback worker is far faster, so speed alone would give the slow one
// few steps, and its updates' upload would take most of its time: the
// comm rule raises its H until the share of its time on the wire, as the
// coordinator shows it from the worker's own reports, is under
// max_comm_fraction. The API shows what it measured of the link too.
func TestSlowUplinkRaisesLocalSteps(t *testing.T) {
	testenv.Long(t, "trains for up to a minute over a simulated link")
	const maxComm = 0.1
	// A one-layer model: 7850 parameters, 31 KB an update or snapshot,
	// enough to measure a link with.
	spec, err := jobspec.Parse([]byte(`name: link
model: [{type: dense, units: 10}]
batch_size: 8
dynamic_local_steps: true
local_steps: 2
min_local_steps: 1
max_local_steps: 300
max_update_norm_ratio: 0
max_comm_fraction: 0.1
max_epochs: 1000
eval_every: 100000000
`))
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGrid(t, spec)
	link := testlink.Start(t, strings.TrimPrefix(g.http.URL, "http://"), testlink.Profile{
		DownBps: 50e6, UpBps: 2e6, RTT: 40 * time.Millisecond, Jitter: 2 * time.Millisecond})
	// 10 ms a step: the 31 KB upload, about 130 ms at 2 Mbit/s, plus the
	// snapshot's download, is worth tens of steps.
	slow := g.addWorkerWith(1, func(b worker.Backend) worker.Backend {
		return steadyBackend{Backend: b, step: 10 * time.Millisecond}
	}, func(c *worker.Config) { c.Coordinator = "ws://" + link.Addr + "/ws" })
	g.addWorker(1, nil)

	var id string
	var first, last coordinator.WorkerView
	deadline := time.Now().Add(50 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		if id == "" {
			id = slow.Stats().WorkerID
			continue
		}
		v, ok := g.workerView(id)
		if !ok {
			continue
		}
		if first.Accepted == 0 && v.Accepted > 0 {
			first = v
		}
		last = v
		if v.Accepted >= 3 && v.LocalSteps >= 20 && v.CommFraction > 0 && v.CommFraction < maxComm {
			break
		}
	}
	t.Logf("slow worker: first result at H %d with %.2f of its time on the wire; now H %d, %.3f, %d results; link %+v; %d bytes in, %d out",
		first.LocalSteps, first.CommFraction, last.LocalSteps, last.CommFraction, last.Accepted, last.Link, last.BytesIn, last.BytesOut)
	if first.Accepted == 0 {
		t.Fatal("the slow worker never had a result accepted")
	}
	if first.CommFraction < 2*maxComm {
		t.Fatalf("at its first result the slow worker spent only %.2f of its time on the wire: the test's link is not slow enough to show anything", first.CommFraction)
	}
	if last.LocalSteps <= first.LocalSteps || last.LocalSteps < 20 {
		t.Fatalf("the slow worker's H went from %d to %d: the comm rule did not raise it", first.LocalSteps, last.LocalSteps)
	}
	if !(last.CommFraction > 0 && last.CommFraction < maxComm) {
		t.Fatalf("the slow worker spends %.3f of its time on the wire at H %d, want under max_comm_fraction %g", last.CommFraction, last.LocalSteps, maxComm)
	}
	// Its own measurements, as the coordinator shows them: a link far
	// slower than loopback's, and a round trip of at least the simulated
	// 40 ms. recv_ms counts from a frame's first bytes, and toxiproxy
	// holds back the first 100 ms of a chunk before any of it arrives:
	// a 31 KB update at 2 Mbit/s shows as about 10 Mbit/s.
	if l := last.Link; l.UpBps < 1e6 || l.UpBps > 30e6 || l.DownBps < 1e6 || l.DownBps > 60e6 || l.RttMs < 35 {
		t.Fatalf("link estimate %+v, want up and down between 1 and a few tens of Mbit/s (the simulated link's), rtt_ms >= 35", l)
	}
	if last.BytesIn < int64(last.Accepted)*31000 || last.BytesOut < int64(last.Accepted)*31000 {
		t.Fatalf("%d results but %d bytes in and %d out: a 31 KB update goes up and a snapshot comes down for each", last.Accepted, last.BytesIn, last.BytesOut)
	}
	v := g.jobView()
	if v.BytesIn <= 0 || v.BytesOut <= 0 || v.ShardBytesOut <= 0 || v.BytesPerExample <= 0 || v.Compression < 0.95 || v.Compression > 4 {
		// fp32 updates travel as they are; snapshots come as deltas where
		// the worker holds an older one, which only ever saves bytes.
		t.Fatalf("job wire: bytes_in %d, bytes_out %d, shard_bytes_out %d, bytes/example %g, compression %g; want all counted, compression from 1 (fp32 updates, full snapshots) to a few (deltas)",
			v.BytesIn, v.BytesOut, v.ShardBytesOut, v.BytesPerExample, v.Compression)
	}
}

// A worker reporting an absurd link (zero, negative, enormous) is clamped
// into range, and the clamp is logged once for it with what it sent.
func TestAbsurdLinkEstimatesAreClamped(t *testing.T) {
	rec := &logRecorder{t: t}
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.Logf = rec.Logf })
	rc := g.joinRaw()
	for i, l := range []protocol.Link{
		{DownBps: 0, UpBps: -5, RttMs: 1e300},
		{DownBps: 1e300, UpBps: 0, RttMs: -5},
	} {
		lease := rc.leases(1)[0]
		rc.send(&protocol.Result{LeaseID: lease.ID, JobID: lease.JobID, BaseVersion: lease.BaseVersion, Codec: protocol.CodecF32,
			Update: constUpdate(rc.welcome.Job.NumParams, 0.001), Examples: lease.Count, ComputeMs: 10, CommMs: 5, Link: &l})
		ack := rc.ack(lease.ID)
		if ack.RecvMs < 0 {
			t.Fatalf("ack recv_ms %v", ack.RecvMs)
		}
		v, ok := g.workerView(rc.welcome.WorkerID)
		if !ok {
			t.Fatal("the raw worker is not listed")
		}
		want := coordinator.LinkView{DownBps: 1e3, UpBps: 1e3, RttMs: 60000}
		if i == 1 {
			want = coordinator.LinkView{DownBps: 1e11, UpBps: 1e3, RttMs: 0}
		}
		if v.Link != want {
			t.Fatalf("report %d: link %+v, want clamped to %+v", i, v.Link, want)
		}
		if v.CommFraction <= 0 || v.CommFraction >= 1 {
			t.Fatalf("comm_fraction %v from comm 5 ms, compute 10 ms", v.CommFraction)
		}
	}
	// Everything it sent counts, its hello and two full updates included.
	if v, _ := g.workerView(rc.welcome.WorkerID); v.BytesIn < 2*4*int64(rc.welcome.Job.NumParams) || v.LocalSteps != 1 {
		t.Fatalf("bytes_in %d after two updates of %d parameters, local_steps %d (want 1)", v.BytesIn, rc.welcome.Job.NumParams, v.LocalSteps)
	}
	logs := rec.text()
	if n := strings.Count(logs, "link estimate clamped"); n != 1 {
		t.Fatalf("%d clamp lines, want one for the worker:\n%s", n, logs)
	}
	if !strings.Contains(logs, "down_bps 0, up_bps -5, rtt_ms 1e+300") {
		t.Fatalf("the clamp line does not say what was received:\n%s", logs)
	}
}

// Bulk bytes count for the worker the X-Crowdtrain-Worker header names
// only when that worker is connected from the request's address; the job
// counts them either way.
func TestBulkBytesCountForTheNamedWorker(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.TrustedProxies = []string{"127.0.0.1"} })
	rc := g.joinRaw()
	lease := rc.leases(1)[0]
	get := func(path, id, from string) int {
		req, err := http.NewRequest(http.MethodGet, g.http.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if id != "" {
			req.Header.Set(coordinator.WorkerHeader, id)
		}
		if from != "" {
			req.Header.Set("X-Forwarded-For", from)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return len(b)
	}
	before, _ := g.workerView(rc.welcome.WorkerID)
	job0 := g.jobView()
	snap := get(lease.SnapshotURL, rc.welcome.WorkerID, "")
	shard := get(lease.ShardURL, rc.welcome.WorkerID, "")
	get(lease.SnapshotURL, "w-nobody", "")                   // no such worker
	get(lease.SnapshotURL, "", "")                           // none named
	get(lease.SnapshotURL, rc.welcome.WorkerID, "192.0.2.7") // named from elsewhere
	after, _ := g.workerView(rc.welcome.WorkerID)
	// Between the two views only the two GETs named it from its address
	// (the raw client sends nothing, and nothing is sent to it).
	if got := after.BytesOut - before.BytesOut; got != int64(snap+shard) {
		t.Fatalf("worker bytes_out grew by %d for a %d-byte snapshot and a %d-byte shard", got, snap, shard)
	}
	job := g.jobView()
	if got := job.BytesOut - job0.BytesOut; got != int64(4*snap) {
		t.Fatalf("job bytes_out grew by %d for 4 snapshots of %d", got, snap)
	}
	if got := job.ShardBytesOut - job0.ShardBytesOut; got != int64(shard) {
		t.Fatalf("job shard_bytes_out grew by %d for a shard of %d", got, shard)
	}
	if job.Compression < 0.99 || job.Compression > 1.0001 || job.SnapshotCompression < 0.99 || job.SnapshotCompression > 1.0001 {
		t.Fatalf("compression %v, snapshots' %v serving fp32 snapshots, want 1", job.Compression, job.SnapshotCompression)
	}
	// Prometheus gets the same counters.
	code, body := g.call(http.MethodGet, "/metrics", "", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		fmt.Sprintf(`crowdtrain_job_bytes_out_total{job=%q} %g`, g.job.ID, float64(job.BytesOut)),
		fmt.Sprintf(`crowdtrain_job_shard_bytes_out_total{job=%q} %g`, g.job.ID, float64(job.ShardBytesOut)),
		`crowdtrain_job_compression{job="` + g.job.ID + `"}`,
		`crowdtrain_job_update_compression{job="` + g.job.ID + `"}`,
		`crowdtrain_job_snapshot_compression{job="` + g.job.ID + `"}`,
		`crowdtrain_job_bytes_per_example{job="` + g.job.ID + `"}`,
		`crowdtrain_job_bytes_in_total{job="` + g.job.ID + `"}`,
		fmt.Sprintf(`crowdtrain_worker_bytes_out_total{worker=%q}`, rc.welcome.WorkerID),
		fmt.Sprintf(`crowdtrain_worker_bytes_in_total{worker=%q}`, rc.welcome.WorkerID),
		fmt.Sprintf(`crowdtrain_worker_link_up_bps{worker=%q}`, rc.welcome.WorkerID),
		fmt.Sprintf(`crowdtrain_worker_local_steps{worker=%q} 1`, rc.welcome.WorkerID),
		fmt.Sprintf(`crowdtrain_worker_comm_fraction{worker=%q}`, rc.welcome.WorkerID),
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
