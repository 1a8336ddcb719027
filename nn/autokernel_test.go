package nn

import (
	"slices"
	"strings"
	"testing"
)

// The choice of --kernel auto, fed with measured figures (seconds per
// example): no clock involved.
func TestFastestKernelTakesTheLowestMedian(t *testing.T) {
	ts := []KernelTiming{
		// One fast outlier must not win over a steadily faster kernel.
		{Name: "openblas", Secs: []float64{1e-6, 4e-4, 3.9e-4, 4.1e-4, 4e-4}},
		{Name: "avx512", Secs: []float64{1.7e-4, 1.6e-4, 5e-4, 1.65e-4, 1.7e-4}},
		{Name: "gonum", Secs: nil},
	}
	if got := FastestKernel(ts); got != 1 {
		t.Errorf("FastestKernel = %d, want 1 (avx512)", got)
	}
	if got := FastestKernel([]KernelTiming{{Name: "a"}, {Name: "b"}}); got != -1 {
		t.Errorf("FastestKernel without samples = %d, want -1", got)
	}
	// Ties go to the earlier one.
	if got := FastestKernel([]KernelTiming{{Name: "a", Secs: []float64{2, 1, 3}}, {Name: "b", Secs: []float64{1, 2, 9}}}); got != 0 {
		t.Errorf("FastestKernel on a tie = %d, want 0", got)
	}
	if m := (KernelTiming{Secs: []float64{4, 1, 3, 2}}).Median(); m != 2.5 {
		t.Errorf("median of 4 values = %v, want 2.5", m)
	}
}

// The case that a GEMM probe got wrong, as figures: openblas won a tiny
// GEMM, avx512 wins the model's step; whatever the step says decides.
func TestSwitchKernel(t *testing.T) {
	step := []KernelTiming{
		{Name: "openblas", Secs: []float64{1 / 2637.0, 1 / 2700.0, 1 / 2600.0}},
		{Name: "avx512", Secs: []float64{1 / 6115.0, 1 / 6000.0, 1 / 6200.0}},
	}
	if got := SwitchKernel("openblas", step, 0.03); got != "avx512" {
		t.Errorf("SwitchKernel from openblas = %s, want avx512", got)
	}
	if got := SwitchKernel("avx512", step, 0.03); got != "avx512" {
		t.Errorf("SwitchKernel from avx512 = %s, want to keep it", got)
	}
	// Within the margin: keep the current one.
	close := []KernelTiming{
		{Name: "a", Secs: []float64{1.00, 1.00, 1.00}},
		{Name: "b", Secs: []float64{0.98, 0.99, 0.98}},
	}
	if got := SwitchKernel("a", close, 0.03); got != "a" {
		t.Errorf("SwitchKernel within the margin = %s, want a", got)
	}
	if got := SwitchKernel("a", close, 0.01); got != "b" {
		t.Errorf("SwitchKernel past a 1%% margin = %s, want b", got)
	}
	// The current kernel was not timed, or nobody was: keep it.
	if got := SwitchKernel("c", close, 0.03); got != "c" {
		t.Errorf("SwitchKernel for an untimed current = %s, want c", got)
	}
	if got := SwitchKernel("a", []KernelTiming{{Name: "a"}, {Name: "b"}}, 0.03); got != "a" {
		t.Errorf("SwitchKernel without samples = %s, want a", got)
	}
}

func TestKeepAfterWarmup(t *testing.T) {
	warm := []float64{1e-4, 2.4e-4, 5e-4, 0, 1.2e-4}
	if got := KeepAfterWarmup(warm, 2.5); !slices.Equal(got, []int{0, 1, 4}) {
		t.Errorf("KeepAfterWarmup = %v, want [0 1 4]", got)
	}
	if got := KeepAfterWarmup([]float64{0, 0}, 2.5); len(got) != 0 {
		t.Errorf("KeepAfterWarmup with nothing run = %v", got)
	}
}

func TestFormatTimings(t *testing.T) {
	s := FormatTimings([]KernelTiming{
		{Name: "gonum", Secs: []float64{1e-3}},
		{Name: "avx512", Secs: []float64{1e-4, 1e-4, 1e-4}},
		{Name: "go"},
	})
	want := "avx512 10000 examples/s (median of 3), gonum 1000 examples/s (median of 1), go not timed"
	if s != want {
		t.Errorf("FormatTimings = %q, want %q", s, want)
	}
	if !strings.HasPrefix(s, "avx512") {
		t.Error("not fastest first")
	}
}
