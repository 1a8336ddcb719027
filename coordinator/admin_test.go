package coordinator_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// call sends an API request as the operator (token "" sends none) and
// returns the status and body.
func (g *testGrid) call(method, path, token string, body any, header map[string]string) (int, []byte) {
	g.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			g.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.http.URL+path, rd)
	if err != nil {
		g.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// Every route that changes a job or shows private things answers 401, with
// no detail, to a request without the token or with a wrong one, and
// changes nothing.
func TestAdminRoutesNeedTheToken(t *testing.T) {
	// Every wrong token here would count toward the address's failures
	// (access_test.go tests that limit).
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.AuthFailBurst = 1000 })
	rc := g.joinRaw()
	rc.leases(1)
	id := g.job.ID
	routes := []struct{ method, path string }{
		{http.MethodGet, "/api/v1/session"},
		{http.MethodPost, "/api/v1/jobs"},
		{http.MethodPatch, "/api/v1/jobs/" + id},
		{http.MethodPost, "/api/v1/jobs/" + id + "/pause"},
		{http.MethodPost, "/api/v1/jobs/" + id + "/resume"},
		{http.MethodPost, "/api/v1/jobs/" + id + "/stop"},
		{http.MethodGet, "/api/v1/jobs/" + id + "/checkpoints"},
		{http.MethodGet, "/api/v1/jobs/" + id + "/checkpoints/0/safetensors"},
		{http.MethodGet, "/api/v1/jobs/" + id + "/checkpoints/0/onnx"},
		{http.MethodGet, "/api/v1/jobs/" + id + "/export"},
		{http.MethodGet, "/api/v1/jobs/" + id + "/export?format=onnx"},
		{http.MethodPost, "/api/v1/jobs/" + id + "/sample"},
		{http.MethodGet, "/api/v1/workers"},
		{http.MethodDelete, "/api/v1/workers/" + rc.welcome.WorkerID},
		{http.MethodGet, "/api/v1/events"},
	}
	bodies := map[string]any{http.MethodPost: map[string]string{"preset": "mnist-mlp"}, http.MethodPatch: map[string]int{"max_staleness": 0}}
	for _, r := range routes {
		for _, c := range []struct {
			name   string
			token  string
			header map[string]string
		}{
			{"no token", "", nil},
			{"wrong token", "not-the-token-but-long-enough", nil},
			{"a prefix of the token", testAdminToken[:10], nil},
			{"a forged session cookie", "", map[string]string{"Cookie": "crowdtrain_session=0123456789abcdef"}},
			{"a malformed header", "", map[string]string{"Authorization": testAdminToken}},
		} {
			code, body := g.call(r.method, r.path, c.token, bodies[r.method], c.header)
			if code != http.StatusUnauthorized || strings.TrimSpace(string(body)) != `{"error":"unauthorized"}` {
				t.Errorf("%s %s with %s: %d %s; want 401 and no detail", r.method, r.path, c.name, code, body)
			}
		}
	}
	v := g.jobView()
	if v.State != coordinator.StateRunning || v.MaxStaleness != g.job.Spec.MaxStaleness {
		t.Errorf("refused requests changed the job: %s, max_staleness %d", v.State, v.MaxStaleness)
	}
	if n := len(g.srv.WorkerViews()); n != 1 {
		t.Errorf("%d workers after refused requests, want the 1 still connected", n)
	}
	var jobs []coordinator.JobView
	g.getJSON("/api/v1/jobs", &jobs)
	if len(jobs) != 1 {
		t.Errorf("%d jobs after a refused submit", len(jobs))
	}
	// What stays public: the summary, the contribute protocol's resources.
	for _, path := range []string{"/api/v1/jobs", "/api/v1/jobs/" + id, "/api/v1/jobs/" + id + "/metrics", "/api/v1/presets", "/healthz", "/metrics"} {
		if code, _ := g.call(http.MethodGet, path, "", nil, nil); code != http.StatusOK {
			t.Errorf("public %s: %d", path, code)
		}
	}
}

