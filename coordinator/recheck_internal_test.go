package coordinator

import (
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// A refused result waits for a recomputation at most recheckWait: past
// it, on the loop's next pass, it is refused as before (quarantined, the
// wait counted as skipped) and its task goes back to the queue; before
// it, with no recomputation free, it keeps waiting.
func TestAWaitingRecheckIsRefusedWhenItsWaitRunsOut(t *testing.T) {
	j, now := abuseJob(t, "mode: async\n")
	pl := leaseFor(t, j, "honest")
	l := j.st.sched.Take("honest", pl.ID)
	if l == nil {
		t.Fatal("the lease was not held")
	}
	sub := result(j, *pl, 1e-3)
	sub.worker, sub.volunteer = "honest", "a-honest"
	var got []protocol.Ack
	sub.decided = func(a protocol.Ack) { got = append(got, a) }
	j.st.recheck.running = recheckParallel // none free
	ack, later := j.recheck(sub, l, protocol.Ack{LeaseID: l.ID}, "the validation refused it")
	if !later || ack.Reason != ackLater || len(j.st.recheck.waiting) != 1 {
		t.Fatalf("with no recomputation free: ack %+v, later %v, %d waiting; want it to wait", ack, later, len(j.st.recheck.waiting))
	}
	*now = now.Add(recheckWait / 2)
	j.recheckWaiting()
	if len(got) != 0 || len(j.st.recheck.waiting) != 1 {
		t.Fatalf("within the wait: %d decided, %d waiting; want it still waiting", len(got), len(j.st.recheck.waiting))
	}
	queuedExamples := func() (n int) {
		for _, t := range j.st.sched.Queue() {
			n += t.Count
		}
		return n
	}
	queued := queuedExamples()
	*now = now.Add(recheckWait)
	j.recheckWaiting()
	if len(got) != 1 || got[0].Accepted || got[0].Reason != protocol.ReasonQuarantined || !strings.Contains(got[0].Detail, "could not recompute it within") {
		t.Fatalf("past the wait: decided %+v; want one quarantined refusal saying it could not be recomputed in time", got)
	}
	if r := j.recheckView(); r.Skipped != 1 || r.Waited != 1 || len(j.st.recheck.waiting) != 0 {
		t.Fatalf("rechecks %+v, %d waiting; want one waited and skipped, none waiting", r, len(j.st.recheck.waiting))
	}
	if got := queuedExamples(); got != queued+l.Task.Count {
		t.Fatalf("%d examples queued after the refusal, %d before: want its task's %d queued again", got, queued, l.Task.Count)
	}
}
