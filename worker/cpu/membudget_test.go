package cpu

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

func presetModel(t *testing.T, name string) *nn.Model {
	t.Helper()
	spec, err := nn.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A batch computed in micro-batches within a memory budget gives the
// update of the whole batch in one pass, dropout masks included: on a
// transformer, on a model with dropout, one thread and two, gradient
// leases and local steps.
func TestMicroBatchesGiveTheWholeBatchsUpdate(t *testing.T) {
	gpt := presetModel(t, "gpt-mini")
	drop, err := nn.NewModel(dropoutModel)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		m            *nn.Model
		threads      int
		steps, batch int
		micro        int
	}{
		{"gpt-mini", gpt, 1, 1, 6, 2},
		{"gpt-mini, 2 threads", gpt, 2, 1, 7, 2},
		{"dropout", drop, 1, 1, 13, 4},
		{"dropout, 2 threads, local steps", drop, 2, 3, 13, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			rng := rand.New(rand.NewPCG(5, 5))
			params := make([]float32, m.NumParams)
			m.Init(params, 7)
			n := tc.batch * tc.steps
			vocab := m.NumClasses
			x := make([]float32, n*m.InputSize)
			for i := range x {
				x[i] = float32(rng.IntN(vocab))
			}
			labels := make([]int32, n*m.LabelsPerExample)
			for i := range labels {
				labels[i] = int32(rng.IntN(vocab))
			}
			kind := protocol.UpdateGradient
			if tc.steps > 1 {
				kind = protocol.UpdateDelta
			}
			lease := protocol.Lease{ID: 9, JobID: "j", Count: n, BatchSize: tc.batch, LocalSteps: tc.steps,
				Inner: protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.1}, UpdateKind: kind, Snapshot: protocol.SnapshotGranted}
			run := func(budget int64) (*protocol.Result, int) {
				b, err := New(tc.threads)
				if err != nil {
					t.Fatal(err)
				}
				b.SetMemoryBudget(budget)
				r, err := worker.ComputeLease(b, m, lease, params, x, labels)
				if err != nil {
					t.Fatal(err)
				}
				_, micro := b.MemoryPlanned()
				return r, micro
			}
			want, whole := run(0)
			if whole != perPart(tc.batch, tc.threads) {
				t.Fatalf("without a budget a pass holds %d examples, want the thread's part of the batch, %d", whole, perPart(tc.batch, tc.threads))
			}
			// The budget that fits micro-batches of tc.micro and no more.
			budget := costOf(m, tc.threads, tc.batch, tc.micro)
			got, micro := run(budget)
			if micro != tc.micro {
				t.Fatalf("budget %d: micro-batches of %d examples, want %d", budget, micro, tc.micro)
			}
			if d := relDiff(got.Update, want.Update); d > 1e-5 {
				t.Errorf("micro-batches of %d: the update is %.3g relative from the whole batch's", micro, d)
			}
			if math.Abs(got.LossSum-want.LossSum) > 1e-5*want.LossSum || got.Correct != want.Correct {
				t.Errorf("micro-batches: loss %v, %d right; the whole batch: %v, %d", got.LossSum, got.Correct, want.LossSum, want.Correct)
			}
		})
	}
}

// costOf is what planMemory counts for threads parts of batch in
// micro-batches of micro.
func costOf(m *nn.Model, threads, batch, micro int) int64 {
	params := 4 * int64(m.NumParams)
	c := jobCopies*params + int64(threads)*m.WorkspaceBytes(micro) + int64(threads-1)*params
	if micro < perPart(batch, threads) {
		c += int64(threads) * params
	}
	return c
}

// gpt-small at batch 16 wants about 1.3 GB in one pass; a worker given
// 600 MB prepares within it (the heap it takes is measured), and one
// given too little for even one example says what to do.
func TestPrepareStaysWithinTheMemoryBudget(t *testing.T) {
	m := presetModel(t, "gpt-small")
	const batch, budget = 16, 600 << 20
	b, err := New(2)
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	b.SetLog(func(f string, a ...any) { logged = append(logged, f) })
	b.SetMemoryBudget(budget)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := b.Prepare(m, batch); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	planned, micro := b.MemoryPlanned()
	if planned > budget || micro < 1 || micro >= batch {
		t.Fatalf("planned %d bytes in micro-batches of %d, want within %d and under the batch of %d", planned, micro, budget, batch)
	}
	// Prepare allocates the backend's part of the plan: all but the
	// job's copies of the parameters, which the worker holds.
	outside := int64(jobCopies) * 4 * int64(m.NumParams)
	if took := int64(after.TotalAlloc - before.TotalAlloc); took > planned-outside+1<<20 {
		t.Errorf("Prepare allocated %d MB, the plan gave the backend %d MB", took>>20, (planned-outside)>>20)
	}
	if len(logged) == 0 {
		t.Error("the backend did not log that it computes in micro-batches")
	}
	t.Logf("gpt-small, batch %d, 2 threads, budget %d MB: %d thread(s) of micro-batches of %d, %d MB planned (one pass per thread: %d MB)",
		batch, budget>>20, len(b.parts), micro, planned>>20, costOf(m, 2, batch, batch/2)>>20)

	small, _ := New(1)
	small.SetMemoryBudget(300 << 20)
	err = small.Prepare(m, batch)
	if err == nil || !strings.Contains(err.Error(), "--memory-mb") {
		t.Fatalf("a budget under one example's needs: %v, want an error naming --memory-mb", err)
	}
	if _, _, err := small.Gradient(make([]float32, m.NumParams), nil, nil, nil); err == nil {
		t.Fatal("Gradient after a failed Prepare did not fail")
	}
}

// The coordinator places a job on a worker that splits batches by
// compute.MemoryNeed's micro figure: a budget of that much is enough for
// this backend to train it on one thread, and less is not.
func TestMicroMemoryNeedIsWhatTheBackendPlans(t *testing.T) {
	for _, name := range []string{"gpt-small", "charlm", "mnist-cnn"} {
		m := presetModel(t, name)
		_, micro := compute.MemoryNeed(m, 16)
		if _, err := planMemory(m, 1, 16, micro); err != nil {
			t.Errorf("%s: a budget of MemoryNeed's micro figure (%d bytes): %v", name, micro, err)
		}
		if _, err := planMemory(m, 1, 16, micro-4*int64(m.NumParams)-1); err == nil {
			t.Errorf("%s: a budget of a vector under MemoryNeed's micro figure was enough: the figure asks too much", name)
		}
	}
}

// Where one example per thread does not fit, fewer threads compute.
func TestMemoryBudgetTakesFewerThreads(t *testing.T) {
	m := presetModel(t, "gpt-small")
	budget := costOf(m, 2, 16, 1) - 1 // two threads' single examples do not fit; one's does
	p, err := planMemory(m, 2, 16, budget)
	if err != nil {
		t.Fatal(err)
	}
	if p.parts != 1 || p.micro < 1 || p.bytes > budget {
		t.Fatalf("plan %s, want one thread within the budget", p)
	}
}