func TestSignInSessionAndRateLimit(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	login := func(token string) *http.Response {
		b, _ := json.Marshal(map[string]string{"token": token})
		resp, err := http.Post(g.http.URL+"/admin/login", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := login("wrong-token-wrong-token"); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp := login(testAdminToken)
	if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 {
		t.Fatalf("right token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	c := resp.Cookies()[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("session cookie %+v: want HttpOnly and SameSite=Strict", c)
	}
	cookie := map[string]string{"Cookie": c.Name + "=" + c.Value}
	if code, body := g.call(http.MethodGet, "/api/v1/workers", "", nil, cookie); code != http.StatusOK {
		t.Errorf("workers with the session: %d %s", code, body)
	}
	// A cookie-borne change from another origin is refused.
	foreign := map[string]string{"Cookie": cookie["Cookie"], "Origin": "https://evil.example"}
	if code, _ := g.call(http.MethodPost, "/api/v1/jobs/"+g.job.ID+"/pause", "", nil, foreign); code != http.StatusForbidden {
		t.Errorf("pause from a foreign origin with the cookie: %d, want 403", code)
	}
	if g.jobView().State != coordinator.StateRunning {
		t.Fatal("a foreign-origin request paused the job")
	}
	req, _ := http.NewRequest(http.MethodPost, g.http.URL+"/admin/logout", nil)
	req.Header.Set("Cookie", cookie["Cookie"])
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %v %v", resp, err)
	}
	if code, _ := g.call(http.MethodGet, "/api/v1/session", "", nil, cookie); code != http.StatusUnauthorized {
		t.Errorf("the session still works after logout: %d", code)
	}

	// The first wrong sign-in was one of this address's 5 failures: four
	// more, then 429 even for the right token.
	for i := range 4 {
		if resp := login("wrong-token-wrong-token"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d", i+2, resp.StatusCode)
		}
	}
	resp = login(testAdminToken)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the right token after 5 failures: %d, Retry-After %q; want 429 with a wait", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestPauseResumeStop(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	rc := g.joinRaw()
	l := rc.leases(1)[0]
	id := g.job.ID
	control := func(action string, want int) coordinator.JobView {
		t.Helper()
		code, body := g.call(http.MethodPost, "/api/v1/jobs/"+id+"/"+action, testAdminToken, nil, nil)
		if code != want {
			t.Fatalf("%s: %d %s, want %d", action, code, body, want)
		}
		var v coordinator.JobView
		_ = json.Unmarshal(body, &v)
		return v
	}
	v := control("pause", http.StatusOK)
	if v.State != coordinator.StatePaused || v.LeasesHeld != 0 {
		t.Fatalf("after pause: %s with %d leases held; want paused with the leases back in the queue", v.State, v.LeasesHeld)
	}
	control("pause", http.StatusConflict)
	// A result computed before the pause does not move the model.
	rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
		Update: make(protocol.Floats, modelParams(t, g.job.Spec)), Examples: l.Count, LossSum: 1})
	if a := rc.ack(l.ID); a.Accepted {
		t.Fatal("a result was accepted while the job was paused")
	}
	rc.send(&protocol.Want{N: 1})
	if m, ok := rc.read().(*protocol.Idle); !ok {
		t.Fatalf("a paused job answered want with %T, want idle", m)
	}
	if v := g.jobView(); v.Version != 0 {
		t.Fatalf("version %d while paused", v.Version)
	}

	control("resume", http.StatusOK)
	g.waitFor("a lease after resume", 5*time.Second, func(v coordinator.JobView) bool {
		rc.send(&protocol.Want{N: 1})
		return v.LeasesIssued > 1
	})
	v = control("stop", http.StatusOK)
	if v.State != coordinator.StateStopped || !strings.Contains(v.Reason, "stopped by the operator") {
		t.Fatalf("after stop: %s (%s)", v.State, v.Reason)
	}
	control("resume", http.StatusConflict)
	control("stop", http.StatusConflict)
	if code, body := g.call(http.MethodPost, "/api/v1/jobs/nope/pause", testAdminToken, nil, nil); code != http.StatusNotFound {
		t.Errorf("pause an unknown job: %d %s", code, body)
	}
}

