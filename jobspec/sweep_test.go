package jobspec

import (
	"errors"
	"strings"
	"testing"
)

const sweepSrc = `
name: search
model: mnist-mlp
mode: async
max_epochs: 1
target_accuracy: 0
sweep:
  method: random
  trials: 8
  space:
    outer_optimizer.lr: {min: 0.01, max: 0.3, log: true}
    batch_size: [32, 64, 128]
    model.layers.0.units: [64, 128]
  asha: {rungs: [5000, 15000], reduction: 3}
`

func TestSweepTrials(t *testing.T) {
	s, err := Parse([]byte(sweepSrc))
	if err != nil {
		t.Fatal(err)
	}
	sw := s.Sweep
	if sw == nil || sw.Method != SweepRandom || sw.Trials != 8 || len(sw.Space) != 3 || sw.ASHA.Reduction != 3 {
		t.Fatalf("sweep %+v", sw)
	}
	pts := sw.Points(s.Seed)
	if len(pts) != 8 {
		t.Fatalf("%d points, want 8", len(pts))
	}
	again := sw.Points(s.Seed)
	seen := map[float64]bool{}
	for i, p := range pts {
		lr := p["outer_optimizer.lr"].(float64)
		if lr < 0.01 || lr > 0.3 || again[i]["outer_optimizer.lr"] != lr {
			t.Errorf("trial %d: lr %v (again %v)", i, lr, again[i]["outer_optimizer.lr"])
		}
		seen[lr] = true
		trial, err := sw.TrialSpec("search-t1", p)
		if err != nil {
			t.Fatal(err)
		}
		if trial.Sweep != nil || trial.Name != "search-t1" || trial.OuterOptimizer.LR != lr ||
			trial.BatchSize != int(p["batch_size"].(int)) || trial.Model.Layers[0].Units != p["model.layers.0.units"].(int) {
			t.Errorf("trial %d of %v: lr %v batch %d units %d", i, p, trial.OuterOptimizer.LR, trial.BatchSize, trial.Model.Layers[0].Units)
		}
		if trial.TargetAccuracy != 0 || trial.MaxEpochs != 1 {
			t.Errorf("trial keeps the rest of the spec: target %v epochs %d", trial.TargetAccuracy, trial.MaxEpochs)
		}
	}
	if len(seen) < 6 {
		t.Errorf("8 log-uniform draws gave only %d distinct rates", len(seen))
	}
}

func TestSweepGrid(t *testing.T) {
	s, err := Parse([]byte(`{name: g, model: mnist-mlp, sweep: {method: grid, space: {outer_optimizer.lr: {min: 0.01, max: 1, log: true, points: 3}, local_steps: [1, 4]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	pts := s.Sweep.Points(1)
	if len(pts) != 6 {
		t.Fatalf("grid of 3x2 gave %d points", len(pts))
	}
	if lr := pts[2]["outer_optimizer.lr"]; lr != 0.1 {
		t.Errorf("the middle of a log range 0.01..1 is %v, want 0.1", lr)
	}
}

func TestSweepBadInput(t *testing.T) {
	for _, c := range []struct{ src, key string }{
		{`{name: s, model: mnist-mlp, sweep: {method: random, trials: 4, space: {}}}`, "sweep.space"},
		{`{name: s, model: mnist-mlp, sweep: {method: random, trials: 4, space: {batchsize: [1, 2]}}}`, "sweep.space.batchsize"},
		{`{name: s, model: mnist-mlp, sweep: {method: random, trials: 4, space: {outer_optimizer.rate: [1]}}}`, "sweep.space.outer_optimizer.rate"},
		{`{name: s, model: mnist-mlp, sweep: {method: random, trials: 4, space: {model.layers.1.width: [1]}}}`, "sweep.space.model.layers.1.width"},
		{`{name: s, model: mnist-mlp, sweep: {method: random, trials: 4, space: {outer_optimizer.lr: {min: 1, max: 0.1}}}}`, "sweep.space.outer_optimizer.lr"},
		{`{name: s, model: mnist-mlp, sweep: {method: random, trials: 4, space: {batch_size: []}}}`, "sweep.space.batch_size"},
		{`{name: s, model: mnist-mlp, sweep: {method: anneal, trials: 4, space: {batch_size: [1]}}}`, "sweep.method"},
		{`{name: s, model: mnist-mlp, sweep: {method: random, space: {batch_size: [1]}}}`, "sweep.trials"},
		{`{name: s, model: mnist-mlp, sweep: {method: grid, space: {batch_size: [1]}, asha: {rungs: [10, 5]}}}`, "sweep.asha.rungs"},
		{`{name: s, model: mnist-mlp, sweep: {method: grid, spaces: {}}}`, "sweep.spaces"},
		{`{name: s, model: mnist-mlp, weight: 0}`, "weight"},
		{`{name: s, model: mnist-mlp, weight: -2}`, "weight"},
		{`{name: s, model: mnist-mlp, requires: {kind: [phone]}}`, "requires.kind"},
		{`{name: s, model: mnist-mlp, requires: {memory: 3}}`, "requires.memory"},
	} {
		_, err := Parse([]byte(c.src))
		var se *Error
		if !errors.As(err, &se) || se.Key != c.key {
			t.Errorf("%s: error %v, want one naming %s", c.src, err, c.key)
		}
	}
	// A value the key cannot take fails when the trials are made, naming
	// the path.
	src := `{name: s, model: mnist-mlp, sweep: {method: grid, space: {model.layers.7.units: [3]}}}`
	s, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sweep.TrialSpec("s-t1", s.Sweep.Points(1)[0]); err == nil || !strings.Contains(err.Error(), "sweep.space.model.layers.7.units") {
		t.Errorf("a layer the model lacks: %v", err)
	}
}

func TestWeightPriorityRequires(t *testing.T) {
	s, err := Parse([]byte(`{name: s, model: mnist-mlp, weight: 3, priority: 2, requires: {kind: [native, gpu], min_memory_mb: 4096}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Weight != 3 || s.Priority != 2 || len(s.Requires.Kind) != 2 || s.Requires.MinMemoryMB != 4096 {
		t.Fatalf("%v %v %+v", s.Weight, s.Priority, s.Requires)
	}
	d, _ := Parse([]byte(`{name: s, model: mnist-mlp}`))
	if d.Weight != 1 || d.Priority != 0 {
		t.Errorf("defaults: weight %v priority %d, want 1 and 0", d.Weight, d.Priority)
	}
	next, notes, err := Patch(s, []byte(`{"weight": 1, "priority": 0}`))
	if err != nil || next.Weight != 1 || next.Priority != 0 || len(notes) != 2 {
		t.Fatalf("patch: %v %v %v %v", err, next.Weight, next.Priority, notes)
	}
	if _, _, err := Patch(s, []byte(`{"weight": 0}`)); err == nil || !strings.Contains(err.Error(), "weight") {
		t.Errorf("patch weight 0: %v", err)
	}
}
