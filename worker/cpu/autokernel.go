package cpu

import (
	"fmt"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
)

// --kernel auto: the kernel is chosen by timing the job's own training
// step, on this machine, when the model is known (Prepare), and checked
// again on the real batches once training runs.
//
// The probe at Prepare runs the model's Gradient on a synthetic batch of
// the job's batch size (smaller if one step would take longer than
// probeStep, sized from a step of one example) on every kernel: two
// warm-up steps each, the faster of which counts (only one for a kernel
// over 2×warmupFactor behind on it). It drops the kernels more than
// warmupFactor behind the fastest warm-up, times the rest in rounds that
// alternate between them (the order rotating each round) and takes the
// lowest median. It stays within about probeBudget of timed work.
//
// The re-check: after recheckAfter training batches, and then every
// recheckEvery, the next batches run in turn on each kernel that was
// close in the probe (up to three), recheckRounds samples each (a sample
// is as many consecutive batches as last about probeSample); those are real
// training steps (every kernel computes the same gradient up to float32
// rounding), timed per example. The worker switches when another kernel's
// median beats the current one's by more than switchMargin. Every choice
// is logged with its figures.
const (
	probeStep      = 20 * time.Millisecond  // longest synthetic step the probe times
	probeSample    = 4 * time.Millisecond   // a timed sample is at least this long
	probeBudget    = 300 * time.Millisecond // timed rounds, all kernels together
	probeRounds    = 5                      // rounds, unless the budget allows fewer
	probeMinRounds = 3
	warmupFactor   = 2.5 // drop kernels whose warm-up step is slower than this × the fastest
	closeFactor    = 1.3 // re-check kernels within this factor of the probe's fastest
	maxRecheck     = 3   // kernels in a re-check
	recheckAfter   = 20  // training batches before the first re-check
	recheckEvery   = 500
	recheckRounds  = 5
	switchMargin   = 0.03
)

// kernelTuner is a Backend's --kernel auto state.
type kernelTuner struct {
	logf  func(string, ...any)
	model *nn.Model // the model the probe ran on
	cands []string  // kernels worth re-checking, fastest first
	count int       // training batches since the last check
	next  int       // re-check after this many
	trial []nn.KernelTiming
	step  int // batches of the trial so far
	per   int // batches per timed sample of a trial (each at least probeSample)
	// secs and examples add up the trial's current sample.
	secs     float64
	examples int
	probed   time.Duration
}

// probe chooses the kernel for model at batch maxBatch (see above) and
// switches to it.
func (t *kernelTuner) probe(b *Backend, model *nn.Model, maxBatch int) error {
	names := nn.Kernels()
	if len(names) == 0 {
		return fmt.Errorf("no GEMM kernel available")
	}
	start := time.Now()
	in, lpe := model.InputSize, model.LabelsPerExample
	x, labels := worker.RandomBatch(model, maxBatch)
	params := make([]float32, model.NumParams)
	model.Init(params, 1)
	grad := make([]float32, model.NumParams)
	n := 1 // examples per synthetic step, sized below
	// run returns the seconds per example of steps steps on kernel k.
	run := func(k string, steps int) (float64, error) {
		if err := nn.UseKernel(k); err != nil {
			return 0, err
		}
		t0 := time.Now()
		for range steps {
			if _, _, err := b.gradient(params, x[:n*in], labels[:n*lpe], grad); err != nil {
				return 0, err
			}
		}
		return time.Since(t0).Seconds() / float64(steps*n), nil
	}
	// Size the synthetic batch from one example on the first kernel:
	// steps longer than probeStep would make the probe too long (the
	// re-check times the real batches later).
	if _, err := run(names[0], 2); err != nil {
		return err
	}
	one, err := run(names[0], 1)
	if err != nil {
		return err
	}
	n = max(1, min(maxBatch, int(probeStep.Seconds()/one)))
	warm := make([]float64, len(names))
	firstBest := 0.0
	for i, k := range names {
		w, err := run(k, 1)
		if err != nil {
			return err
		}
		if firstBest > 0 && w > 2*warmupFactor*firstBest {
			// Far behind already on its cold first step: its time stands
			// as its warm-up figure, and it is not timed again.
			warm[i] = w
			continue
		}
		if firstBest == 0 || w < firstBest {
			firstBest = w
		}
		// The faster of its two steps: a step the machine interrupted
		// must not drop a kernel.
		w2, err := run(k, 1)
		if err != nil {
			return err
		}
		warm[i] = min(w, w2)
	}
	keep := nn.KeepAfterWarmup(warm, warmupFactor)
	steps := make([]int, len(names))
	var perRound float64
	for _, i := range keep {
		steps[i] = max(1, int(probeSample.Seconds()/(warm[i]*float64(n))+0.5))
		perRound += float64(steps[i]) * warm[i] * float64(n)
	}
	rounds := probeRounds
	if perRound > 0 {
		rounds = min(probeRounds, max(probeMinRounds, int(probeBudget.Seconds()/perRound)))
	}
	ts := make([]nn.KernelTiming, len(names))
	for i, k := range names {
		ts[i].Name = k
	}
	for r := range rounds {
		for j := range keep {
			i := keep[(j+r)%len(keep)]
			s, err := run(names[i], steps[i])
			if err != nil {
				return err
			}
			ts[i].Secs = append(ts[i].Secs, s)
		}
	}
	best := nn.FastestKernel(ts)
	if best < 0 {
		return fmt.Errorf("kernel auto: no kernel could be timed")
	}
	if err := nn.UseKernel(names[best]); err != nil {
		return err
	}
	t.model = model
	t.cands = t.cands[:0]
	t.cands = append(t.cands, names[best])
	for _, i := range rankByRate(ts) {
		if i != best && len(t.cands) < maxRecheck && len(ts[i].Secs) > 0 && ts[i].Median() <= closeFactor*ts[best].Median() {
			t.cands = append(t.cands, names[i])
		}
	}
	t.count, t.next, t.trial = 0, recheckAfter, nil
	// A re-check sample spans enough real batches to last probeSample.
	t.per = max(1, int(probeSample.Seconds()/(ts[best].Median()*float64(maxBatch))+0.999))
	t.probed = time.Since(start)
	var dropped []string
	for i, k := range names {
		if len(ts[i].Secs) == 0 {
			dropped = append(dropped, fmt.Sprintf("%s %.0f", k, 1/warm[i]))
		}
	}
	note := ""
	if len(dropped) > 0 {
		note = fmt.Sprintf("; on warm-up steps, examples/s: %s (more than %.1fx slower, not timed further)", strings.Join(dropped, ", "), warmupFactor)
	}
	timed := make([]nn.KernelTiming, 0, len(keep))
	for _, i := range keep {
		timed = append(timed, ts[i])
	}
	t.log("kernel auto: took %s for %d parameters, synthetic batch of %d, %d rounds in %.2f s: %s%s; re-check on the training batches: %s",
		names[best], model.NumParams, n, rounds, t.probed.Seconds(), nn.FormatTimings(timed), note, strings.Join(t.cands, ", "))
	return nil
}

