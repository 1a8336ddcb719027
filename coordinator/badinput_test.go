package coordinator_test

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// quietJob never finishes on its own and evaluates rarely, so tests
// control every update.
func quietJob(t testing.TB) jobspec.Spec {
	return jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy = 1
		s.EvalEvery = 1_000_000
	})
}

func snapshotBytes(t *testing.T, g *testGrid, l protocol.Lease) []byte {
	t.Helper()
	resp, err := http.Get(g.http.URL + l.SnapshotURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", l.SnapshotURL, resp.Status)
	}
	return buf.Bytes()
}

func TestBadResultsAreRejectedAndLeaveTheModelUntouched(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	rc := g.joinRaw()
	n := rc.welcome.Job.NumParams
	ls := rc.leases(2)
	before := snapshotBytes(t, g, ls[0])

	result := func(l protocol.Lease, update protocol.Floats) *protocol.Result {
		return &protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: update, Examples: l.Count, LossSum: 1}
	}
	huge := make(protocol.Floats, n)
	for i := range huge {
		huge[i] = 1e30
	}
	nan := make(protocol.Floats, n)
	nan[n/2] = float32(math.NaN())
	inf := make(protocol.Floats, n)
	inf[0] = float32(math.Inf(1))

	cases := []struct {
		name   string
		make   func(l protocol.Lease) *protocol.Result
		reason string
	}{
		{"wrong length", func(l protocol.Lease) *protocol.Result { return result(l, make(protocol.Floats, n-1)) }, protocol.ReasonInvalid},
		{"NaN", func(l protocol.Lease) *protocol.Result { return result(l, nan) }, protocol.ReasonInvalid},
		{"Inf", func(l protocol.Lease) *protocol.Result { return result(l, inf) }, protocol.ReasonInvalid},
		{"unknown lease", func(l protocol.Lease) *protocol.Result {
			l.ID = 999999
			return result(l, make(protocol.Floats, n))
		}, protocol.ReasonUnknownLease},
		{"wrong example count", func(l protocol.Lease) *protocol.Result {
			r := result(l, make(protocol.Floats, n))
			r.Examples = 1
			return r
		}, protocol.ReasonInvalid},
		{"wrong base version", func(l protocol.Lease) *protocol.Result {
			r := result(l, make(protocol.Floats, n))
			r.BaseVersion = 5
			return r
		}, protocol.ReasonInvalid},
	}
	for _, c := range cases {
		res := c.make(ls[0])
		rc.send(res)
		a := rc.ack(res.LeaseID)
		if a.Accepted || a.Reason != c.reason || a.Detail == "" {
			t.Errorf("%s: ack %+v, want rejected as %s with a detail", c.name, a, c.reason)
		}
		// A rejected lease goes back to the queue (at the front), so take
		// it again for the next case.
		if c.reason != protocol.ReasonUnknownLease {
			ls[0] = rc.leases(1)[0]
		}
	}
	v := g.jobView()
	if v.Version != 0 || v.UpdatesApplied != 0 {
		t.Fatalf("model moved: version %d, applied %d", v.Version, v.UpdatesApplied)
	}
	if v.Rejections["invalid"] != 5 || v.Rejections["unknown_lease"] != 1 || v.UpdatesRejected != 6 {
		t.Errorf("rejections %v (total %d), want invalid 5, unknown_lease 1", v.Rejections, v.UpdatesRejected)
	}
	if after := snapshotBytes(t, g, ls[0]); !bytes.Equal(before, after) {
		t.Error("the snapshot of version 0 changed")
	}

	// A valid result is still accepted on the same connection.
	rc.send(result(ls[1], smallUpdate(n)))
	if a := rc.ack(ls[1].ID); !a.Accepted || a.Version != 1 {
		t.Fatalf("valid result after bad ones: %+v", a)
	}
	if w := g.srv.WorkerViews(); len(w) != 1 || w[0].Rejected != 6 || w[0].Accepted != 1 {
		t.Errorf("worker view %+v, want 6 rejected and 1 accepted", w)
	}
}

func TestOversizedMessageClosesWith1009(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	rc := g.joinRaw()
	big := make([]byte, rc.welcome.Limits.MaxMessageBytes+1)
	_ = rc.sendBytes(big) // the server may close while it is still being written
	if got := rc.closeStatus(); got != websocket.StatusMessageTooBig {
		t.Fatalf("close status %v, want %v (message too big)", got, websocket.StatusMessageTooBig)
	}
	if g.jobView().State != coordinator.StateRunning {
		t.Fatal("job disturbed")
	}
}

