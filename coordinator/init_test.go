package coordinator_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/store"
)

// A job's `init` key (docs/JOBS.md): version 0 is an exported model's
// parameters or another job's, submitted over the API.

// liveTensors is job id's parameters now, through the operator's export.
func (g *testGrid) liveTensors(id string) []nn.SafetensorsTensor {
	g.t.Helper()
	code, body := g.call(http.MethodGet, "/api/v1/jobs/"+id+"/export", testAdminToken, nil, nil)
	if code != http.StatusOK {
		g.t.Fatalf("GET export of %s: %d %s", id, code, body)
	}
	ts, _, err := nn.ReadSafetensors(body)
	if err != nil {
		g.t.Fatal(err)
	}
	return ts
}

// submit posts a spec and returns the status, the job's view (on 201)
// and the error's key and text (on 400).
func (g *testGrid) submit(spec string) (code int, v coordinator.JobView, key, msg string) {
	g.t.Helper()
	code, body := g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, map[string]string{"spec": spec}, nil)
	if code == http.StatusCreated {
		if err := json.Unmarshal(body, &v); err != nil {
			g.t.Fatal(err)
		}
		return code, v, "", ""
	}
	var e struct{ Key, Error string }
	_ = json.Unmarshal(body, &e)
	return code, v, e.Key, e.Error
}

// exportSaved exports job id's latest checkpoint from db once it is at
// least version min (the store is written off the job's loop).
func exportSaved(t *testing.T, db *store.Store, id string, min int64) ([]byte, coordinator.ExportInfo) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var b bytes.Buffer
		info, err := coordinator.Export(context.Background(), db, id, -1, coordinator.FormatSafetensors, &b)
		if err == nil && info.Version >= min {
			return b.Bytes(), info
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s has no checkpoint of version %d or later after 20 s: %v (got %d)", id, min, err, info.Version)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sameBits fails t unless got holds exactly want's tensors, bit for bit.
func sameBits(t *testing.T, what string, got, want []nn.SafetensorsTensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tensors, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || len(g.Data) != len(w.Data) {
			t.Fatalf("%s: tensor %d is %s of %d values, want %s of %d", what, i, g.Name, len(g.Data), w.Name, len(w.Data))
		}
		for k := range w.Data {
			if math.Float32bits(g.Data[k]) != math.Float32bits(w.Data[k]) {
				t.Fatalf("%s: %s[%d] = %v, want %v", what, w.Name, k, g.Data[k], w.Data[k])
			}
		}
	}
}

// initSpec is a quiet mnist-mlp job (no evaluation but the one at
// version 0, a target it does not reach) of seed 7, starting from init.
func initSpec(name, init string) string {
	return fmt.Sprintf(`{"name": %q, "model": "mnist-mlp", "seed": 7, "target_accuracy": 1, "eval_every": 1073741824, "init": %s}`, name, init)
}

