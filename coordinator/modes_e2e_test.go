package coordinator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/worker"
)

// Sync with one backup: each round leases 3 tasks and closes on the
// first 2 results. One worker is slowed down 300 ms a step: its results
// come after the two fast workers closed the round and are rejected as
// late, rounds never wait for it (none closes short, by round_timeout),
// and the job reaches 97%.
func TestSyncWithBackupClosesRoundsWithoutTheSlowWorker(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	g := newTestGrid(t, modeSpec(t, "mode: sync\nround_size: 2\nbackup_workers: 1\nround_timeout: 2m\neval_every: 100\n"))
	g.addWorker(1, nil)
	g.addWorker(1, nil)
	var slow *slowBackend
	slowWorker := g.addWorker(1, func(b worker.Backend) worker.Backend {
		slow = &slowBackend{Backend: b, delay: 300 * time.Millisecond}
		return slow
	})
	v := g.waitDone(4 * time.Minute)
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.97 {
		t.Fatalf("job ended %s (%s) with eval %+v, want done at >= 0.97", v.State, v.Reason, v.Eval)
	}
	ss := slowWorker.Stats()
	if v.Mode != "sync" || v.RoundsShort != 0 {
		t.Errorf("mode %s, %d rounds closed short by round_timeout; want sync rounds closed by the two fast workers", v.Mode, v.RoundsShort)
	}
	if slow.calls.Load() > 0 && ss.Rejections["late"] == 0 {
		t.Errorf("the slowed worker computed %d steps and none was late: %+v", slow.calls.Load(), ss)
	}
	if v.Rejections["invalid"] != 0 || v.Rejections["stale"] != 0 {
		t.Errorf("rejections %v: sync rejects only late results", v.Rejections)
	}
	// One version per round of 2 results (the final version may be below
	// the rounds taken: the job keeps the model its evaluation measured).
	if v.UpdatesApplied < 2*v.Version {
		t.Errorf("%d results accepted over %d versions; want 2 a round", v.UpdatesApplied, v.Version)
	}
	t.Logf("sync K=2+1: accuracy %.4f at version %d, %d examples; late %d (slow worker %d accepted, %d late)",
		v.Eval.Accuracy, v.Eval.Version, v.ExamplesSeen, v.Rejections["late"], ss.Accepted, ss.Rejections["late"])
}

// skipUnlessWorkersRun skips when the workers give the job's leases back
// instead of computing them (a worker that does not yet run the mode's
// inner optimizer or update kind says why): the mode's rule is tested
// without them in package engine and by TestPartialRoundSurvivesRestart.
func skipUnlessWorkersRun(t *testing.T, g *testGrid, mode string) {
	t.Helper()
	v := g.waitFor("the first result or a lease given back", time.Minute, func(v coordinator.JobView) bool {
		return v.UpdatesApplied > 0 || v.RoundResults > 0 || v.LeasesReleased > 0
	})
	if v.UpdatesApplied == 0 && v.RoundResults == 0 && v.LeasesReleased > 0 {
		t.Skipf("the workers in this build give %s leases back (%q): needs workers that run inner adamw and update_kind delta", mode, v.LastRelease)
	}
}

// DiLoCo (H=16, inner AdamW, outer Nesterov 0.7/0.9 on rounds of 2) and
// async DiLoCo (Delayed Nesterov) train mnist-mlp to 97% with two workers.
func TestDiLoCoModesReachTarget(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	for _, c := range []struct{ name, spec string }{
		{"diloco", "mode: diloco\nlocal_steps: 16\nround_size: 2\neval_every: 200\n"},
		{"async_diloco", "mode: diloco\nasync_diloco: true\nlocal_steps: 16\nround_size: 2\neval_every: 200\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newTestGrid(t, modeSpec(t, c.spec))
			g.addWorker(1, nil)
			g.addWorker(1, nil)
			skipUnlessWorkersRun(t, g, c.name)
			v := g.waitDone(4 * time.Minute)
			if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.97 {
				t.Fatalf("job ended %s (%s) with eval %+v, want done at >= 0.97", v.State, v.Reason, v.Eval)
			}
			if v.Rejections["invalid"] != 0 || !strings.HasPrefix(v.Mode, "diloco") {
				t.Errorf("mode %s, rejections %v", v.Mode, v.Rejections)
			}
			t.Logf("%s: accuracy %.4f at version %d, %d examples, %d results, rejections %v",
				c.name, v.Eval.Accuracy, v.Eval.Version, v.ExamplesSeen, v.UpdatesApplied, v.Rejections)
		})
	}
}
