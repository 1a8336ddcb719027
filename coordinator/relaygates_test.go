package coordinator_test

import (
	"fmt"
	"testing"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	relaymsg "github.com/crowdtrain/crowdtrain/protocol/relay"
)

// A relay's aggregate meets the gates a direct result meets where they
// apply to a sum: the norm gate takes the mean of its results, the
// replay window its sum. A refused one leaves the model as it was and
// does not count towards the relay's quarantine (an honest relay's own
// gate may have a reference of its own); one within the gates is applied.
func TestRelayAggregateMeetsTheGates(t *testing.T) {
	box := startNATS(t)
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) { s.MaxEpochs, s.TargetAccuracy = 100, 0 })
	g := newTestGridWith(t, spec, nil)
	serveRelaysWith(t, g, box, coordinator.RelayGateOptions{QuarantineAfter: 1})
	n := modelParams(t, spec)
	relay := newFakeRelay(t, box, "r1")
	relay.join()
	// send answers k fresh leases with a sum of scale times aggregateOf's,
	// whose mean's norm does not depend on k.
	send := func(id string, scale float32, k int, sum []float32) *relaymsg.Aggregate {
		t.Helper()
		relay.join() // heard from: the root lists relays heard from lately
		r := relay.lease(g.job.ID, k)
		if len(r.Leases) != k {
			t.Fatalf("lease %d: %+v", k, r)
		}
		a := aggregateOf(id, "r1", g.job.ID, r, r.Leases, n)
		for i := range a.Sum {
			a.Sum[i] *= scale
		}
		if sum != nil {
			copy(a.Sum, sum)
		}
		relay.publish(a)
		return a
	}
	// The norm gate's warm-up: a dozen ordinary aggregates, each its own sum.
	const warm = 12
	var sent []*relaymsg.Aggregate
	for i := range warm {
		sent = append(sent, send(fmt.Sprintf("r1-warm-%d", i), 1+float32(i)/10, 1, nil))
		waitRelay(t, g.srv, "r1", "warm-up aggregate applied", func(v coordinator.RelayView) bool { return v.AggregatesApplied == int64(i+1) })
	}
	before := g.jobView()

	send("r1-huge", 1000, 2, nil) // the mean of two results, 1000x the norm of the others
	waitRelay(t, g.srv, "r1", "the huge aggregate refused", func(v coordinator.RelayView) bool { return v.AggregatesRefused == 1 })
	send("r1-replay", 1, 1, sent[3].Sum) // r1-warm-3's sum again, under a new id for new leases
	// Quarantined (after one forged aggregate, here), the relay would
	// leave the list waitRelay reads.
	waitRelay(t, g.srv, "r1", "the replayed sum refused", func(v coordinator.RelayView) bool { return v.AggregatesRefused == 2 })
	if after := g.jobView(); after.Version != before.Version || after.UpdatesApplied != before.UpdatesApplied || after.ExamplesSeen != before.ExamplesSeen {
		t.Fatalf("a refused aggregate moved the model: version %d -> %d, applied %d -> %d", before.Version, after.Version, before.UpdatesApplied, after.UpdatesApplied)
	}

	send("r1-pair", 1, 2, nil) // two results whose mean is as large as the others': applied
	waitRelay(t, g.srv, "r1", "the pair applied", func(v coordinator.RelayView) bool { return v.AggregatesApplied == warm+1 })
	if after := g.jobView(); after.Version != before.Version+1 || after.UpdatesApplied != before.UpdatesApplied+2 {
		t.Fatalf("an aggregate of two results: version %d -> %d, applied %d -> %d; want one version, two results",
			before.Version, after.Version, before.UpdatesApplied, after.UpdatesApplied)
	}
}