// An exported checkpoint and a job's id both start a job at exactly
// those parameters (its own seed's are others), which it saves as its
// version 0 and evaluates first; its spec records where they came from.
func TestInitStartsAJobFromAnExportOrAJob(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	root := t.TempDir()
	spec := quietJob(t)
	g := newStoredGridWith(t, db, &spec, func(c *coordinator.Config) { c.DataRoot = root })
	src := g.job.ID
	file, _ := exportSaved(t, db, src, 0)
	want, _, err := nn.ReadSafetensors(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "src.safetensors"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	realRoot, _ := filepath.EvalSymlinks(root)
	sum := sha256.Sum256(file)

	for _, c := range []struct {
		form, init string
		want       jobspec.Spec
	}{
		{"file", `"src.safetensors"`, jobspec.Spec{Init: &jobspec.Init{File: filepath.Join(realRoot, "src.safetensors"), SHA256: hex.EncodeToString(sum[:])}}},
		{"job", fmt.Sprintf(`{"job": %q}`, src), jobspec.Spec{Init: &jobspec.Init{Job: src, Version: 0}}},
		{"pinned-file", fmt.Sprintf(`{"file": "src.safetensors", "sha256": "%x"}`, sum), jobspec.Spec{Init: &jobspec.Init{File: filepath.Join(realRoot, "src.safetensors"), SHA256: hex.EncodeToString(sum[:])}}},
	} {
		t.Run(c.form, func(t *testing.T) {
			code, v, key, msg := g.submit(initSpec("from-"+c.form, c.init))
			if code != http.StatusCreated {
				t.Fatalf("submit with init %s: %d, %s: %s", c.init, code, key, msg)
			}
			if got := v.Spec.Init; got == nil || *got != *c.want.Init {
				t.Errorf("the job's view records init %+v, want %+v", got, c.want.Init)
			}
			sameBits(t, "the new job's parameters", g.liveTensors(v.ID), want)
			saved, info := exportSaved(t, db, v.ID, 0)
			if info.Version != 0 {
				t.Fatalf("the new job's first checkpoint is version %d", info.Version)
			}
			got, meta, err := nn.ReadSafetensors(saved)
			if err != nil {
				t.Fatal(err)
			}
			sameBits(t, "the new job's saved version 0", got, want)
			var stored jobspec.Spec
			if err := json.Unmarshal([]byte(meta["crowdtrain.spec"]), &stored); err != nil || stored.Init == nil || *stored.Init != *c.want.Init {
				t.Errorf("the stored spec records init %+v (%v), want %+v", stored.Init, err, c.want.Init)
			}
			var ev coordinator.JobView
			deadline := time.Now().Add(20 * time.Second)
			for g.getJSON("/api/v1/jobs/"+v.ID, &ev); ev.Eval == nil && time.Now().Before(deadline); g.getJSON("/api/v1/jobs/"+v.ID, &ev) {
				time.Sleep(20 * time.Millisecond)
			}
			if ev.Eval == nil || ev.Eval.Version != 0 {
				t.Errorf("the job started from init has evaluation %+v, want one of version 0", ev.Eval)
			}
		})
	}
}

// Parameters that do not fit the submitted model, an unknown job, or a
// file that is missing or outside the data root are a 400 naming the key
// and what is wrong (for a tensor: its name and both shapes), and add no
// job.
func TestInitThatDoesNotFitIsRefusedAtSubmission(t *testing.T) {
	root := t.TempDir()
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.DataRoot = root })
	src := g.job.ID
	code, file := g.call(http.MethodGet, "/api/v1/jobs/"+src+"/export", testAdminToken, nil, nil)
	if code != http.StatusOK {
		t.Fatalf("export: %d", code)
	}
	if err := os.WriteFile(filepath.Join(root, "mlp.safetensors"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	narrow := func(init string) string {
		return fmt.Sprintf(`{"name": "narrow", "target_accuracy": 1, "init": %s,
			"model": [{"type": "dense", "units": 64}, {"type": "relu"}, {"type": "dense", "units": 10}]}`, init)
	}
	mismatch := []string{`tensor "0.dense.weight" has shape [256 784], want [64 784]`, `extra tensor "4.dense.weight"`}
	for _, c := range []struct {
		spec string
		key  string
		want []string
	}{
		{narrow(`"mlp.safetensors"`), "init", append([]string{"mlp.safetensors"}, mismatch...)},
		{narrow(fmt.Sprintf(`{"job": %q}`, src)), "init.job", append([]string{src}, mismatch...)},
		{initSpec("ghost", `{"job": "nope"}`), "init.job", []string{`no job "nope"`, src}},
		{initSpec("missing", `"none.safetensors"`), "init", []string{"none.safetensors", "does not exist"}},
		{initSpec("outside", `"../x.safetensors"`), "init", []string{"outside the coordinator's data root"}},
		{initSpec("both", `{"job": "x", "file": "mlp.safetensors"}`), "init", []string{"not both"}},
		{initSpec("pinned", `{"file": "mlp.safetensors", "sha256": "`+strings.Repeat("0", 64)+`"}`), "init.sha256", []string{"mlp.safetensors", "another file"}},
		{initSpec("empty", `""`), "init", []string{"safetensors file"}},
	} {
		code, _, key, msg := g.submit(c.spec)
		if code != http.StatusBadRequest || key != c.key {
			t.Errorf("%s: %d, key %q: %s; want 400 for key %s", c.spec, code, key, msg, c.key)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", c.spec, msg, w)
			}
		}
	}
	var jobs []coordinator.JobView
	if g.getJSON("/api/v1/jobs", &jobs); len(jobs) != 1 {
		t.Errorf("%d jobs after refused submits, want 1", len(jobs))
	}
}

