package coordinator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// A flood of non-finite results starts at most one evaluation per
// NonFiniteEvalInterval. The first run of them evaluates at once (real
// divergence is caught as fast as ever); the fake clock of synctest makes
// the interval exact.
func TestNonFiniteEvaluationsAreRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		set := &dataset.Set{Name: "synthetic", Elem: dataset.Pixels, Kind: dataset.ClassLabels, N: 64, Shape: []int{1, 2, 2}, Classes: 2,
			U8: make([]byte, 64*4), Labels: make([]int32, 64)}
		spec := defaultSpec()
		spec.Name, spec.ShardSize, spec.EvalEvery = "nonfinite", 1, 1<<30
		spec.TargetAccuracy = 2 // never reached: an evaluation must not end the job
		spec.Model = nn.ModelSpec{Input: []int{1, 2, 2}, Layers: []nn.LayerSpec{{Type: "dense", Units: 2}}}
		var mu sync.Mutex
		evals := 0
		logf := func(format string, args ...any) {
			if strings.Contains(fmt.Sprintf(format, args...), "evaluating the model for divergence") {
				mu.Lock()
				evals++
				mu.Unlock()
			}
		}
		var ids atomic.Uint64
		j, err := newJob("nonfinite", spec, set, set, &ids, LogfLogger(logf))
		if err != nil {
			t.Fatal(err)
		}
		const interval = 10 * time.Second
		j.nonFiniteEvalEvery = interval
		ctx, cancel := context.WithCancel(context.Background())
		go j.loop(ctx, 0)
		defer func() { cancel(); <-j.stopped; j.evals.Wait() }()

		// sendNaNs submits n results whose update holds a NaN, the way
		// the connection does for an invalid result, and waits for the
		// evaluations they start to finish.
		sendNaNs := func(n int) {
			for range n {
				granted := false
				err := j.exec(ctx, func(st *jobState) {
					l := j.grant("w1", 1, "")
					if granted = len(l) == 1; granted {
						j.apply(submission{worker: "w1", res: &protocol.Result{LeaseID: l[0].ID}, reason: protocol.ReasonInvalid,
							detail: "NaN", nonFinite: true})
					}
				})
				if err != nil || !granted {
					t.Fatalf("granting and rejecting a lease: %v (granted %v, job %s)", err, granted, j.st.state)
				}
			}
			synctest.Wait()
		}
		count := func() int { mu.Lock(); defer mu.Unlock(); return evals }

		sendNaNs(nonFiniteCheck)
		if got := count(); got != 1 {
			t.Fatalf("after the first %d non-finite results: %d evaluations, want 1 at once", nonFiniteCheck, got)
		}
		sendNaNs(10 * nonFiniteCheck)
		if got := count(); got != 1 {
			t.Fatalf("%d more within the interval: %d evaluations, want still 1", 10*nonFiniteCheck, got)
		}
		time.Sleep(interval - time.Second)
		sendNaNs(1)
		if got := count(); got != 1 {
			t.Fatalf("%v after the first: %d evaluations, want still 1", interval-time.Second, got)
		}
		time.Sleep(time.Second)
		sendNaNs(1)
		if got := count(); got != 2 {
			t.Fatalf("one interval after the first, the next non-finite result: %d evaluations, want 2", got)
		}
	})
}
