package coordinator_test

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// BenchmarkSweepASHA (make bench-sweep) runs one random search of 8
// trials over the outer rate and the batch size on mnist-mlp twice on the
// same grid of 4 workers: first every trial to its full budget (one
// epoch, no target), then the same 8 trials (the same seed draws the same
// values) with ASHA. It reports how far the trial ASHA picks is from the
// best of the 8, each scored by its full-budget run, and the share of the
// full runs' examples ASHA spent. SWEEP_RUNGS and SWEEP_REDUCTION set
// ASHA's rungs ("8000, 30000") and reduction (3); SWEEP_OUT, if set, names
// a file for the table (docs/BENCHMARKS.md, "Sweeps").
func BenchmarkSweepASHA(b *testing.B) {
	const space = `
name: bench-sweep
model: mnist-mlp
mode: async
target_accuracy: 0
max_epochs: 1
eval_every: 1000000
sweep:
  method: random
  trials: 8
  space:
    outer_optimizer.lr: {min: 0.0002, max: 0.01, log: true}
    batch_size: [32, 64, 128]
`
	for range b.N {
		g := newTestGrid(b, endlessMLP(b, "idle", 1))
		if _, err := g.srv.PauseJob(g.ctx, g.job.ID); err != nil {
			b.Fatal(err)
		}
		for range 4 {
			g.addWorker(1, nil)
		}
		full, fullTime := runSweep(b, g, space)
		rungs, reduction := os.Getenv("SWEEP_RUNGS"), os.Getenv("SWEEP_REDUCTION")
		if rungs == "" {
			rungs = "8000, 30000"
		}
		if reduction == "" {
			reduction = "3"
		}
		asha, ashaTime := runSweep(b, g, space+"  asha: {rungs: ["+rungs+"], reduction: "+reduction+"}\n")

		finals := map[string]float64{} // by the trial's values
		bestFull := -1.0
		var total int64
		for _, d := range full.Details {
			if d.Final == nil {
				b.Fatalf("full-budget trial %s has no final metric: %+v", d.ID, d)
			}
			finals[pointKey(d.Point)] = d.Final.Value
			bestFull = max(bestFull, d.Final.Value)
			total += d.ExamplesSeen
		}
		var chosen string
		for _, d := range asha.Details {
			if asha.Best != nil && d.ID == asha.Best.ID {
				chosen = pointKey(d.Point)
			}
		}
		picked, ok := finals[chosen]
		if !ok {
			b.Fatalf("ASHA's best %+v matches no full-budget trial", asha.Best)
		}
		gap := 100 * (bestFull - picked)
		frac := float64(asha.ExamplesSeen) / float64(total)
		b.ReportMetric(gap, "points-from-best")
		b.ReportMetric(100*frac, "%examples")
		var tab strings.Builder
		fmt.Fprintf(&tab, "| trial values | full budget: final accuracy | ASHA: state | ASHA: examples | ASHA: rungs |\n| --- | --- | --- | --- | --- |\n")
		for _, d := range asha.Details {
			var rungs []string
			for _, r := range d.Rungs {
				rungs = append(rungs, fmt.Sprintf("%.4f @ %d", r.Value, r.Examples))
			}
			mark := ""
			if d.ID == asha.Best.ID {
				mark = " (picked)"
			}
			fmt.Fprintf(&tab, "| %s%s | %.4f | %s | %d | %s |\n", chosenLabel(d.Point), mark, finals[pointKey(d.Point)], d.State, d.ExamplesSeen, strings.Join(rungs, ", "))
		}
		fmt.Fprintf(&tab, "\nASHA rungs [%s], reduction %s: best of the 8 at full budget %.4f; ASHA picked a trial at %.4f (%.2f points below), spending %d of %d examples (%.1f%%); wall %v against %v\n",
			rungs, reduction, bestFull, picked, gap, asha.ExamplesSeen, total, 100*frac, ashaTime.Round(time.Second), fullTime.Round(time.Second))
		b.Log("\n" + tab.String())
		if out := os.Getenv("SWEEP_OUT"); out != "" {
			if err := os.WriteFile(out, []byte(tab.String()), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		g.close()
	}
}

// runSweep submits spec and waits for the sweep to finish.
func runSweep(b *testing.B, g *testGrid, spec string) (coordinator.SweepView, time.Duration) {
	start := time.Now()
	var created coordinator.SweepView
	code := g.adminJSON(http.MethodPost, "/api/v1/jobs", map[string]string{"spec": spec}, &created)
	if code != http.StatusCreated {
		b.Fatalf("POST sweep: %d", code)
	}
	for deadline := time.Now().Add(30 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if v := g.sweepView(created.ID); v.State == coordinator.StateDone {
			return v, time.Since(start)
		}
	}
	b.Fatalf("sweep %s did not finish in 30 minutes", created.ID)
	return created, 0
}

func pointKey(p map[string]any) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var s []string
	for _, k := range keys {
		s = append(s, fmt.Sprintf("%s=%v", k, p[k]))
	}
	return strings.Join(s, ",")
}

func chosenLabel(p map[string]any) string {
	return fmt.Sprintf("lr %v, batch %v", p["outer_optimizer.lr"], p["batch_size"])
}
