package coordinator_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
)

func TestMLPReaches97WithTwoWorkers(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	g := newTestGrid(t, jobSpec(t, "mnist-mlp", nil))
	g.addWorker(1, nil)
	g.addWorker(1, nil)
	v := g.waitDone(4 * time.Minute)
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.97 {
		t.Fatalf("job ended %s (%s) with eval %+v, want done at >= 0.97", v.State, v.Reason, v.Eval)
	}
	if v.Rejections["invalid"] != 0 {
		t.Errorf("honest workers had %d results rejected as invalid", v.Rejections["invalid"])
	}
	if !strings.Contains(v.Reason, "target accuracy") {
		t.Errorf("reason %q, want the target accuracy reached", v.Reason)
	}
	for i, w := range g.workers {
		if s := w.Stats(); s.Accepted == 0 {
			t.Errorf("worker %d contributed nothing: %+v", i, s)
		}
	}
	t.Logf("mnist-mlp: accuracy %.4f at version %d, epoch %d, %d examples, mean staleness %.2f, rejections %v",
		v.Eval.Accuracy, v.Eval.Version, v.Epoch, v.ExamplesSeen, v.MeanStaleness, v.Rejections)
}

func TestCNNReaches95WithTwoWorkers(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	g := newTestGrid(t, jobSpec(t, "mnist-cnn", func(s *jobspec.Spec) {
		s.TargetAccuracy = 0.95
		s.MaxEpochs = 2
		s.EvalEvery = 150
	}))
	g.addWorker(1, nil)
	g.addWorker(1, nil)
	v := g.waitDone(5 * time.Minute)
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.95 {
		t.Fatalf("job ended %s (%s) with eval %+v, want done at >= 0.95", v.State, v.Reason, v.Eval)
	}
	if v.Rejections["invalid"] != 0 {
		t.Errorf("honest workers had %d results rejected as invalid", v.Rejections["invalid"])
	}
	t.Logf("mnist-cnn: accuracy %.4f at version %d, %d examples", v.Eval.Accuracy, v.Eval.Version, v.ExamplesSeen)
}

// slowBackend delays every gradient, a volunteer on a very slow machine.
type slowBackend struct {
	worker.Backend
	delay time.Duration
	calls atomic.Int64
}

func (b *slowBackend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	b.calls.Add(1)
	time.Sleep(b.delay)
	return b.Backend.Gradient(params, x, labels, grad)
}

func TestStaleResultsRejectedJobStillReachesTarget(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	g := newTestGrid(t, jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.MaxStaleness = 2
	}))
	fast := g.addWorker(1, nil)
	var slow *slowBackend
	slowWorker := g.addWorker(1, func(b worker.Backend) worker.Backend {
		slow = &slowBackend{Backend: b, delay: 400 * time.Millisecond}
		return slow
	})
	v := g.waitDone(4 * time.Minute)
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < v.Spec.TargetAccuracy {
		t.Fatalf("job ended %s (%s) with eval %+v, want the target %.2f reached", v.State, v.Reason, v.Eval, v.Spec.TargetAccuracy)
	}
	ss, fs := slowWorker.Stats(), fast.Stats()
	if v.Rejections["stale"] == 0 || ss.Rejections["stale"] == 0 || ss.Rejections["stale"] != v.Rejections["stale"]-fs.Rejections["stale"] {
		t.Errorf("the delayed worker's late results were not rejected as stale: job rejections %v, slow worker %+v", v.Rejections, ss)
	}
	// Only results computed before the healthy worker got going can be
	// fresh enough; the rest must be stale.
	if ss.Rejections["stale"] < 2*ss.Accepted {
		t.Errorf("the delayed worker had %d results accepted and %d rejected; with staleness bound 2 nearly all should be stale", ss.Accepted, ss.Rejected)
	}
	if fs.Accepted == 0 || fs.Rejected > fs.Accepted/10 {
		t.Errorf("the healthy worker's results should be applied: %+v", fs)
	}
	if v.Rejections["invalid"] != 0 {
		t.Errorf("honest workers had %d results rejected as invalid", v.Rejections["invalid"])
	}
	if slow.calls.Load() == 0 {
		t.Error("the delayed worker never computed anything")
	}
	t.Logf("stale rejections %d; slow worker %d accepted / %d rejected; fast worker %d accepted / %d rejected; accuracy %.4f",
		v.Rejections["stale"], ss.Accepted, ss.Rejected, fs.Accepted, fs.Rejected, v.Eval.Accuracy)
}

// local_steps > 1: workers run inner SGD and return pseudo-gradients
// (w_base - w_after)/inner_lr; with an outer SGD at the inner rate this is
// asynchronous local SGD.
func TestLocalSGDReaches95(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	g := newTestGrid(t, jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.OuterOptimizer = nn.OptimizerSpec{Type: "sgd", LR: 0.1}
		s.InnerOptimizer.LR = 0.1
		s.LocalSteps = 4
		s.TargetAccuracy = 0.95
		s.EvalEvery = 50
		s.MaxEpochs = 3
	}))
	g.addWorker(1, nil)
	g.addWorker(1, nil)
	v := g.waitDone(3 * time.Minute)
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.95 {
		t.Fatalf("job ended %s (%s) with eval %+v, want done at >= 0.95", v.State, v.Reason, v.Eval)
	}
	// Shards of 1000 split into tasks of 256, 256, 256 and 232: 250 a task
	// on average, against 64 for one step.
	if per := float64(v.ExamplesSeen) / float64(v.UpdatesApplied); per < 240 {
		t.Errorf("%.1f examples per update, want about 250 (4 steps of 64 a task)", per)
	}
	t.Logf("local SGD: accuracy %.4f at version %d, %d examples", v.Eval.Accuracy, v.Eval.Version, v.ExamplesSeen)
}

// A model blown up by its steps fails the job with a reason, instead of
// leaving workers sending NaNs forever. One huge accepted update at a huge
// rate takes every parameter to about 1e33: finite, but the forward pass
// overflows, so the next evaluation's loss is NaN. (Real workers at a huge
// rate do not always get there: the model may settle as finite garbage.)
func TestDivergedJobFails(t *testing.T) {
	g := newTestGrid(t, jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.OuterOptimizer = nn.OptimizerSpec{Type: "sgd", LR: 1000}
		s.MaxUpdateNormRatio = 0 // let the bad step through
		s.Robust.Method = "none" // no clip, and no validation to refuse it
		s.EvalEvery = 1
	}))
	rc := g.joinRaw()
	l := rc.leases(1)[0]
	if a := submitConst(rc, l, l.BaseVersion, -1e30); !a.Accepted {
		t.Fatalf("huge update: %+v, want accepted (no norm check)", a)
	}
	v := g.waitDone(2 * time.Minute)
	if v.State != coordinator.StateFailed || !strings.Contains(v.Reason, "diverged") {
		t.Fatalf("job ended %s (%s), want failed as diverged", v.State, v.Reason)
	}
	var raw map[string]any
	g.getJSON("/api/v1/jobs/"+g.job.ID, &raw)
	if eval, _ := raw["eval"].(map[string]any); eval == nil || eval["loss"] != nil {
		t.Errorf("eval %v: a NaN loss should be null in JSON", raw["eval"])
	}
}