// rankByRate returns the indices of ts, fastest median first (untimed last).
func rankByRate(ts []nn.KernelTiming) []int {
	idx := make([]int, 0, len(ts))
	left := make([]bool, len(ts))
	for range ts {
		best := -1
		for i := range ts {
			if left[i] {
				continue
			}
			if best < 0 || ts[i].Rate() > ts[best].Rate() {
				best = i
			}
		}
		left[best] = true
		idx = append(idx, best)
	}
	return idx
}

// gradient is Backend.Gradient under --kernel auto: it counts batches and,
// when a re-check is due, runs this batch on the trial's next kernel.
func (t *kernelTuner) gradient(b *Backend, params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	if t.trial == nil {
		t.count++
		if t.count <= t.next || len(t.cands) < 2 {
			return b.gradient(params, x, labels, grad)
		}
		t.trial = make([]nn.KernelTiming, len(t.cands))
		for i, k := range t.cands {
			t.trial[i].Name = k
		}
		t.step, t.secs, t.examples = 0, 0, 0
	}
	current := nn.KernelName()
	nk := len(t.trial)
	per := max(1, t.per)
	sample := t.step / per // a sample is per consecutive batches on one kernel
	round := sample / nk
	i := (sample + round) % nk // rotate the order each round
	if err := nn.UseKernel(t.trial[i].Name); err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	loss, hits, err := b.gradient(params, x, labels, grad)
	t.secs += time.Since(t0).Seconds()
	t.examples += len(labels) / max(1, b.model.LabelsPerExample)
	t.step++
	if t.step%per == 0 {
		if err == nil && t.examples > 0 {
			t.trial[i].Secs = append(t.trial[i].Secs, t.secs/float64(t.examples))
		}
		t.secs, t.examples = 0, 0
	}
	if t.step < recheckRounds*nk*per {
		if err2 := nn.UseKernel(current); err2 != nil && err == nil {
			err = err2
		}
		return loss, hits, err
	}
	t.finishTrial(current)
	return loss, hits, err
}

// finishTrial picks the kernel from the trial's timings; before is the
// kernel that ran before the trial.
func (t *kernelTuner) finishTrial(before string) {
	choice := nn.SwitchKernel(before, t.trial, switchMargin)
	if err := nn.UseKernel(choice); err != nil {
		choice = before
		nn.UseKernel(before)
	}
	verb := "keeping"
	if choice != before {
		verb = "switching to"
	}
	t.log("kernel auto: re-check on %d training batches (%d per sample): %s; %s %s", len(t.trial)*recheckRounds*max(1, t.per), max(1, t.per), nn.FormatTimings(t.trial), verb, choice)
	// The fastest first, for the next re-check.
	for i, k := range t.cands {
		if k == choice {
			t.cands[0], t.cands[i] = t.cands[i], t.cands[0]
		}
	}
	t.trial = nil
	t.count, t.next = 0, recheckEvery
}

func (t *kernelTuner) log(format string, args ...any) {
	if t.logf != nil {
		t.logf(format, args...)
	}
}