// The acceptance test of init: a job started from a trained model, as an
// exported file or by the job's id, scores at its first evaluation what
// its source scored at its last, on the same validation set.
func TestMLPStartedFromInitMatchesItsSourcesLoss(t *testing.T) {
	testenv.Long(t, "trains mnist-mlp to 80% accuracy first")
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	root := t.TempDir()
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) { s.Name, s.TargetAccuracy, s.EvalEvery = "source", 0.8, 50 })
	g := newStoredGridWith(t, db, &spec, func(c *coordinator.Config) { c.DataRoot = root })
	for range 2 {
		g.addWorker(1, nil)
	}
	done := g.waitDone(3 * time.Minute)
	if done.State != coordinator.StateDone || done.Eval == nil || done.Eval.Version != done.Version {
		t.Fatalf("the source job ended %s (%s) at version %d with evaluation %+v", done.State, done.Reason, done.Version, done.Eval)
	}
	last := *done.Eval
	t.Logf("source: version %d, %s", last.Version, fmt.Sprintf("accuracy %.4f, loss %.6f", last.Accuracy, last.Loss))
	file, info := exportSaved(t, db, g.job.ID, done.Version)
	if info.Version != done.Version {
		t.Fatalf("exported version %d, the job ended at %d", info.Version, done.Version)
	}
	if err := os.WriteFile(filepath.Join(root, "source.safetensors"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ form, init string }{
		{"file", `"source.safetensors"`},
		{"job", fmt.Sprintf(`{"job": %q}`, g.job.ID)},
	} {
		code, v, key, msg := g.submit(initSpec("from-"+c.form, c.init))
		if code != http.StatusCreated {
			t.Fatalf("%s: submit: %d, %s: %s", c.form, code, key, msg)
		}
		var ev coordinator.JobView
		deadline := time.Now().Add(time.Minute)
		for g.getJSON("/api/v1/jobs/"+v.ID, &ev); ev.Eval == nil && time.Now().Before(deadline); g.getJSON("/api/v1/jobs/"+v.ID, &ev) {
			time.Sleep(50 * time.Millisecond)
		}
		first := ev.Eval
		if first == nil || first.Version != 0 {
			t.Fatalf("%s: first evaluation %+v, want one of version 0", c.form, first)
		}
		t.Logf("started from init (%s): accuracy %.4f, loss %.6f", c.form, first.Accuracy, first.Loss)
		if math.Abs(first.Loss-last.Loss) > 1e-9*math.Max(1, math.Abs(last.Loss)) || first.Accuracy != last.Accuracy {
			t.Errorf("%s: first evaluation: loss %v, accuracy %v; the source's last: loss %v, accuracy %v",
				c.form, first.Loss, first.Accuracy, last.Loss, last.Accuracy)
		}
	}

	// A start that already meets the job's target is the job's result.
	metSpec := fmt.Sprintf(`{"name": "met", "model": "mnist-mlp", "target_accuracy": 0.5, "init": {"job": %q}}`, g.job.ID)
	code, v, key, msg := g.submit(metSpec)
	if code != http.StatusCreated {
		t.Fatalf("submit: %d, %s: %s", code, key, msg)
	}
	var met coordinator.JobView
	deadline := time.Now().Add(time.Minute)
	for g.getJSON("/api/v1/jobs/"+v.ID, &met); met.State != coordinator.StateDone && time.Now().Before(deadline); g.getJSON("/api/v1/jobs/"+v.ID, &met) {
		time.Sleep(50 * time.Millisecond)
	}
	if met.State != coordinator.StateDone || met.Version != 0 {
		t.Errorf("a job whose start meets its target: %s at version %d (%s), want done at version 0", met.State, met.Version, met.Reason)
	}
}

// A job started from a file whose version 0 was never saved (the
// coordinator stopped first) resumes from the file again, and refuses
// to if the file changed since: it would be another start.
func TestResumedInitJobWithoutCheckpointReadsTheFileAgain(t *testing.T) {
	dir := t.TempDir()
	spec := quietJob(t)
	m, err := nn.NewModel(spec.Model)
	if err != nil {
		t.Fatal(err)
	}
	params := make([]float32, m.NumParams)
	m.Init(params, 99)
	var b bytes.Buffer
	if err := nn.WriteSafetensors(&b, m.Layout, params, nil); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "warm.safetensors")
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	want, _, _ := nn.ReadSafetensors(b.Bytes())
	sum := sha256.Sum256(b.Bytes())
	spec.Init = &jobspec.Init{File: file, SHA256: hex.EncodeToString(sum[:])}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	newDB := func(name string) *store.Store {
		db, err := store.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		rec := store.JobRecord{ID: "warm-00000001", Name: spec.Name, Spec: specJSON, State: coordinator.StateRunning, CreatedAt: time.Now(), Incarnation: 1}
		if err := db.CreateJob(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		return db
	}
	g := newStoredGrid(t, newDB("a.db"), nil)
	if g.job == nil {
		t.Fatal("the stored job was not resumed")
	}
	sameBits(t, "the resumed job's parameters", g.liveTensors(g.job.ID), want)
	g.close()

	params[0]++
	b.Reset()
	if err := nn.WriteSafetensors(&b, m.Layout, params, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	train, test := loadMNIST(t)
	srv, err := coordinator.New(coordinator.Config{Train: train, Test: test, Logf: t.Logf, Store: newDB("b.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := srv.ResumeJobs(context.Background()); err == nil || !strings.Contains(err.Error(), "changed since the job was created") {
		t.Errorf("resuming after the file changed: %v; want an error saying it changed", err)
	}
}
