package web_test

import (
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// A mixed crowd with the modes' answer to it: one browser tab and one
// native worker, dynamic_local_steps and latest snapshots, every other
// setting the default (max_staleness 8 included). The tab does few steps
// a task and the native worker many, so versions move at the pace of
// whole tasks, and the tab's base is fixed when it starts computing: the
// job reaches 97% and over half of the tab's results are accepted (with
// fixed H and granted snapshots most were 20-45 versions stale).
func TestMixedCrowdWithDynamicLocalSteps(t *testing.T) {
	testenv.Long(t, "trains in Chromium beside a native worker")
	spec, err := jobspec.Parse([]byte("name: mixed\nmodel: mnist-mlp\ndynamic_local_steps: true\nsnapshot: latest\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := newSite(t, spec)
	ctx := testbrowser.New(t)
	s.contribute(t, ctx)
	s.waitFor("the browser worker to connect", time.Minute, func() bool {
		n, _, _ := s.browserWorkers()
		return n == 1
	})
	stop := startNativeWorker(t, s.wsURL(), 1)
	defer stop()
	s.waitFor("a result or a lease given back", time.Minute, func() bool {
		v := s.view()
		return v.UpdatesApplied > 0 || v.LeasesReleased > 0
	})
	if v := s.view(); v.UpdatesApplied == 0 {
		t.Skipf("the workers in this build give latest-snapshot leases back (%q): needs workers that answer them with start", v.LastRelease)
	}
	var accepted, rejected int64
	s.waitFor("the job to finish", 5*time.Minute, func() bool {
		for _, w := range s.srv.WorkerViews() {
			if w.Kind == protocol.KindBrowser {
				accepted, rejected = max(accepted, w.Accepted), max(rejected, w.Rejected)
			}
		}
		return s.view().State != coordinator.StateRunning
	})
	v := s.view()
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.97 {
		t.Fatalf("job ended %s (%s) with eval %+v; want done at >= 0.97", v.State, v.Reason, v.Eval)
	}
	t.Logf("done at version %d, accuracy %.4f; the tab: %d accepted, %d rejected; job rejections %v",
		v.Version, v.Eval.Accuracy, accepted, rejected, v.Rejections)
	if accepted == 0 || accepted <= rejected {
		t.Errorf("the tab had %d results accepted and %d rejected; want over half accepted", accepted, rejected)
	}
}
