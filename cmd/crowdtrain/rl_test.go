package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/attack"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/nn/nntest"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rljob"
	"github.com/crowdtrain/crowdtrain/rltask"
)

// An RL job end to end on real processes: a served text job warms
// charlm-tiny up on one-digit sums by supervised training to a held-out
// solved share S0 (measured here on the exported model, greedily, on the
// held-out prompts an RL job evaluates); then a served kind: rl job from
// that export, with two native workers generating rollouts and computing
// GRPO gradients with a small KL penalty (kl_coef 0.01: each learn
// worker downloads the reference policy from the coordinator), ends with
// a solved share well above S0 in its eval: in mode async (a step per
// learn result), in mode sync (a step per round of two learn results,
// one from each worker, rollouts outside the rounds), in mode diloco
// (rounds of two learn leases of four local steps each), and in async
// DiLoCo (each lease's delta of four local steps applied as it comes).
func TestRLJobRaisesSolvedOverItsWarmUp(t *testing.T) {
	testenv.Long(t, "trains a text job and then an RL job end to end in two modes")
	dir := t.TempDir()
	policy, v := warmUpOnAdd(t, dir, 2)
	s0 := heldOutSolved(t, policy)
	t.Logf("warm-up: %d versions, solved S0 = %.3f", v.Version, s0)

	var learnChecked int64
	defer func() {
		if !t.Failed() && learnChecked == 0 {
			t.Error("no learn result of any mode was recomputed: the learn leases' spot checks drew none")
		}
	}()
	for _, mode := range []string{"async", "sync", "diloco", "async_diloco"} {
		t.Run(mode, func(t *testing.T) {
			rlSpec := writeRLAddSpec(t, dir, "rl-add-"+mode, policy, 24, 40)
			b, err := os.ReadFile(rlSpec)
			if err != nil {
				t.Fatal(err)
			}
			y := string(b) + "kl_coef: 0.01\n"
			if mode == "sync" {
				// A round's step averages two learn leases' gradients:
				// half the steps of async at twice the batch, at twice
				// the rate.
				y = strings.Replace(y, "lr: 0.0002", "lr: 0.0004", 1) + "mode: sync\nround_size: 2\n"
			}
			if mode == "diloco" || mode == "async_diloco" {
				// Learn leases of 4 local steps (32 groups), rounds of
				// two, DiLoCo's outer Nesterov on the mean delta, the
				// inner AdamW at the async job's rate.
				y = y[:strings.Index(y, "outer_optimizer:")] + y[strings.Index(y, "max_epochs:"):] +
					"mode: diloco\nround_size: 2\nlocal_steps: 4\ninner_optimizer: {type: adamw, lr: 0.0002, beta2: 0.99, clip_norm: 1}\n"
			}
			if mode == "async_diloco" {
				// Each learn lease's delta applied as it comes, through
				// the delayed Nesterov outer step.
				y = strings.Replace(y, "round_size: 2\n", "async_diloco: true\n", 1)
			}
			writeTestFile(t, rlSpec, []byte(y))
			addr := freeAddr(t)
			start := time.Now()
			srv := startProc(t, "serve", "--addr", addr, "--db", filepath.Join(dir, "rl-"+mode+".db"), "--job", rlSpec, "--local-workers", "2")
			v := waitJob(t, addr, 4*time.Minute, "the RL job to finish", ended)
			if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Solved == nil {
				t.Fatalf("RL job ended %s (%s), eval %+v; log:\n%s", v.State, v.Reason, v.Eval, srv.logText())
			}
			t.Logf("RL job, %s: %d versions in %v: reward %.3f, solved %.3f (S0 %.3f); %d updates applied, %d clipped, rejections %v",
				mode, v.Version, time.Since(start).Round(time.Second), *v.Eval.Reward, *v.Eval.Solved, s0, v.UpdatesApplied, v.Clipped, v.Rejections)
			// Honest learn results pass the coordinator's recomputation
			// of them (learn leases' spot checks, across the workers'
			// kernel and the coordinator's). A mode with few learn
			// results may have none drawn; all modes together must.
			if lc := v.SpotChecks.Learn; lc == nil || lc.Forged != 0 || v.Rejections[protocol.ReasonForged] != 0 {
				t.Errorf("%s: spot_checks.learn %+v, rejections %v; want none refused forged", mode, lc, v.Rejections)
			} else {
				learnChecked += lc.Checked
				t.Logf("%s: %d learn results recomputed in %.2f s, largest relative difference %.3g (tolerance %g)", mode, lc.Checked, lc.Seconds, lc.MaxMatchedDifference, lc.Tolerance)
			}
			gain := 0.15
			if mode == "async_diloco" {
				// A step a learn lease, each delta alone through the
				// delayed Nesterov step: a smaller gain in as many
				// epochs (+15.5 and +21.0 points measured, against +19 to +21 in diloco).
				gain = 0.10
			}
			if *v.Eval.Solved < s0+gain {
				t.Errorf("%s: solved %.3f after RL, S0 %.3f: want at least %.0f points more; log:\n%s", mode, *v.Eval.Solved, s0, 100*gain, srv.logText())
			}
			if (mode == "sync" || mode == "diloco") && v.UpdatesApplied < 2*v.Version-2 {
				t.Errorf("%s: %d learn results applied in %d versions; want two a round (rounds of round_size 2)", mode, v.UpdatesApplied, v.Version)
			}
		})
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

// An RL job from a freshly initialised charlm-tiny (the check needs no
// trained policy) with spot_check 1, a forge-rollout attacker (the task's
// right answer in half of each group's completions and a wrong one in
// the others, every token claimed at -0.01, nothing sampled) and two
// honest native workers, on real processes: the forger's rollouts are
// refused forged, none accepted (so none is buffered for a learn lease),
// and it is banned at its third strike; the honest workers' rollouts,
// checked by the hundred, are never refused as forged. A random policy
// solves no sum, so its groups are flat and the job learns nothing: the
// test stops once the checks are counted, not at the job's end.
func TestRLJobBansARolloutForger(t *testing.T) {
	testenv.Long(t, "runs an RL job with honest workers and an attack process")
	dir := t.TempDir()
	policy := nntest.RandomSafetensors(t, dir, "charlm-tiny", 3)
	spec := filepath.Join(dir, "rl.yaml")
	writeTestFile(t, spec, []byte(fmt.Sprintf(`name: rl-forger
kind: rl
model: charlm-tiny
policy: %q
task: {type: add, digits: 1}
group_size: 4
max_new_tokens: 3
spot_check: 1
spot_check_strikes: 3
`, policy)))
	addr := freeAddr(t)
	srv := startProc(t, "serve", "--addr", addr, "--db", "", "--job", spec)
	waitJob(t, addr, time.Minute, "the coordinator", func(coordinator.JobView) bool { return true })
	a := startAttack(t, addr, attack.ForgeRollout, "127.0.0.2", "--duration", "3m")
	a.waitLine("connected as", 30*time.Second)
	for range 2 {
		startProc(t, "work", "--coordinator", "ws://"+addr+"/ws")
	}
	v := waitJob(t, addr, 2*time.Minute, "the forger's strikes and 100 honest rollouts checked", func(v coordinator.JobView) bool {
		rc := v.SpotChecks.Rollouts
		return rc != nil && rc.Forged >= 3 && rc.Checked-rc.Forged >= 100
	})
	time.Sleep(time.Second) // more honest rollouts, checked or not
	r := stopAttack(t, a)
	v = waitJob(t, addr, 10*time.Second, "the job view", func(coordinator.JobView) bool { return true })
	rc := v.SpotChecks.Rollouts
	t.Logf("attack:\n%s", r.text)
	t.Logf("RL job %s: rollout checks %+v; rejections %v; %d leases issued", v.State, *rc, v.Rejections, v.LeasesIssued)
	forged := r.variants["forged"]
	if forged[0] < 3 || forged[1] != 0 {
		t.Errorf("the forger sent %d forged rollout results, %d accepted; want at least 3 sent and none accepted", forged[0], forged[1])
	}
	if !strings.Contains(r.text, "banned") {
		t.Errorf("the forger was not told it is banned; attack log:\n%s", r.text)
	}
	// Three strikes ban: exactly three results refused forged, all the
	// forger's; not one honest rollout among the rest.
	if rc.Forged != 3 || v.Rejections["forged"] != 3 {
		t.Errorf("%d rollouts found forged, %d refused forged; want 3 and 3 (the forger's, until its ban); log:\n%s", rc.Forged, v.Rejections["forged"], srv.logText())
	}
}

// writeRLAddSpec writes the RL job the end-to-end tests run on a policy
// warmed up on one-digit sums (warmUpOnAdd): groups of 8 completions of
// at most 4 tokens, AdamW 2e-4, for epochs epochs, evaluated every
// evalEvery versions. It returns the spec file's path.
func writeRLAddSpec(t *testing.T, dir, name, policy string, epochs, evalEvery int) string {
	t.Helper()
	path := filepath.Join(dir, name+".yaml")
	writeTestFile(t, path, []byte(fmt.Sprintf(`name: %s
kind: rl
model: charlm-tiny
policy: %q
task: {type: add, digits: 1}
group_size: 8
max_new_tokens: 4
outer_optimizer: {type: adamw, lr: 0.0002, beta2: 0.99, clip_norm: 1}
max_epochs: %d
eval_every: %d
`, name, policy, epochs, evalEvery)))
	return path
}

// An RL job on a tokenized policy, with real processes: gpt-mini with a
// BPE tokenizer trained on Go source (as gpt-mini's jobs have one) warms
// up on one-digit sums by SFT, and the served kind: rl job from its
// export, which names no tokenizer, takes the policy's: its prompts are
// the tokenizer's ids, a completion stops after any token that holds a
// newline, and the task's checker reads it decoded. Two native workers
// and a headless Chromium tab (sampling in wasm, its rollout results
// accepted) raise the held-out solved share by at least 25 points over
// the job's version-0 evaluation (here 0.01 to 0.56 and 0.075 to 0.535
// without the tab).
func TestTokenizedRLJobRaisesSolved(t *testing.T) {
	testenv.Long(t, "trains a tokenizer, a gpt-mini text job and then an RL job end to end")
	testbrowser.Chromium(t)
	dir := t.TempDir()
	dist := t.TempDir() // serve --web-dist: the binary the tests build embeds no browser worker
	if err := testbrowser.BuildWorker(dist); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "go-1024.bpe")
	if code, stdout, stderr := runCmd(t, context.Background(), "tokenizer", "train", "--data", "go-source", "--vocab", "1024", "--out", tok); code != 0 {
		t.Fatalf("tokenizer train: exit %d\n%s%s", code, stdout, stderr)
	}
	sft := filepath.Join(dir, "sft.yaml")
	writeTestFile(t, sft, []byte(fmt.Sprintf(`name: sft-add-bpe
model: gpt-mini
tokenizer: %q
dataset: {type: task, name: add, digits: 1, examples: 20000, seed: 1}
outer_optimizer: {type: adamw, lr: 0.003, clip_norm: 1}
batch_size: 32
max_epochs: 4
`, tok)))
	addr := freeAddr(t)
	db := filepath.Join(dir, "sft.db")
	srv := startProc(t, "serve", "--addr", addr, "--db", db, "--job", sft, "--local-workers", "2")
	v := waitJob(t, addr, 4*time.Minute, "the SFT job to finish", ended)
	if v.State != coordinator.StateDone {
		t.Fatalf("the SFT job ended %s (%s); log:\n%s", v.State, v.Reason, srv.logText())
	}
	srv.kill()
	policy := filepath.Join(dir, "sft.safetensors")
	if code, stdout, stderr := runCmd(t, context.Background(), "export", "--db", db, "--job", v.ID, "--out", policy); code != 0 {
		t.Fatalf("export: exit %d\n%s%s", code, stdout, stderr)
	}

	rl := filepath.Join(dir, "rl.yaml")
	writeTestFile(t, rl, []byte(fmt.Sprintf(`name: rl-add-bpe
kind: rl
model: gpt-mini
policy: %q
task: {type: add, digits: 1}
group_size: 8
max_new_tokens: 4
outer_optimizer: {type: adamw, lr: 0.0002, beta2: 0.99, clip_norm: 1}
max_epochs: 24
eval_every: 40
`, policy)))
	addr = freeAddr(t)
	srv = startProc(t, "serve", "--addr", addr, "--db", filepath.Join(dir, "rl.db"), "--job", rl, "--local-workers", "2",
		"--web-dist", dist, "--admin-token", modesAdminToken)
	srv.waitLine("coordinator listening", time.Minute)
	// A browser tab in the crowd: it samples the tokenized policy's
	// rollouts in wasm beside the two native workers.
	openContributeTab(t, addr)
	tabRollouts := int64(0)
	s0 := -1.0
	v = waitJob(t, addr, 5*time.Minute, "the RL job to finish", func(v coordinator.JobView) bool {
		if e := v.Eval; s0 < 0 && e != nil && e.Version == 0 && e.Solved != nil {
			s0 = *e.Solved
		}
		var views []coordinator.WorkerView
		if adminCall(t, http.MethodGet, "http://"+addr+"/api/v1/workers", nil, &views) == http.StatusOK {
			for _, w := range views {
				if w.Kind == protocol.KindBrowser {
					tabRollouts = max(tabRollouts, w.Rollouts)
				}
			}
		}
		return ended(v)
	})
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Solved == nil || s0 < 0 {
		t.Fatalf("RL job ended %s (%s), eval %+v, S0 %v; log:\n%s", v.State, v.Reason, v.Eval, s0, srv.logText())
	}
	if v.Spec.Tokenizer == nil { // the view leaves its data out
		t.Errorf("the RL job's spec has no tokenizer: it should have taken the policy's")
	}
	t.Logf("tokenized RL job: %d versions: solved %.3f from S0 %.3f; %d updates applied, rejections %v; the tab's rollout results accepted: %d",
		v.Version, *v.Eval.Solved, s0, v.UpdatesApplied, v.Rejections, tabRollouts)
	if tabRollouts == 0 {
		t.Errorf("the browser tab had no rollout result accepted; log:\n%s", srv.logText())
	}
	if *v.Eval.Solved < s0+0.25 {
		t.Errorf("solved %.3f after RL, S0 %.3f: want at least 25 points more; log:\n%s", *v.Eval.Solved, s0, srv.logText())
	}
}
