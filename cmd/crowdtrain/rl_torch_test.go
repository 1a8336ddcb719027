package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/rljob"
	"github.com/crowdtrain/crowdtrain/rltask"
)

// RLCurveOutVar names the file TestRLCurveBesideSingleProcessGRPO writes
// its table to (`make bench-rl-curve`); unset, the table is only logged.
const RLCurveOutVar = "CROWDTRAIN_RL_CURVE_OUT"

// The RL job's curve beside a single-process GRPO run in PyTorch
// (docs/BENCHMARKS.md, "RL from the crowd"): from the same warmed-up
// policy (SFT on one-digit sums, as TestRLJobRaisesSolvedOverItsWarmUp),
// the served RL job with two native workers at its defaults (async,
// rollouts up to max_rollout_staleness 2 versions old, spot checks at
// 0.05, the robust clip) against `torch_reference.py grpo-train`:
// on-policy, one process, the same group size, groups per step, prompts'
// stream, temperature, clip and outer optimizer. Both evaluate the same
// 200 held-out prompts greedily every 40 steps; a version of the job is
// one learn lease, 8 groups of 8 completions, as a PyTorch step is, so
// the two curves meet at equal rollouts used. The test asserts that both
// raise the solved share over S0; how close the grid's curve comes to
// PyTorch's (the goal: within 5%) is the benchmark's figure.
func TestRLCurveBesideSingleProcessGRPO(t *testing.T) {
	testenv.Long(t, "trains a text job, then the same GRPO on the grid and in PyTorch")
	python := torchPython(t)
	dir := t.TempDir()
	policy, _ := warmUpOnAdd(t, dir, 2)
	s0 := heldOutSolved(t, policy)

	const evalEvery = 40
	rlSpec := writeRLAddSpec(t, dir, "rl-curve", policy, 24, evalEvery)
	addr := freeAddr(t)
	srv := startProc(t, "serve", "--addr", addr, "--db", filepath.Join(dir, "rl.db"), "--job", rlSpec, "--local-workers", "2")
	start := time.Now()
	grid := map[int64]float64{} // version -> solved
	used := map[int64]int64{}   // version -> completions the model was trained on
	v := waitJob(t, addr, 6*time.Minute, "the RL job to finish", func(v coordinator.JobView) bool {
		if e := v.Eval; e != nil && e.Solved != nil {
			grid[e.Version], used[e.Version] = *e.Solved, e.Examples
		}
		return ended(v)
	})
	gridWall := time.Since(start)
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Solved == nil {
		t.Fatalf("RL job ended %s (%s), eval %+v; log:\n%s", v.State, v.Reason, v.Eval, srv.logText())
	}
	srv.kill()

	// The same problems for PyTorch: the job's training stream from its
	// seed, and the held-out prompts.
	task, err := rltask.New(rltask.Spec{Name: rltask.Add, Digits: 1})
	if err != nil {
		t.Fatal(err)
	}
	type problem [2]any // prompt ids, answer
	var train, eval []problem
	for i := range 200 * int(v.Version) {
		p := task.Problem(uint64(v.Spec.Seed), i)
		train = append(train, problem{rljob.Prompt(p), p.Answer})
	}
	for i := range rljob.DefaultEvalProblems {
		p := task.Problem(rljob.EvalSeed, i)
		eval = append(eval, problem{rljob.Prompt(p), p.Answer})
	}
	r := v.Spec.RL
	cfg, err := json.Marshal(map[string]any{"train": train, "eval": eval, "group_size": r.GroupSize, "groups_per_step": 8,
		"max_new_tokens": r.MaxNewTokens, "temperature": r.Temperature, "clip": r.Clip, "stop": []int{rljob.Newline},
		"optimizer": v.Spec.OuterOptimizer.WithDefaults()})
	if err != nil {
		t.Fatal(err)
	}
	problems := filepath.Join(dir, "problems.json")
	if err := os.WriteFile(problems, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start = time.Now()
	out, err := exec.CommandContext(ctx, python, torchReference, "grpo-train", "--model", policy, "--problems", problems,
		"--steps", fmt.Sprint(v.Version), "--eval-every", fmt.Sprint(evalEvery)).CombinedOutput()
	torchWall := time.Since(start)
	if err != nil {
		t.Fatalf("torch_reference.py grpo-train: %v\n%s", err, out)
	}
	torch := map[int64]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var step, rollouts, usedT int64
		var solved float64
		if n, _ := fmt.Sscanf(sc.Text(), "step %d rollouts %d used %d solved %f", &step, &rollouts, &usedT, &solved); n == 4 {
			torch[step] = solved
		}
	}

	var versions []int64
	for ver := range grid {
		if _, ok := torch[ver]; ok {
			versions = append(versions, ver)
		}
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	var table strings.Builder
	fmt.Fprintf(&table, "S0 %.3f; the grid %d versions in %v, PyTorch the same steps in %v\n\n", s0, v.Version, gridWall.Round(time.Second), torchWall.Round(time.Second))
	fmt.Fprintf(&table, "| steps (versions) | completions used | grid solved | PyTorch solved | grid − PyTorch |\n| --- | --- | --- | --- | --- |\n")
	var worst float64
	for _, ver := range versions {
		d := grid[ver] - torch[ver]
		worst = min(worst, d)
		fmt.Fprintf(&table, "| %d | %d | %.3f | %.3f | %+.3f |\n", ver, used[ver], grid[ver], torch[ver], d)
	}
	fmt.Fprintf(&table, "\nthe grid's largest shortfall: %.3f\n", -worst)
	t.Logf("RL curve, grid beside single-process GRPO:\n%s", table.String())
	if path := os.Getenv(RLCurveOutVar); path != "" {
		if err := os.WriteFile(path, []byte(table.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(versions) < 3 {
		t.Fatalf("%d evaluations in common (grid %v, PyTorch %v); want at least 3:\n%s", len(versions), grid, torch, out)
	}
	last := versions[len(versions)-1]
	if grid[last] < s0+0.1 || torch[last] < s0+0.1 {
		t.Errorf("solved at step %d: grid %.3f, PyTorch %.3f, S0 %.3f; want both at least 10 points above S0", last, grid[last], torch[last], s0)
	}
}
