package coordinator_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
)

// crowdBound is the most examples two workers may take to a job's target,
// as a multiple of one worker's. The goal is 1.2 (docs/TRAINING.md, "A
// second worker on the transformer"): charlm-tiny in async measured 1.11
// to 1.23 in four runs with the prediction's reach at twice the staleness
// (1.2 to 1.4 at once the staleness, 2x and more without prediction), and
// 0.95x to 1.05x since the initialisation is PyTorch's.
var crowdBound = map[string]float64{"mnist-mlp": 1.3, "charlm-tiny": 1.3}

// A second worker pays off: the examples (and versions) that two workers
// need to reach a fixed target are at most crowdBound those of one, at the
// job's defaults (async, snapshot latest). It counts examples, not
// seconds, so a loaded machine cannot make it fail; it measures the cost
// of the crowd's staleness, which a slowdown of the grid does not change.
// The order two workers' results arrive in differs from run to run
// (charlm-tiny: 1.11x, 1.11x and 1.23x in three runs of one build, 1.31x
// in a fourth beside the other packages' tests), so two workers run three
// times and their medians count; one worker's run is the same each time.
func TestASecondWorkerPaysOff(t *testing.T) {
	for _, c := range []struct {
		name string
		spec func(t *testing.T) (jobspec.Spec, func(*coordinator.Config))
	}{
		{"mnist-mlp", func(t *testing.T) (jobspec.Spec, func(*coordinator.Config)) {
			return jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
				s.TargetAccuracy, s.EvalEvery, s.MaxEpochs = 0.95, 50, 3
			}), nil
		}},
		{"charlm-tiny", func(t *testing.T) (jobspec.Spec, func(*coordinator.Config)) {
			text, err := dataset.BibleText()
			if err != nil {
				testenv.Missing(t, fmt.Sprintf("charlm-tiny trains on the King James text: %v; %s", err, dataset.BibleFix))
			}
			path := filepath.Join(t.TempDir(), "kjv.txt")
			if err := os.WriteFile(path, text, 0o644); err != nil {
				t.Fatal(err)
			}
			// The charlm preset's optimizer and batch on the tiny model, to
			// 2.8 bits per character (1.94 nats): about 600 versions alone.
			s, err := jobspec.Parse([]byte(fmt.Sprintf(`name: crowd-charlm-tiny
model: charlm-tiny
dataset: {type: text, path: %q, val_fraction: 0.02}
outer_optimizer: {type: adamw, lr: 0.003, weight_decay: 0.01, clip_norm: 1}
batch_size: 32
eval_every: 10
target_loss: 1.94
max_epochs: 1
`, path)))
			if err != nil {
				t.Fatal(err)
			}
			return s, func(cfg *coordinator.Config) { cfg.LoadData = dataset.Load }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec, edit := c.spec(t)
			var examples, versions [3]float64
			for _, n := range []int{1, 2} {
				var ex, ver []float64
				for range map[int]int{1: 1, 2: 3}[n] {
					g := newTestGridWith(t, spec, edit)
					for range n {
						g.addWorker(1, nil)
					}
					v := g.waitDone(4 * time.Minute)
					g.close()
					if v.State != coordinator.StateDone || v.Eval == nil || !targetMet(spec, v.Eval) {
						t.Fatalf("%d workers: job ended %s (%s) with eval %+v, want its target reached", n, v.State, v.Reason, v.Eval)
					}
					ex, ver = append(ex, float64(v.ExamplesSeen)), append(ver, float64(v.Eval.Version))
					t.Logf("%d workers: target at version %d, %d examples, mean staleness %.2f", n, v.Eval.Version, v.ExamplesSeen, v.MeanStaleness)
				}
				slices.Sort(ex)
				slices.Sort(ver)
				examples[n], versions[n] = ex[len(ex)/2], ver[len(ver)/2]
			}
			bound := crowdBound[c.name]
			if r := examples[2] / examples[1]; r > bound {
				t.Errorf("two workers took %.2fx the examples of one to the target (%.0f against %.0f), want at most %.1fx", r, examples[2], examples[1], bound)
			}
			if r := versions[2] / versions[1]; r > bound {
				t.Errorf("two workers took %.2fx the versions of one to the target (%.0f against %.0f), want at most %.1fx", r, versions[2], versions[1], bound)
			}
		})
	}
}

// targetMet reports whether an evaluation reached spec's target.
func targetMet(spec jobspec.Spec, e *coordinator.EvalResult) bool {
	if spec.TargetLoss > 0 {
		return e.Loss <= spec.TargetLoss
	}
	return e.Accuracy >= spec.TargetAccuracy
}
