package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/rl"
	"github.com/crowdtrain/crowdtrain/rltask"
)

// The pieces of RL from verifiable rewards, end to end on real parts: a
// text job on a task data set (served, two local workers) teaches
// charlm-tiny one-digit sums; the exported model, decoded greedily with
// nn.Decoder, answers most problems of another stream right by
// rltask.Reward; and groups of completions it samples give rl.Loss a
// finite loss and a gradient.
func TestTaskDatasetTeachesAnswersTheDecoderGives(t *testing.T) {
	testenv.Long(t, "trains a text job end to end")
	file, v := warmUpOnAdd(t, t.TempDir(), 8)
	b, err := os.ReadFile(file)
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
	d, err := m.NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	task, err := rltask.New(rltask.Spec{Name: rltask.Add, Digits: 1})
	if err != nil {
		t.Fatal(err)
	}
	// A problem follows the newline that ended the one before it.
	prompt := func(p rltask.Problem) []int32 {
		ids := []int32{'\n'}
		for _, c := range []byte(p.Prompt) {
			ids = append(ids, int32(c))
		}
		return ids
	}
	text := func(ids []int32) string {
		s := make([]byte, len(ids))
		for i, id := range ids {
			s[i] = byte(id)
		}
		return string(s)
	}
	const n = 200
	right := 0.0
	for i := range n {
		p := task.Problem(99, i)
		s, err := d.Generate(params, prompt(p), 4, 0, nil, []int32{'\n'})
		if err != nil {
			t.Fatal(err)
		}
		right += rltask.Reward(p, text(s.Tokens))
	}
	t.Logf("after %d versions (test loss %.3f): %v of %d held-out sums right, greedy", v.Version, v.Eval.Loss, right, n)
	if right < n/2 {
		t.Errorf("%v of %d sums right after supervised training on the task; want at least half", right, n)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	var groups []rl.Group
	for i := range 4 {
		p := task.Problem(7, i)
		var g rl.Group
		for range 8 {
			s, err := d.Generate(params, prompt(p), 4, 1, rng, []int32{'\n'})
			if err != nil {
				t.Fatal(err)
			}
			g = append(g, rl.Completion{Prompt: prompt(p), Tokens: s.Tokens, OldLogProbs: s.LogProbs, Reward: rltask.Reward(p, text(s.Tokens))})
		}
		groups = append(groups, g)
	}
	grad := make([]float32, m.NumParams)
	st, err := rl.Loss(m, m.NewWorkspace(8), params, groups, rl.Config{}, grad)
	if err != nil {
		t.Fatal(err)
	}
	var norm float64
	for _, g := range grad {
		norm += float64(g) * float64(g)
	}
	t.Logf("GRPO on sampled groups: loss %.4g over %d tokens, clipped %.2g, gradient norm %.3g", st.Loss, st.Tokens, st.ClipFraction, math.Sqrt(norm))
	if math.IsNaN(st.Loss) || math.IsInf(st.Loss, 0) || st.ClipFraction != 0 {
		t.Errorf("on-policy GRPO: loss %v, clipped %v; want a finite loss and nothing clipped (every ratio is 1)", st.Loss, st.ClipFraction)
	}
	mixed := false
	for _, a := range st.Advantages {
		for _, x := range a {
			mixed = mixed || x != 0
		}
	}
	if mixed && !(norm > 0) {
		t.Error("groups with different rewards gave a zero gradient")
	}
}

// warmUpOnAdd serves a text job on one-digit sums (the task data set) to
// charlm-tiny with two local workers for epochs epochs, and exports the
// model it ended with into dir: the path of the export, and the job.
func warmUpOnAdd(t *testing.T, dir string, epochs int) (string, coordinator.JobView) {
	t.Helper()
	spec := filepath.Join(dir, "sft.yaml")
	writeTestFile(t, spec, []byte(fmt.Sprintf(`name: sft-add
model: charlm-tiny
dataset: {type: task, name: add, digits: 1, examples: 20000, seed: 1}
outer_optimizer: {type: adamw, lr: 0.003, clip_norm: 1}
batch_size: 32
max_epochs: %d
`, epochs)))
	addr := freeAddr(t)
	db := filepath.Join(dir, "sft.db")
	srv := startProc(t, "serve", "--addr", addr, "--db", db, "--job", spec, "--local-workers", "2")
	v := waitJob(t, addr, 4*time.Minute, "the task job to finish", ended)
	if v.State != coordinator.StateDone || v.Eval == nil {
		t.Fatalf("the task job ended %s (%s); log:\n%s", v.State, v.Reason, srv.logText())
	}
	srv.kill()
	file := filepath.Join(dir, "sft.safetensors")
	if code, stdout, stderr := runCmd(t, context.Background(), "export", "--db", db, "--job", v.ID, "--out", file); code != 0 {
		t.Fatalf("export: exit %d\n%s%s", code, stdout, stderr)
	}
	return file, v
}