func TestGarbageNeverPanicsTheCoordinator(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	frames := [][]byte{
		nil,
		{0xc1},
		{0x93, protocol.Version, 0xa6, 'r', 'e', 's', 'u', 'l', 't', 0xc6, 0xff, 0xff, 0xff, 0xff},
		func() []byte {
			b, _ := msgpack.Marshal([]any{protocol.Version, "result", map[string]any{"update": []int{1, 2}}})
			return b
		}(),
		func() []byte {
			b, _ := msgpack.Marshal([]any{protocol.Version, "lease", map[string]any{"id": -1}})
			return b
		}(),
		func() []byte { b, _ := msgpack.Marshal([]any{protocol.Version, "welcome", nil}); return b }(),
		bytes.Repeat([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, 100),
	}
	for i, f := range frames {
		// Before hello: refused with a policy close.
		c := g.dialRaw()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.Write(ctx, websocket.MessageBinary, f)
		_, _, err := c.Read(ctx)
		for err == nil {
			_, _, err = c.Read(ctx)
		}
		cancel()
		if st := websocket.CloseStatus(err); st != websocket.StatusPolicyViolation {
			t.Errorf("frame %d before hello: close %v (%v), want policy violation", i, st, err)
		}
		// After hello: answered or closed, never a crash.
		rc := g.joinRaw()
		_ = rc.sendBytes(f)
		_ = rc.sendBytes(func() []byte { b, _ := protocol.Encode(&protocol.Want{N: 1}); return b }())
		for {
			m, err := rc.readErr()
			if err != nil && websocket.CloseStatus(err) != -1 {
				break // closed: the stream could not be trusted
			}
			if err != nil && m == nil {
				t.Fatalf("frame %d after hello: neither answered nor closed: %v", i, err)
			}
			if _, ok := m.(*protocol.Lease); ok {
				break // still served
			}
		}
	}
	// A text frame is refused.
	rc := g.joinRaw()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rc.conn.Write(ctx, websocket.MessageText, []byte(`{"type":"hello"}`))
	if st := rc.closeStatus(); st != websocket.StatusUnsupportedData {
		t.Errorf("text frame: close %v, want unsupported data", st)
	}
	if code := g.getJSON("/healthz", nil); code != http.StatusOK {
		t.Fatalf("healthz %d after garbage", code)
	}
	if v := g.jobView(); v.Version != 0 {
		t.Fatalf("garbage moved the model to version %d", v.Version)
	}
}

func TestHelloWithWrongProtocolVersionIsRefused(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	rc := &rawClient{t: t, conn: g.dialRaw()}
	rc.send(&protocol.Hello{Protocol: protocol.Version + 1, Kind: protocol.KindNative, Backend: "raw", Threads: 1})
	m, err := rc.readErr()
	if e, ok := m.(*protocol.Error); err != nil || !ok || e.Code != "bad_hello" {
		t.Fatalf("got %+v, %v; want an error message bad_hello", m, err)
	}
	if st := rc.closeStatus(); st != websocket.StatusUnsupportedData {
		t.Fatalf("close %v, want unsupported data", st)
	}
}

// Finite garbage is caught too: an update far larger than the ones before
// it would wreck Adam's moments for good.
func TestHugeUpdateIsRejected(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	rc := g.joinRaw()
	n := rc.welcome.Job.NumParams
	filled := func(v float32) protocol.Floats {
		u := make(protocol.Floats, n)
		for i := range u {
			u[i] = v
		}
		return u
	}
	send := func(u protocol.Floats) *protocol.Ack {
		l := rc.leases(1)[0]
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: u, Examples: l.Count, LossSum: 1})
		return rc.ack(l.ID)
	}
	for i := range 10 {
		// Each its own update: the same one again would be a replay.
		if a := send(filled(1e-3 * (1 + float32(i)/100))); !a.Accepted {
			t.Fatalf("ordinary update %d rejected: %+v", i, a)
		}
	}
	if a := send(filled(1e30)); a.Accepted || a.Reason != protocol.ReasonInvalid || !strings.Contains(a.Detail, "norm") {
		t.Fatalf("huge update: %+v, want rejected as invalid for its norm", a)
	}
	if a := send(filled(5e-3)); !a.Accepted {
		t.Fatalf("an update 5x the usual size should still pass: %+v", a)
	}
	if v := g.jobView(); v.Version != 11 || v.Rejections["invalid"] != 1 {
		t.Fatalf("version %d, rejections %v; want 11 applied and 1 invalid", v.Version, v.Rejections)
	}
}
