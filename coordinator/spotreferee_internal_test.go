package coordinator

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// disputes opens n spot checks of a's results that b's copies disagree
// with, from version base: each wants a third result.
func disputes(t *testing.T, j *Job, first uint64, n int, base int64) {
	t.Helper()
	p := j.st.spot
	for i := range uint64(n) {
		id := first + i
		c := p.Open(engine.Lease{ID: id, Base: base, Task: engine.Task{Count: 8}, LocalSteps: 1}, engine.SpotResult{Volunteer: "a", Update: []float32{1, 1, 1}, Examples: 8, Applied: true})
		p.Copied(c, id+1000, "b", 8)
		if o, ok := p.Answer(id+1000, engine.SpotResult{Volunteer: "b", Update: []float32{-1, -1, -1}, Examples: 8}); !ok || o.Done {
			t.Fatalf("dispute %d: %+v %v", id, o, ok)
		}
	}
}

// The coordinator's recomputations are bounded: a bucket of
// refereeBurst seconds of compute refilled at refereeShare on the job's
// clock, each start spending what one is expected to take, the disputes
// past it waiting (each counted once as deferred); a dispute whose base
// snapshot is gone is dropped and counted, never computed.
func TestRefereeBoundAndBaseGone(t *testing.T) {
	j := tinyJob(t, "spot_check: 1\n")
	now := time.Unix(1_000_000, 0)
	j.st.sched.Now = func() time.Time { return now }
	j.join("wa", member{volunteer: "a", address: "10.0.0.1"})
	j.join("wb", member{volunteer: "b", address: "10.0.0.2"})
	p := j.st.spot
	p.MaxPending = 100
	burst := int64(refereeBurst / refereeFirstGuess)                                // starts the full bucket pays for
	every := time.Duration(refereeFirstGuess / refereeShare * float64(time.Second)) // the refill of one

	disputes(t, j, 1, int(burst)+3, 7) // version 7 was never published
	j.spotReferee()
	if p.Counters.RecomputeDropped != burst || p.Counters.RecomputeDeferred != 3 || p.Pending() != 3 || j.st.referee.running {
		t.Fatalf("counters %+v, pending %d, running %v: want %d dropped (base gone), 3 deferred", p.Counters, p.Pending(), j.st.referee.running, burst)
	}
	j.spotReferee()
	now = now.Add(every / 2)
	j.spotReferee()
	if p.Counters.RecomputeDropped != burst || p.Counters.RecomputeDeferred != 3 {
		t.Fatalf("within the bound's time: counters %+v", p.Counters)
	}
	now = now.Add(every / 2)
	j.spotReferee()
	if p.Counters.RecomputeDropped != burst+1 || p.Counters.RecomputeDeferred != 3 || p.Pending() != 2 {
		t.Fatalf("one refill later: counters %+v, pending %d; want one more taken", p.Counters, p.Pending())
	}
	now = now.Add(time.Hour)
	j.spotReferee()
	if p.Pending() != 0 || p.Counters.Recomputed != 0 {
		t.Fatalf("an hour later: pending %d, counters %+v", p.Pending(), p.Counters)
	}
	// The bucket holds refereeBurst at most, however long it waited.
	now = now.Add(time.Hour)
	disputes(t, j, 100, int(burst)+1, 7)
	j.spotReferee()
	if p.Pending() != 1 {
		t.Fatalf("after a long wait %d disputes still wait, want 1 past the burst", p.Pending())
	}
}

// The bucket charges what recomputations really take: cheap ones (an
// mnist-mlp task, milliseconds) give back what their start spent and may
// run many times a second; expensive ones (seconds) hold the coordinator
// to refereeShare of a core.
func TestRefereeBucketChargesWhatRecomputationsTake(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var cheap refereeState
	n := 0
	for range 100 {
		if !cheap.take(now) {
			break
		}
		cheap.done(0.01)
		n++
	}
	if n < 100 {
		t.Fatalf("%d recomputations of 10 ms at once, want all 100 (1 s of compute, within the burst)", n)
	}
	var dear refereeState
	n = 0
	for range 60 { // a minute, a start tried each second
		if dear.take(now) {
			dear.done(5)
			n++
		}
		now = now.Add(time.Second)
	}
	// 2 s of burst and 15 s of refill pay for 17 s: a 5 s recomputation
	// can start only while the bucket holds its expected cost, so at most
	// 17/5 after the first (which ran on the first guess).
	if limit := 1 + int(math.Floor((refereeBurst+60*refereeShare)/5)); n < 2 || n > limit {
		t.Fatalf("%d recomputations of 5 s in a minute, want 2 to %d (a quarter of a core)", n, limit)
	}
	if dear.tokens > refereeBurst || cheap.tokens > refereeBurst {
		t.Fatalf("buckets over their size: %v %v", dear.tokens, cheap.tokens)
	}
}

// A check is opened only while its base snapshot is held: a struck
// volunteer's held result from a version no longer kept (older than the
// staleness bound) opens none, for no copy could ever compute it and the
// check would take one of the few pending places until its timeout. It
// is refused saying why, as when the checks are full.
func TestSpotCheckNotOpenedWithoutItsBase(t *testing.T) {
	j := tinyJob(t, "spot_check: 1\n")
	j.join("wa", member{volunteer: "a", address: "10.0.0.1"})
	j.join("wb", member{volunteer: "b", address: "10.0.0.2"})
	p := j.st.spot
	j.strike("a", "a test")                                                         // struck once: its results are held
	l := &engine.Lease{ID: 42, Base: 7, Task: engine.Task{Count: 8}, LocalSteps: 1} // version 7 was never published
	sub := submission{worker: "wa", volunteer: "a", res: &protocol.Result{LeaseID: 42, BaseVersion: 7, Update: make(protocol.Floats, j.model.NumParams), Examples: 8}}
	ack, answered := j.spotHold(sub, l, func(reason, detail string) protocol.Ack {
		return protocol.Ack{Reason: reason, Detail: detail}
	})
	if !answered || ack.Reason != protocol.ReasonQuarantined || !strings.Contains(ack.Detail, "base snapshot is gone") || p.Pending() != 0 {
		t.Fatalf("ack %+v (answered %v), pending %d: want the held result refused without a check", ack, answered, p.Pending())
	}
	if !j.publish() || j.snapshotBody(0) == nil {
		t.Fatal("version 0 was not published")
	}
	l = &engine.Lease{ID: 43, Base: 0, Task: engine.Task{Count: 8}, LocalSteps: 1}
	sub.res.LeaseID, sub.res.BaseVersion = 43, 0
	if ack, _ = j.spotHold(sub, l, func(reason, detail string) protocol.Ack { return protocol.Ack{Reason: reason, Detail: detail} }); p.Pending() != 1 {
		t.Fatalf("ack %+v, pending %d: want a check of the held result from a held base", ack, p.Pending())
	}
}
