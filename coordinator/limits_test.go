package coordinator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// helloAs dials and says hello; it returns the first message back.
func helloAs(g *testGrid) protocol.Message {
	g.t.Helper()
	rc := &rawClient{t: g.t, conn: g.dialRaw()}
	rc.send(&protocol.Hello{Protocol: protocol.Version, Kind: protocol.KindNative, Backend: "raw", Threads: 1, Client: "raw test client"})
	return rc.read()
}

// An address's hellos past its burst are refused with the error code
// rate_limited, saying when to retry.
func TestHellosPastTheRateAreRateLimited(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.HelloBurst, c.HelloRate = 2, 0.001 })
	for i := range 2 {
		if _, ok := helloAs(g).(*protocol.Welcome); !ok {
			t.Fatalf("hello %d within the burst was not welcomed", i+1)
		}
	}
	e, ok := helloAs(g).(*protocol.Error)
	if !ok || e.Code != protocol.ReasonRateLimited || !strings.Contains(e.Message, "retry after") {
		t.Fatalf("a third hello: %+v, want error rate_limited saying when to retry", e)
	}
}

// A want past the address's lease share gets an idle message saying so;
// another connection from the same address gets no more either.
func TestWantPastTheAddressShareIsIdle(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.MaxLeasesPerAddress = 3 })
	a, b := g.joinRaw(), g.joinRaw()
	if ls := a.grantedLeases(2); len(ls) != 2 {
		t.Fatalf("first connection: %d leases", len(ls))
	}
	b.send(&protocol.Want{N: 2})
	if l, ok := b.read().(*protocol.Lease); !ok {
		t.Fatalf("second connection: %+v, want the share's last lease", l)
	}
	b.send(&protocol.Want{N: 1})
	idle, ok := b.read().(*protocol.Idle)
	if !ok || !strings.Contains(idle.Reason, "max_leases_per_address 3") {
		t.Fatalf("a want past the share: %+v, want idle naming the share", idle)
	}
	if v := g.jobView(); v.LeasesHeld != 3 {
		t.Fatalf("%d leases held, want the share of 3", v.LeasesHeld)
	}
}

// A result past its address's byte rate, when the pause it would need is
// longer than MaxResultPause, is refused as rate_limited and its lease
// queued again; the model does not move.
func TestResultsFarPastTheByteRateAreRateLimited(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.ResultBytesRate, c.ResultBytesBurst, c.MaxResultPause = 1<<20, 1<<20, 1 // 1 MiB/s, 1 ns
	})
	rc := g.joinRaw()
	n := rc.welcome.Job.NumParams
	if 4*n < 1<<19 {
		t.Fatalf("a result of %d bytes is too small for this test's rate", 4*n)
	}
	ls := rc.leases(2)
	send := func(l protocol.Lease, v float32) *protocol.Ack {
		u := make(protocol.Floats, n)
		for i := range u {
			u[i] = v
		}
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: u, Examples: l.Count, LossSum: 1})
		return rc.ack(l.ID)
	}
	if a := send(ls[0], 1e-3); !a.Accepted {
		t.Fatalf("a first result within the burst: %+v", a)
	}
	version := g.jobView().Version
	a := send(ls[1], 2e-3)
	if a.Accepted || a.Reason != protocol.ReasonRateLimited || !strings.Contains(a.Detail, "queued again") {
		t.Fatalf("a second result past the burst: %+v, want rate_limited", a)
	}
	if v := g.jobView(); v.Version != version || v.LeasesHeld != 0 || v.Rejections[protocol.ReasonRateLimited] != 1 {
		t.Fatalf("after the refusal: version %d (was %d), %d leases held, rejections %v", v.Version, version, v.LeasesHeld, v.Rejections)
	}
}

// A volunteer whose leases expire MaxExpiriesInARow times in a row is
// dropped: its connection closes as a policy violation, and its next
// hello is refused as rate_limited for the cool-off, saying how long.
func TestHostageIsDroppedAndCoolsOff(t *testing.T) {
	spec := quietJob(t)
	spec.LeaseTimeout = jobspec.Duration{Duration: 200 * time.Millisecond}
	g := newTestGridWith(t, spec, func(c *coordinator.Config) { c.MaxExpiriesInARow = 2 })
	rc := g.joinRaw()
	rc.leases(2) // held, never answered
	if st := rc.closeStatus(); st != websocket.StatusPolicyViolation {
		t.Fatalf("the hostage's connection closed with %v, want a policy violation", st)
	}
	e, ok := helloAs(g).(*protocol.Error)
	if !ok || e.Code != protocol.ReasonRateLimited || !strings.Contains(e.Message, "retry after 6") {
		t.Fatalf("the hostage's next hello: %+v, want rate_limited for about 600 s", e)
	}
	if v := g.jobView(); v.Abuse.DroppedVolunteers != 1 || v.LeasesHeld != 0 {
		t.Fatalf("job view: abuse %+v, %d leases held; want the drop counted and its leases back", v.Abuse, v.LeasesHeld)
	}
}
