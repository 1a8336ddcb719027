package coordinator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/store"
)

const sweepSpec = `
name: lr-search
model: mnist-mlp
mode: async
target_accuracy: 0
max_epochs: 1
eval_every: 100000
sweep:
  method: random
  trials: 4
  space:
    outer_optimizer.lr: {min: 0.0002, max: 0.005, log: true}
  asha: {rungs: [6000, 18000], reduction: 2}
`

func (g *testGrid) sweepView(id string) coordinator.SweepView {
	g.t.Helper()
	var v coordinator.SweepView
	if code := g.getJSON("/api/v1/jobs/"+id, &v); code != http.StatusOK {
		g.t.Fatalf("GET sweep %s: %d", id, code)
	}
	return v
}

// A random search with ASHA: trials run as jobs on the grid, weak ones
// stop at a rung, the sweep ends with its best trial exported.
func TestSweepWithASHA(t *testing.T) {
	testenv.Long(t, "trains the trials of a sweep")
	g := newTestGrid(t, endlessMLP(t, "background", 1))
	if _, err := g.srv.PauseJob(g.ctx, g.job.ID); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		g.addWorker(1, nil)
	}
	var created coordinator.SweepView
	code, body := g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, map[string]string{"spec": sweepSpec}, nil)
	if code != http.StatusCreated {
		t.Fatalf("POST sweep: %d %s", code, body)
	}
	if err := json.Unmarshal(body, &created); err != nil {
		t.Fatal(err)
	}
	if created.Kind != "sweep" || len(created.Trials) != 4 {
		t.Fatalf("created %+v", created)
	}
	var v coordinator.SweepView
	deadline := time.Now().Add(5 * time.Minute)
	for {
		v = g.sweepView(created.ID)
		if v.State == coordinator.StateDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sweep did not finish in 5 minutes: %+v", v)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var ended, stopped int
	for _, d := range v.Details {
		if len(d.Rungs) == 0 {
			t.Errorf("trial %s has no rung metric: %+v", d.ID, d)
		}
		switch d.State {
		case "ended":
			ended++
			if d.Final == nil || d.ExamplesSeen < 60000 {
				t.Errorf("trial %s ended without its full budget: %+v", d.ID, d)
			}
		case "stopped":
			stopped++
			if !strings.Contains(d.Note, "ASHA") || d.ExamplesSeen >= 60000 {
				t.Errorf("stopped trial %s: %+v", d.ID, d)
			}
		}
	}
	// Halving 4 trials twice leaves 1; ASHA's asynchronous promotions
	// (a trial goes on as soon as it is in the best half of those that
	// have arrived) may let a second through.
	if ended < 1 || ended > 2 || ended+stopped != 4 {
		t.Errorf("%d trials ran to the end and %d stopped, want 1 or 2 and the rest stopped", ended, stopped)
	}
	if v.Best == nil || !(v.Best.Metric > 0.8) {
		t.Fatalf("best %+v", v.Best)
	}
	if v.ExamplesSeen > 4*60000*6/10 {
		t.Errorf("the sweep spent %d examples of the %d the trials would at full budget", v.ExamplesSeen, 4*60000)
	}
	t.Logf("best %s at %.4f; %d examples (%.0f%% of 4 full trials)", v.Best.ID, v.Best.Metric, v.ExamplesSeen, 100*float64(v.ExamplesSeen)/240000)
	// Exporting the sweep exports its best trial.
	code, body = g.call(http.MethodGet, "/api/v1/jobs/"+created.ID+"/export", testAdminToken, nil, nil)
	if code != http.StatusOK || !strings.Contains(string(body), v.Best.ID) {
		t.Errorf("export of the sweep: %d, %d bytes, naming the best trial: %v", code, len(body), strings.Contains(string(body), v.Best.ID))
	}
	var list []coordinator.SweepView
	if g.getJSON("/api/v1/sweeps", &list); len(list) != 1 || list[0].ID != created.ID {
		t.Errorf("GET /api/v1/sweeps: %+v", list)
	}
}

func TestSweepBadInputNamesTheKey(t *testing.T) {
	g := newTestGrid(t, endlessMLP(t, "j", 1))
	for _, c := range []struct{ spec, key string }{
		{`{name: s, model: mnist-mlp, sweep: {method: random, trials: 2, space: {}}}`, "sweep.space"},
		{`{name: s, model: mnist-mlp, sweep: {method: random, trials: 2, space: {outer_optimizer.rate: [0.1]}}}`, "sweep.space.outer_optimizer.rate"},
		{`{name: s, model: mnist-mlp, sweep: {method: grid, space: {model.layers.9.units: [8]}}}`, "sweep.space.model.layers.9.units"},
		{`{name: s, model: mnist-mlp, weight: 0}`, "weight"},
	} {
		code, body := g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, map[string]string{"spec": c.spec}, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(body), c.key) {
			t.Errorf("%s: %d %s; want 400 naming %s", c.spec, code, body, c.key)
		}
	}
	if code, body := g.call(http.MethodPatch, "/api/v1/jobs/"+g.job.ID, testAdminToken, map[string]any{"weight": -1}, nil); code != http.StatusBadRequest || !strings.Contains(string(body), "weight") {
		t.Errorf("PATCH weight -1: %d %s", code, body)
	}
}

// A restart makes each trial's job agree with the sweep's record: a kill
// between a trial's resume and its checkpoint leaves the job paused while
// the record says it runs, and without this the sweep would wait for it
// for ever.
func TestResumedSweepReconcilesItsTrials(t *testing.T) {
	train, test := loadMNIST(t)
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg := coordinator.Config{Train: train, Test: test, Logf: t.Logf, Store: db}
	srv, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse([]byte(sweepSpec))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := srv.AddSweep(spec)
	if err != nil {
		t.Fatal(err)
	}
	trial := sw.View(context.Background()).Trials[0]
	// The job paused behind the sweep's back (as a lost resume leaves it).
	if _, err := srv.PauseJob(context.Background(), trial); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	srv, err = coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := srv.ResumeJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	v, ok, err := srv.JobView(context.Background(), trial)
	if err != nil || !ok {
		t.Fatalf("trial %s after the restart: %v %v", trial, ok, err)
	}
	if v.State != coordinator.StateRunning {
		t.Errorf("trial %s is %s after the restart; the sweep's record says it runs", trial, v.State)
	}
	if list := srv.Sweeps(context.Background()); len(list) != 1 || list[0].ID != sw.ID || len(list[0].Trials) != 4 {
		t.Errorf("sweeps after the restart: %+v", list)
	}
}
