package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/store"
)

const killedSweep = `
name: killed-sweep
model: mnist-mlp
mode: async
target_accuracy: 0
max_epochs: 1
eval_every: 60
sweep:
  method: random
  trials: 4
  space:
    outer_optimizer.lr: {min: 0.0003, max: 0.004, log: true}
  asha: {rungs: [6000, 18000], reduction: 2}
`

func getSweeps(addr string) ([]coordinator.SweepView, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/sweeps")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list []coordinator.SweepView
	return list, json.NewDecoder(resp.Body).Decode(&list)
}

func waitSweep(t *testing.T, addr string, timeout time.Duration, what string, cond func(coordinator.SweepView) bool) coordinator.SweepView {
	t.Helper()
	var last coordinator.SweepView
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if list, err := getSweeps(addr); err == nil && len(list) == 1 {
			if last = list[0]; cond(last) {
				return last
			}
		}
	}
	t.Fatalf("timed out waiting for %s; sweep %+v", what, last)
	return last
}

// trialHistory is each trial's metrics rows in the store.
func trialHistory(t *testing.T, dbPath string, ids []string) map[string][]store.Metric {
	t.Helper()
	db := openChecked(t, dbPath)
	defer db.Close()
	out := map[string][]store.Metric{}
	for _, id := range ids {
		rows, err := db.Metrics(context.Background(), id, 100000)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = rows
	}
	return out
}

// A coordinator SIGKILLed mid-sweep resumes the sweep: it finishes with
// the rungs it had recorded and every trial's history intact, and the
// export of the sweep is its best trial.
func TestSIGKILLMidSweepResumesTheSweep(t *testing.T) {
	testenv.Long(t, "runs coordinator and worker processes")
	dir := t.TempDir()
	dbPath, spec := filepath.Join(dir, "ct.db"), filepath.Join(dir, "sweep.yaml")
	os.WriteFile(spec, []byte(killedSweep), 0o644)
	addr := freeAddr(t)
	serveArgs := []string{"serve", "--addr", addr, "--db", dbPath, "--job", spec, "--checkpoint-interval", "300ms"}
	srv := startProc(t, serveArgs...)
	startProc(t, "work", "--coordinator", "ws://"+addr+"/ws")
	startProc(t, "work", "--coordinator", "ws://"+addr+"/ws")
	before := waitSweep(t, addr, 3*time.Minute, "two trials past the first rung", func(v coordinator.SweepView) bool {
		n := 0
		for _, d := range v.Details {
			if len(d.Rungs) > 0 {
				n++
			}
		}
		return n >= 2
	})
	srv.kill() // SIGKILL
	history := trialHistory(t, dbPath, before.Trials)

	srv = startProc(t, serveArgs...)
	srv.waitLine("resumed with 4 trials", time.Minute)
	after := waitSweep(t, addr, 5*time.Minute, "the sweep to finish", func(v coordinator.SweepView) bool { return v.State == coordinator.StateDone })
	if after.ID != before.ID || !slices.Equal(after.Trials, before.Trials) {
		t.Fatalf("after the restart: sweep %s trials %v, want %s with %v", after.ID, after.Trials, before.ID, before.Trials)
	}
	for i, d := range after.Details {
		was := before.Details[i]
		// A trial scored at a rung before the kill keeps that score; one
		// paused there at the kill was scored again only if its record had
		// not been written.
		for k, r := range was.Rungs {
			if k >= len(d.Rungs) || d.Rungs[k] != r {
				t.Errorf("trial %s: rungs before the kill %v, after %v", d.ID, was.Rungs, d.Rungs)
				break
			}
		}
		if d.State != "stopped" && d.State != "ended" {
			t.Errorf("trial %s is %s at the end", d.ID, d.State)
		}
	}
	if after.Best == nil || !(after.Best.Metric > 0.8) {
		t.Fatalf("best %+v", after.Best)
	}
	srv.cmd.Process.Signal(syscall.SIGINT)
	<-srv.done
	final := trialHistory(t, dbPath, before.Trials)
	for id, rows := range history {
		got := final[id]
		if len(got) < len(rows) {
			t.Errorf("trial %s: %d history rows before the kill, %d after", id, len(rows), len(got))
			continue
		}
		for k := range rows {
			if !got[k].At.Equal(rows[k].At) || got[k].Version != rows[k].Version {
				t.Errorf("trial %s: history row %d changed across the restart: %+v then %+v", id, k, rows[k], got[k])
				break
			}
		}
	}
	var out strings.Builder
	model := filepath.Join(dir, "best.safetensors")
	if code := run(context.Background(), []string{"export", "--db", dbPath, "--job", after.ID, "--out", model}, &out, &out); code != 0 {
		t.Fatalf("export of the sweep: exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "job "+after.Best.ID) {
		t.Errorf("export of the sweep wrote %q, want the best trial %s", out.String(), after.Best.ID)
	}
}
