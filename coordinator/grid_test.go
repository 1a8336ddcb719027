package coordinator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

var (
	mnistOnce         sync.Once
	mnistTrain, mnist *dataset.Set
	mnistErr          error
)

// loadMNIST loads the real MNIST files once per test binary.
func loadMNIST(t testing.TB) (train, test *dataset.Set) {
	t.Helper()
	mnistOnce.Do(func() { mnistTrain, mnist, mnistErr = dataset.LoadMNIST("") })
	if mnistErr != nil {
		t.Fatalf("MNIST is a declared dependency and must be found: %v", mnistErr)
	}
	return mnistTrain, mnist
}

// testGrid is a real coordinator on a loopback port with real workers
// over real websockets.
type testGrid struct {
	t         testing.TB
	srv       *coordinator.Server
	http      *httptest.Server
	job       *coordinator.Job
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	workers   []*worker.Worker
	closeOnce sync.Once
	// snapshotBytes counts the snapshot bytes served to workers, for the
	// benchmarks' bytes per example.
	snapshotBytes atomic.Int64
}

func newTestGrid(t testing.TB, spec jobspec.Spec) *testGrid {
	t.Helper()
	return newTestGridWith(t, spec, nil)
}

// newTestGridWith is newTestGrid with edit, if not nil, applied to the
// coordinator's configuration.
func newTestGridWith(t testing.TB, spec jobspec.Spec, edit func(*coordinator.Config)) *testGrid {
	t.Helper()
	train, test := loadMNIST(t)
	cfg := coordinator.Config{Train: train, Test: test, Logf: t.Logf, IdleRetry: 50 * time.Millisecond, AdminToken: testAdminToken}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	job, err := srv.AddJob(spec)
	if err != nil {
		t.Fatal(err)
	}
	g := &testGrid{t: t, srv: srv, job: job}
	g.http = httptest.NewUnstartedServer(countSnapshotBytes(srv.Handler(), &g.snapshotBytes))
	g.http.Config.ConnState = srv.ConnState
	g.http.Start()
	g.ctx, g.cancel = context.WithCancel(context.Background())
	t.Cleanup(g.close)
	return g
}

func newHTTPServer(srv *coordinator.Server) *httptest.Server {
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Config.ConnState = srv.ConnState
	hs.Start()
	return hs
}

// countSnapshotBytes adds the body bytes of every snapshot response to n.
func countSnapshotBytes(h http.Handler, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/snapshots/") {
			w = &countingWriter{ResponseWriter: w, n: n}
		}
		h.ServeHTTP(w, r)
	})
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	k, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(k))
	return k, err
}

// Unwrap lets http.ResponseController reach the server's writer.
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (g *testGrid) close() {
	g.closeOnce.Do(func() {
		g.cancel()
		g.wg.Wait()
		g.srv.Close()
		g.http.Close()
	})
}

func (g *testGrid) wsURL() string { return "ws" + strings.TrimPrefix(g.http.URL, "http") + "/ws" }

// addWorker starts a native worker; wrap, if not nil, wraps its backend.
func (g *testGrid) addWorker(threads int, wrap func(worker.Backend) worker.Backend) *worker.Worker {
	g.t.Helper()
	return g.addWorkerWith(threads, wrap, nil)
}

// addWorkerWith is addWorker with edit, if not nil, changing the worker's
// Config (a volunteer key, a name).
func (g *testGrid) addWorkerWith(threads int, wrap func(worker.Backend) worker.Backend, edit func(*worker.Config)) *worker.Worker {
	g.t.Helper()
	b, err := cpu.New(threads)
	if err != nil {
		g.t.Fatal(err)
	}
	var backend worker.Backend = b
	if wrap != nil {
		backend = wrap(b)
	}
	cfg := worker.Config{
		Coordinator: g.wsURL(), Backend: backend, Client: "test",
		Logf: g.t.Logf, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	}
	if edit != nil {
		edit(&cfg)
	}
	w, err := worker.New(cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	g.workers = append(g.workers, w)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		_ = w.Run(g.ctx)
	}()
	return w
}

// testAdminToken is the test grids' admin token.
const testAdminToken = "test-admin-token-0123456789"

// getJSON fetches an API path into v, as the operator.
func (g *testGrid) getJSON(path string, v any) int {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodGet, g.http.URL+path, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			g.t.Fatalf("GET %s: %v", path, err)
		}
	}
	return resp.StatusCode
}

func (g *testGrid) jobView() coordinator.JobView {
	g.t.Helper()
	var v coordinator.JobView
	if code := g.getJSON("/api/v1/jobs/"+g.job.ID, &v); code != http.StatusOK {
		g.t.Fatalf("GET job: status %d", code)
	}
	return v
}

// waitFor polls cond until it holds or timeout passes.
func (g *testGrid) waitFor(what string, timeout time.Duration, cond func(v coordinator.JobView) bool) coordinator.JobView {
	g.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := g.jobView()
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("timed out after %v waiting for %s; job: state %s, epoch %d, version %d, examples %d, rejections %v, eval %+v",
				timeout, what, v.State, v.Epoch, v.Version, v.ExamplesSeen, v.Rejections, v.Eval)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (g *testGrid) waitDone(timeout time.Duration) coordinator.JobView {
	g.t.Helper()
	return g.waitFor("the job to finish", timeout, func(v coordinator.JobView) bool {
		return v.State != coordinator.StateRunning && v.State != coordinator.StateFinishing
	})
}

func jobSpec(t testing.TB, preset string, edit func(*jobspec.Spec)) jobspec.Spec {
	t.Helper()
	s, err := jobspec.Load(preset)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&s)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

func modelParams(t testing.TB, spec jobspec.Spec) int {
	t.Helper()
	m, err := nn.NewModel(spec.Model)
	if err != nil {
		t.Fatal(err)
	}
	return m.NumParams
}
