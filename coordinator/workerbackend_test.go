package coordinator_test

import (
	"slices"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// A CPU worker under --kernel auto says hello on a provisional kernel and
// chooses its kernel by timing the job's model afterwards: the worker
// view (the admin page's Backend) shows the kernel it chose, the one its
// kernel log names, not the hello's.
func TestWorkerViewNamesTheKernelItChose(t *testing.T) {
	if ks := nn.Kernels(); !slices.Contains(ks, "go") || len(ks) < 2 {
		t.Skipf("kernels %v: the test needs the reference kernel go and a faster one", ks)
	}
	before := nn.KernelName()
	// The provisional kernel is the slowest, so the probe moves off it.
	if err := nn.UseKernel("go"); err != nil {
		t.Fatal(err)
	}
	cpu.SetAutoKernel(true)
	t.Cleanup(func() {
		cpu.SetAutoKernel(false)
		if err := nn.UseKernel(before); err != nil {
			t.Error(err)
		}
	})

	g := newTestGrid(t, quietJob(t))
	g.addWorker(1, nil)
	g.waitFor("results from the worker", time.Minute, func(v coordinator.JobView) bool { return v.UpdatesApplied >= 3 })
	ws := g.srv.WorkerViews()
	if len(ws) != 1 {
		t.Fatalf("%d workers", len(ws))
	}
	shown := ws[0].Backend
	if chosen := "cpu-" + nn.KernelName(); shown != chosen || chosen == "cpu-go" {
		t.Errorf("the worker view shows backend %q; the worker runs %s (the hello named cpu-go)", shown, chosen)
	}
}
