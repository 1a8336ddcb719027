package coordinator_test

import (
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// BenchmarkModesTo97 trains mnist-mlp to 97% in each mode with two local
// native workers (the shipped worker package over the native backend) and
// reports, per mode: wall time, examples and results (updates) to the
// target, the update bytes sent up per example trained (4 bytes a
// parameter a result, over the examples), the snapshot bytes served down
// per example (counted at the HTTP handler) and their sum. Run it with
// -benchtime 1x (make bench-modes). A mode whose leases the workers give
// back is skipped, saying so.
func BenchmarkModesTo97(b *testing.B) {
	for _, c := range []struct{ name, spec string }{
		{"async-latest", ""},
		{"async-granted", "snapshot: granted\n"},
		{"async-dynamic", "dynamic_local_steps: true\n"},
		{"sync-K2+1", "mode: sync\nround_size: 2\nbackup_workers: 1\neval_every: 100\n"},
		{"diloco-H16-adamw", "mode: diloco\nlocal_steps: 16\nround_size: 2\ninner_optimizer:\n  type: adamw\neval_every: 200\n"},
		{"diloco-H32-adamw", "mode: diloco\nlocal_steps: 32\nround_size: 2\ninner_optimizer:\n  type: adamw\neval_every: 200\n"},
		{"async-diloco-H16-adamw", "mode: diloco\nasync_diloco: true\nlocal_steps: 16\nround_size: 2\ninner_optimizer:\n  type: adamw\neval_every: 200\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				g := newTestGrid(b, modeSpec(b, c.spec))
				start := time.Now()
				g.addWorker(1, nil)
				g.addWorker(1, nil)
				first := g.waitFor("a result or a lease given back", time.Minute, func(v coordinator.JobView) bool {
					return v.UpdatesApplied > 0 || v.RoundResults > 0 || v.LeasesReleased > 0
				})
				if first.UpdatesApplied == 0 && first.RoundResults == 0 {
					b.Skipf("workers give %s leases back: %q", c.name, first.LastRelease)
				}
				v := g.waitDone(10 * time.Minute)
				elapsed := time.Since(start)
				if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.97 {
					b.Fatalf("job ended %s: %s", v.State, v.Reason)
				}
				up := 4 * float64(v.NumParams) * float64(v.UpdatesApplied+v.UpdatesRejected) / float64(v.ExamplesSeen)
				down := float64(g.snapshotBytes.Load()) / float64(v.ExamplesSeen)
				b.ReportMetric(elapsed.Seconds(), "s-to-97%")
				b.ReportMetric(float64(v.ExamplesSeen), "examples")
				b.ReportMetric(float64(v.UpdatesApplied), "results")
				b.ReportMetric(float64(v.UpdatesRejected), "rejected")
				b.ReportMetric(float64(v.Version), "versions")
				b.ReportMetric(up, "up-B/example")
				b.ReportMetric(down, "down-B/example")
				b.ReportMetric(up+down, "B/example")
				g.close()
			}
		})
	}
}
