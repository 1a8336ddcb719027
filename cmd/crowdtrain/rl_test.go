package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/rljob"
	"github.com/crowdtrain/crowdtrain/rltask"
)

// An RL job end to end on real processes: a served text job warms
// charlm-tiny up on one-digit sums by supervised training to a held-out
// solved share S0 (measured here on the exported model, greedily, on the
// held-out prompts an RL job evaluates); then a served kind: rl job from
// that export, with two native workers generating rollouts and computing
// GRPO gradients, ends with a solved share well above S0 in its eval.
func TestRLJobRaisesSolvedOverItsWarmUp(t *testing.T) {
	testenv.Long(t, "trains a text job and then an RL job end to end")
	dir := t.TempDir()
	policy, v := warmUpOnAdd(t, dir, 2)
	s0 := heldOutSolved(t, policy)
	t.Logf("warm-up: %d versions, solved S0 = %.3f", v.Version, s0)

	rlSpec := filepath.Join(dir, "rl.yaml")
	writeTestFile(t, rlSpec, []byte(fmt.Sprintf(`name: rl-add
kind: rl
model: charlm-tiny
policy: %q
task: {type: add, digits: 1}
group_size: 8
max_new_tokens: 4
outer_optimizer: {type: adamw, lr: 0.0002, beta2: 0.99, clip_norm: 1}
max_epochs: 24
eval_every: 40
`, policy)))
	addr := freeAddr(t)
	start := time.Now()
	srv := startProc(t, "serve", "--addr", addr, "--db", filepath.Join(dir, "rl.db"), "--job", rlSpec, "--local-workers", "2")
	v = waitJob(t, addr, 4*time.Minute, "the RL job to finish", ended)
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Solved == nil {
		t.Fatalf("RL job ended %s (%s), eval %+v; log:\n%s", v.State, v.Reason, v.Eval, srv.logText())
	}
	t.Logf("RL job: %d versions in %v: reward %.3f, solved %.3f (S0 %.3f); %d updates applied, %d clipped, rejections %v",
		v.Version, time.Since(start).Round(time.Second), *v.Eval.Reward, *v.Eval.Solved, s0, v.UpdatesApplied, v.Clipped, v.Rejections)
	if *v.Eval.Solved < s0+0.15 {
		t.Errorf("solved %.3f after RL, S0 %.3f: want at least 15 points more; log:\n%s", *v.Eval.Solved, s0, srv.logText())
	}
}

// heldOutSolved is the share of the RL evaluation's held-out one-digit
// sums the exported model at path answers right, greedily.
func heldOutSolved(t *testing.T, path string) float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tensors, _, err := nn.ReadSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := nn.Preset("charlm-tiny")
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	params := make([]float32, m.NumParams)
	if err := m.ParamsFromSafetensors(tensors, params); err != nil {
		t.Fatal(err)
	}
	task, _ := rltask.New(rltask.Spec{Name: rltask.Add, Digits: 1})
	e, err := rljob.Evaluate(m, params, task, rljob.DefaultEvalProblems, 4)
	if err != nil {
		t.Fatal(err)
	}
	return e.Solved
}
