package cpu

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
)

type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) grep(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// --kernel auto, end to end: the backend times the model's own step on
// every kernel at Prepare, takes one that exists, logs the figures, and
// trains with it.
func TestAutoKernelPicksAValidKernel(t *testing.T) {
	old := nn.KernelName()
	defer func() { nn.UseKernel(old); SetAutoKernel(false) }()
	SetAutoKernel(true)
	for _, preset := range []string{"mnist-mlp", "mnist-cnn"} {
		spec, _ := nn.Preset(preset)
		model, err := nn.NewModel(spec)
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(1)
		if err != nil {
			t.Fatal(err)
		}
		var log logLines
		b.SetLog(log.logf)
		if err := b.Prepare(model, 16); err != nil {
			t.Fatal(err)
		}
		got := nn.KernelName()
		if !slices.Contains(nn.Kernels(), got) {
			t.Fatalf("%s: auto took %q, not one of %v", preset, got, nn.Kernels())
		}
		lines := log.grep("kernel auto: took " + got)
		if len(lines) != 1 {
			t.Fatalf("%s: log %q, want one line saying it took %s", preset, log.lines, got)
		}
		t.Logf("%s: %s", preset, lines[0])
		for _, k := range nn.Kernels() {
			if !strings.Contains(lines[0], k+" ") {
				t.Errorf("%s: the log line does not give %s's figure: %q", preset, k, lines[0])
			}
		}
		// It trains: a gradient on the chosen kernel.
		x, labels := worker.RandomBatch(model, 16)
		params := make([]float32, model.NumParams)
		model.Init(params, 1)
		grad := make([]float32, model.NumParams)
		if _, _, err := b.Gradient(params, x, labels, grad); err != nil {
			t.Fatal(err)
		}
	}
}

// The re-check during training: after recheckAfter batches the next ones
// run in turn on each candidate, the gradients stay the training's own, and
// the decision is logged with the figures.
func TestAutoKernelRechecksOnTrainingBatches(t *testing.T) {
	for _, per := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d batches per sample", per), func(t *testing.T) { recheck(t, per) })
	}
}

func recheck(t *testing.T, per int) {
	old := nn.KernelName()
	defer func() { nn.UseKernel(old) }()
	spec, _ := nn.Preset("mnist-mlp")
	model, err := nn.NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(1)
	var log logLines
	b.tune = &kernelTuner{logf: log.logf, model: model, cands: []string{nn.KernelGonum, nn.KernelGo}, next: 2, per: per}
	if err := b.Prepare(model, 8); err != nil { // the same model: no new probe
		t.Fatal(err)
	}
	if err := nn.UseKernel(nn.KernelGonum); err != nil {
		t.Fatal(err)
	}
	x, labels := worker.RandomBatch(model, 8)
	params := make([]float32, model.NumParams)
	model.Init(params, 2)
	want := make([]float32, model.NumParams)
	if _, _, err := b.gradient(params, x, labels, want); err != nil {
		t.Fatal(err)
	}
	batches := 2 + recheckRounds*2*per + 1
	for i := range batches {
		grad := make([]float32, model.NumParams)
		if _, _, err := b.Gradient(params, x, labels, grad); err != nil {
			t.Fatal(err)
		}
		var diff, norm float64
		for j := range grad {
			diff += math.Pow(float64(grad[j]-want[j]), 2)
			norm += math.Pow(float64(want[j]), 2)
		}
		if math.Sqrt(diff/norm) > 1e-5 {
			t.Fatalf("batch %d: the gradient differs from gonum's by %g relative", i, math.Sqrt(diff/norm))
		}
	}
	lines := log.grep(fmt.Sprintf("re-check on %d training batches (%d per sample)", recheckRounds*2*per, per))
	if len(lines) != 1 {
		t.Fatalf("log %q, want one re-check line", log.lines)
	}
	if !strings.Contains(lines[0], fmt.Sprintf("(median of %d)", recheckRounds)) || !strings.Contains(lines[0], "gonum ") || !strings.Contains(lines[0], "go ") {
		t.Errorf("the re-check line lacks a kernel's figure: %q", lines[0])
	}
	if k := nn.KernelName(); k != nn.KernelGonum && k != nn.KernelGo {
		t.Errorf("after the re-check the kernel is %s", k)
	}
	if b.tune.trial != nil || b.tune.next != recheckEvery {
		t.Errorf("the trial did not end: %+v", b.tune)
	}
}
