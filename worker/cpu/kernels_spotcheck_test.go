package cpu_test

import (
	"testing"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/internal/spotbench"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// Every GEMM kernel this build has computes a lease's update within the
// spot-check tolerance of the pure-Go kernel's, by the comparator's own
// distance: otherwise an honest volunteer on that kernel would be struck
// against one on another. An async lease and a DiLoCo lease (the preset's
// local steps) of each model, from the same parameters and examples. On
// arm64 this is the NEON kernel against pure Go (run under qemu-aarch64 by
// TestArm64BackendUnderQEMU in CI); on amd64, AVX2 and AVX-512.
func TestKernelsAgreeWithinSpotCheckTolerance(t *testing.T) {
	old := nn.KernelName()
	defer nn.UseKernel(old)
	others := 0
	for _, preset := range []string{"mnist-mlp", "mnist-cnn"} {
		for _, mode := range []string{"async", "diloco"} {
			plan := &spotbench.Plan{Model: preset}
			lease, err := plan.Lease(spotbench.Task{ID: 7, Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			if mode == "diloco" && preset == "mnist-cnn" {
				// Four of its local steps are enough to compound the
				// kernels' rounding, and keep the test quick under qemu.
				lease.LocalSteps = 4
				lease.Count = lease.BatchSize * lease.LocalSteps
			}
			spec, err := plan.ModelSpec()
			if err != nil {
				t.Fatal(err)
			}
			model, err := nn.NewModel(spec)
			if err != nil {
				t.Fatal(err)
			}
			params := make([]float32, model.NumParams)
			model.Init(params, 5)
			x, labels := worker.RandomBatch(model, lease.Count)
			b, err := cpu.New(1)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Prepare(model, lease.BatchSize); err != nil {
				t.Fatal(err)
			}
			update := func(kernel string) []float32 {
				t.Helper()
				if err := nn.UseKernel(kernel); err != nil {
					t.Fatal(err)
				}
				res, err := worker.ComputeLease(b, model, lease, params, x, labels)
				if err != nil {
					t.Fatalf("%s %s lease on %s: %v", preset, mode, kernel, err)
				}
				return res.Update
			}
			ref := update(nn.KernelGo)
			for _, k := range nn.Kernels() {
				if k == nn.KernelGo {
					continue
				}
				others++
				rel, exact := engine.Distance(update(k), ref)
				t.Logf("%s %s lease (%d steps of %d): %s vs go: relative difference %.3g (bit for bit: %v)",
					preset, mode, lease.LocalSteps, lease.BatchSize, k, rel, exact)
				if !(rel <= engine.DefaultSpotCheckTolerance) {
					t.Errorf("%s %s lease: kernel %s differs from pure Go by %.3g relative, over the spot-check tolerance %g: honest volunteers on it would be struck",
						preset, mode, k, rel, engine.DefaultSpotCheckTolerance)
				}
			}
		}
	}
	if others == 0 {
		t.Fatalf("Kernels() = %v: no kernel besides %s to compare", nn.Kernels(), nn.KernelGo)
	}
}