// Settings change while the job runs, are recorded in the metrics history
// and are stored with the job, so a resumed job keeps them.
func TestChangeSettingsWhileRunning(t *testing.T) {
	db, err := store.Open(t.TempDir() + "/ct.db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := quietJob(t)
	g := newStoredGrid(t, db, &spec)
	id := g.job.ID
	code, body := g.call(http.MethodPatch, "/api/v1/jobs/"+id, testAdminToken, map[string]any{"max_staleness": 2, "lr": 0.0005}, nil)
	if code != http.StatusOK {
		t.Fatalf("PATCH: %d %s", code, body)
	}
	var v coordinator.JobView
	g.getJSON("/api/v1/jobs/"+id, &v)
	if v.MaxStaleness != 2 || v.LR != 0.0005 || v.Spec.OuterOptimizer.LR != 0.0005 {
		t.Fatalf("after PATCH: max_staleness %d, lr %v (spec %v)", v.MaxStaleness, v.LR, v.Spec.OuterOptimizer.LR)
	}
	for _, bad := range []struct {
		body any
		key  string
	}{
		{map[string]any{"lr": -1}, "lr"},
		{map[string]any{"max_staleness": -3}, "max_staleness"},
		{map[string]any{"learning_rate": 0.1}, "learning_rate"},
		{map[string]any{}, ""},
	} {
		code, body := g.call(http.MethodPatch, "/api/v1/jobs/"+id, testAdminToken, bad.body, nil)
		var e struct{ Error, Key string }
		_ = json.Unmarshal(body, &e)
		if code != http.StatusBadRequest || e.Key != bad.key || e.Error == "" {
			t.Errorf("PATCH %v: %d %s; want 400 naming key %q", bad.body, code, body, bad.key)
		}
	}
	g.waitFor("the settings note in the metrics history", 5*time.Second, func(coordinator.JobView) bool {
		var ms []store.Metric
		g.getJSON("/api/v1/jobs/"+id+"/metrics", &ms)
		for _, m := range ms {
			if strings.Contains(m.Note, "max_staleness 8 -> 2") && strings.Contains(m.Note, "lr 0.001 -> 0.0005") {
				return true
			}
		}
		return false
	})
	rec, err := db.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var stored jobspec.Spec
	if err := json.Unmarshal(rec.Spec, &stored); err != nil || stored.MaxStaleness != 2 || stored.OuterOptimizer.LR != 0.0005 {
		t.Fatalf("stored spec: max_staleness %d, lr %v (%v)", stored.MaxStaleness, stored.OuterOptimizer.LR, err)
	}
}

func TestSubmitJobs(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	code, body := g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, coordinator.SubmitRequest{Preset: "mnist-cnn"}, nil)
	var v coordinator.JobView
	if err := json.Unmarshal(body, &v); code != http.StatusCreated || err != nil || v.State != coordinator.StateRunning || v.Name != "mnist-cnn" {
		t.Fatalf("submit a preset: %d %s", code, body)
	}
	code, body = g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, coordinator.SubmitRequest{Spec: "name: small\nmodel: mnist-mlp\nbatch_size: 32\ntarget_accuracy: 0.9\n"}, nil)
	if code != http.StatusCreated {
		t.Fatalf("submit YAML: %d %s", code, body)
	}
	for _, bad := range []struct {
		req coordinator.SubmitRequest
		key string
	}{
		{coordinator.SubmitRequest{Spec: "name: x\nmodel: mnist-mlp\nbatch_size: 0\n"}, "batch_size"},
		{coordinator.SubmitRequest{Spec: "name: x\nmodel: mnist-mlp\nbatchsize: 64\n"}, "batchsize"},
		{coordinator.SubmitRequest{Spec: "name: [unclosed\n"}, ""},
		{coordinator.SubmitRequest{Preset: "mnist-huge"}, "preset"},
	} {
		code, body := g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, bad.req, nil)
		var e struct{ Error, Key string }
		_ = json.Unmarshal(body, &e)
		if code != http.StatusBadRequest || e.Key != bad.key || e.Error == "" {
			t.Errorf("submit %+v: %d %s; want 400 naming key %q", bad.req, code, body, bad.key)
		}
	}
	var jobs []coordinator.JobView
	g.getJSON("/api/v1/jobs", &jobs)
	if len(jobs) != 3 {
		t.Errorf("%d jobs, want the first and the two good submissions", len(jobs))
	}
}

