package coordinator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/worker"
)

// BenchmarkSpotCheckCost trains mnist-mlp to 97% with three honest
// volunteers (each its own volunteer key, one native worker each) with
// spot checks off and at rates 0.05 (the default) and 0.2, and reports the
// work copies duplicated, the checks and the wall time to the target. Run
// it with -benchtime 1x (make bench-spotcheck).
func BenchmarkSpotCheckCost(b *testing.B) {
	for _, rate := range []float64{0, 0.05, 0.2} {
		b.Run(fmt.Sprintf("spot_check=%g", rate), func(b *testing.B) {
			for range b.N {
				g := newTestGrid(b, jobSpec(b, "mnist-mlp", func(s *jobspec.Spec) { s.SpotCheck = rate }))
				start := time.Now()
				for i := range 3 {
					g.addWorkerWith(1, nil, func(c *worker.Config) { c.VolunteerKey = fmt.Sprintf("bench-volunteer-key-%08d", i) })
				}
				v := g.waitDone(10 * time.Minute)
				elapsed := time.Since(start)
				if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.97 {
					b.Fatalf("job ended %s: %s", v.State, v.Reason)
				}
				sc := v.SpotChecks
				b.ReportMetric(elapsed.Seconds(), "s-to-97%")
				b.ReportMetric(float64(v.ExamplesSeen), "examples")
				b.ReportMetric(float64(sc.DuplicatedExamples), "duplicated")
				b.ReportMetric(100*sc.DuplicatedFraction, "duplicated-%")
				b.ReportMetric(float64(sc.Checked), "checks")
				b.ReportMetric(float64(sc.Strikes), "false-strikes")
				b.ReportMetric(float64(sc.Skipped), "skipped")
				g.close()
			}
		})
	}
}