func TestMetricsEventsAndDownloads(t *testing.T) {
	db, err := store.Open(t.TempDir() + "/ct.db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) { s.TargetAccuracy = 1; s.EvalEvery = 20 })
	g := newStoredGrid(t, db, &spec)
	id := g.job.ID

	// The live stream opens with the jobs and workers.
	req, _ := http.NewRequest(http.MethodGet, g.http.URL+"/api/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events Content-Type %q", ct)
	}
	events := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				events <- ev
			}
		}
		close(events)
	}()
	g.addWorker(1, nil)
	seen := map[string]bool{}
	deadline := time.After(30 * time.Second)
	for !(seen["jobs"] && seen["workers"] && seen["metric"]) {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the event stream ended; saw %v", seen)
			}
			seen[ev] = true
		case <-deadline:
			t.Fatalf("events seen in 30 s: %v; want jobs, workers and an evaluation's metric", seen)
		}
	}
	cancel()

	v := g.waitFor("updates, an evaluation, a checkpoint and a measured rate", 30*time.Second, func(v coordinator.JobView) bool {
		return v.UpdatesApplied >= 30 && v.Eval != nil && v.LastCheckpoint != nil && v.LastCheckpoint.Version > 0 && v.ExamplesPerSec > 0
	})
	code, body := g.call(http.MethodGet, "/metrics", "", nil, nil)
	text := string(body)
	for _, want := range []string{
		`crowdtrain_updates_applied_total{job="` + id + `"}`,
		`crowdtrain_updates_rejected_total{job="` + id + `",reason="stale"}`,
		`crowdtrain_staleness_bucket{job="` + id + `",le="0"}`,
		`crowdtrain_examples_processed_total{job="` + id + `"}`,
		`crowdtrain_workers{kind="native"} 1`,
		`crowdtrain_eval_accuracy{job="` + id + `"}`,
		`crowdtrain_checkpoint_duration_seconds_count`,
	} {
		if code != http.StatusOK || !strings.Contains(text, want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	if v.ExamplesPerSec <= 0 || v.UpdatesPerSec <= 0 || len(v.StalenessHistogram) == 0 {
		t.Errorf("job view: %v examples/s, %v updates/s, histogram %v", v.ExamplesPerSec, v.UpdatesPerSec, v.StalenessHistogram)
	}
	var workers []coordinator.WorkerView
	g.getJSON("/api/v1/workers", &workers)
	if len(workers) != 1 || workers[0].Kind != protocol.KindNative {
		t.Fatalf("workers: %+v", workers)
	}

	// Downloads: a checkpoint and the live model, as safetensors. Paused,
	// the job takes no new checkpoints, so the listed ones stay.
	code, body = g.call(http.MethodPost, "/api/v1/jobs/"+id+"/pause", testAdminToken, nil, nil)
	var paused coordinator.JobView
	if err := json.Unmarshal(body, &paused); code != http.StatusOK || err != nil {
		t.Fatalf("pause: %d %s", code, body)
	}
	// Pausing writes a checkpoint; once it is listed, the kept set stays.
	var cks []store.CheckpointInfo
	g.waitFor("the pause's checkpoint", 10*time.Second, func(coordinator.JobView) bool {
		return g.getJSON("/api/v1/jobs/"+id+"/checkpoints", &cks) == http.StatusOK && len(cks) > 0 && cks[0].Version == paused.Version
	})
	ckpt := cks[len(cks)-1].Version // the oldest kept
	for _, path := range []string{
		"/api/v1/jobs/" + id + "/checkpoints/" + strconv.FormatInt(ckpt, 10) + "/safetensors",
		"/api/v1/jobs/" + id + "/export",
	} {
		code, body := g.call(http.MethodGet, path, testAdminToken, nil, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		tensors, meta, err := nn.ReadSafetensors(body)
		if err != nil || len(tensors) != 6 || meta["crowdtrain.job"] != id {
			t.Fatalf("GET %s: %d tensors, meta %v, %v", path, len(tensors), meta, err)
		}
	}
	// The same as ONNX models: the network with the same parameters (their
	// values are checked by nn/onnx's tests, the model by ONNX Runtime there).
	for _, path := range []string{
		"/api/v1/jobs/" + id + "/checkpoints/" + strconv.FormatInt(ckpt, 10) + "/onnx",
		"/api/v1/jobs/" + id + "/export?format=onnx",
	} {
		code, body := g.call(http.MethodGet, path, testAdminToken, nil, nil)
		// A ModelProto opens with ir_version (field 1, a varint): 8.
		if code != http.StatusOK || len(body) < 2 || body[0] != 0x08 || body[1] != 0x08 ||
			!bytes.Contains(body, []byte("0.dense.weight")) || !bytes.Contains(body, []byte(id)) {
			t.Fatalf("GET %s: %d, %d bytes starting %x; want an ONNX model of the job", path, code, len(body), body[:min(8, len(body))])
		}
	}
	if code, body := g.call(http.MethodGet, "/api/v1/jobs/"+id+"/export?format=tflite", testAdminToken, nil, nil); code != http.StatusBadRequest || !strings.Contains(string(body), "want safetensors or onnx") {
		t.Errorf("export?format=tflite: %d %s, want 400 naming the formats", code, body)
	}
	if code, _ := g.call(http.MethodGet, "/api/v1/jobs/"+id+"/checkpoints/999999/safetensors", testAdminToken, nil, nil); code != http.StatusNotFound {
		t.Errorf("a checkpoint that does not exist: %d, want 404", code)
	}

	// Disconnecting a worker closes its connection; it reconnects by itself.
	first := workers[0].ID
	if code, body := g.call(http.MethodDelete, "/api/v1/workers/"+first, testAdminToken, nil, nil); code != http.StatusNoContent {
		t.Fatalf("DELETE worker: %d %s", code, body)
	}
	g.waitFor("the worker to be replaced by its reconnection", 15*time.Second, func(coordinator.JobView) bool {
		ws := g.srv.WorkerViews()
		return len(ws) == 1 && ws[0].ID != first
	})
	if code, _ := g.call(http.MethodDelete, "/api/v1/workers/nope", testAdminToken, nil, nil); code != http.StatusNotFound {
		t.Errorf("DELETE an unknown worker: %d", code)
	}
}
