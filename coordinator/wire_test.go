package coordinator_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// logRecorder keeps every message the coordinator logs, formatted.
type logRecorder struct {
	t     testing.TB
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) Logf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.lines = append(r.lines, s)
	r.mu.Unlock()
	r.t.Log(s)
}

func (r *logRecorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

// closeFrame returns the status a client sees after sending frame on rc:
// whatever the coordinator answers first, then how it closes.
func closeAfter(t *testing.T, rc *rawClient, frame []byte) (websocket.StatusCode, []*protocol.Error) {
	t.Helper()
	if err := rc.sendBytes(frame); err != nil {
		t.Fatalf("send: %v", err)
	}
	var errs []*protocol.Error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, b, err := rc.conn.Read(ctx)
		cancel()
		if err != nil {
			return websocket.CloseStatus(err), errs
		}
		if m, err := protocol.Decode(b, 1<<20); err == nil {
			if e, ok := m.(*protocol.Error); ok {
				errs = append(errs, e)
			}
		}
	}
}

// Frames that cannot be decoded get an error message that says why and
// the close code docs/PROTOCOL.md promises (1003), not a dropped TCP
// connection (which a client sees as 1006).
func TestUndecodableFramesGetTheDocumentedCloseCode(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	marshal := func(v ...any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"undecodable binary", []byte{0xc1, 0x00, 0x01}},
		{"type not a string", marshal(protocol.Version, 5, map[string]any{})},
		{"float array for a bin", marshal(protocol.Version, "result", map[string]any{
			"lease_id": 1, "job_id": g.job.ID, "update": []float32{1, 2, 3}, "examples": 1})},
	} {
		rc := g.joinRaw()
		code, errs := closeAfter(t, rc, tc.frame)
		if code != websocket.StatusUnsupportedData {
			t.Errorf("%s: close status %v, want %v (unsupported data)", tc.name, code, websocket.StatusUnsupportedData)
		}
		if len(errs) != 1 || errs[0].Code != "malformed" || errs[0].Message == "" {
			t.Errorf("%s: error messages %+v, want one \"malformed\" saying why", tc.name, errs)
		}
	}
	if code := g.getJSON("/healthz", nil); code != http.StatusOK {
		t.Fatalf("healthz %d", code)
	}
}

// Only a result may be as large as an update: a want padded past the
// control limit is refused with 1009 while it is still small next to the
// result limit, and a result of the same size is still read.
func TestEachMessageTypeHasItsOwnSizeLimit(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.MaxControlBytes = 16 << 10 })
	padded := func(typ string, body map[string]any) []byte {
		body["padding"] = bytes.Repeat([]byte{'x'}, 32<<10)
		b, err := msgpack.Marshal([]any{protocol.Version, typ, body})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rc := g.joinRaw()
	if int64(len(padded("want", map[string]any{"n": 1}))) >= rc.welcome.Limits.MaxMessageBytes {
		t.Fatal("the padded want must be under the result limit for this test to mean anything")
	}
	code, errs := closeAfter(t, rc, padded("want", map[string]any{"n": 1}))
	if code != websocket.StatusMessageTooBig || len(errs) != 1 || !strings.Contains(errs[0].Message, "want message is limited to 16384 bytes") {
		t.Errorf("32 KiB want: close %v, errors %+v; want 1009 and an error naming the want limit", code, errs)
	}

	// The same padding in a result is read, decoded and answered.
	rc = g.joinRaw()
	l := rc.leases(1)[0]
	update := make([]byte, 4*rc.welcome.Job.NumParams)
	update[3] = 0x30 // one small value: an all-zero update is refused (emptyupdates.go)
	rc.sendBytes(padded("result", map[string]any{"lease_id": l.ID, "job_id": l.JobID, "base_version": l.BaseVersion,
		"codec": protocol.CodecF32, "update": update, "examples": l.Count, "loss_sum": 1.0}))
	if a := rc.ack(l.ID); !a.Accepted {
		t.Fatalf("padded result: %+v, want accepted", a)
	}

	// Before the welcome, a hello is held to the same control limit.
	c := g.dialRaw()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Write(ctx, websocket.MessageBinary, padded("hello", map[string]any{"protocol": protocol.Version, "kind": "native", "backend": "raw", "threads": 1}))
	_, _, err := c.Read(ctx)
	for err == nil {
		_, _, err = c.Read(ctx)
	}
	if st := websocket.CloseStatus(err); st != websocket.StatusMessageTooBig {
		t.Errorf("32 KiB hello: close %v (%v), want 1009", st, err)
	}
}

// A client string crafted to forge a log line, or to send escape codes to
// the operator's terminal, is logged quoted.
func TestWorkerStringsCannotForgeLogLines(t *testing.T) {
	rec := &logRecorder{t: t}
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.Logf = rec.Logf })
	const forged = "2026/01/01 00:00:00 job X: done: FORGED LOG LINE"
	rc := &rawClient{t: t, conn: g.dialRaw()}
	rc.send(&protocol.Hello{Protocol: protocol.Version, Kind: protocol.KindNative, Backend: "raw\x1b[2J", Threads: 1,
		Client: "evil\n" + forged + "\x1b[31m"})
	if _, ok := rc.read().(*protocol.Welcome); !ok {
		t.Fatal("expected a welcome")
	}
	rc.send(&protocol.Bye{Reason: "done\n" + forged})
	rc.closeStatus()
	// A refused hello carries the same string back in its error.
	bad := &rawClient{t: t, conn: g.dialRaw()}
	bad.send(&protocol.Hello{Protocol: protocol.Version, Kind: "evil\n" + forged, Backend: "raw", Threads: 1})
	bad.closeStatus()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(rec.text(), "left") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	text := rec.text()
	if !strings.Contains(text, "FORGED") {
		t.Fatal("the client string was not logged at all; the test would prove nothing")
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "2026/01/01") || strings.HasPrefix(line, "job X") {
			t.Errorf("forged log line: %q", line)
		}
	}
	if strings.ContainsRune(text, 0x1b) {
		t.Errorf("raw ESC byte in the log:\n%q", text)
	}
}

// A worker that stops answering pings is closed after MaxMissedPings
// intervals; an idle one whose websocket still answers stays connected.
func TestConnectionsThatStopAnsweringPingsAreClosed(t *testing.T) {
	rec := &logRecorder{t: t}
	const interval = 50 * time.Millisecond
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.Logf, c.PingInterval, c.MaxMissedPings = rec.Logf, interval, 2
	})
	alive := g.joinRaw()
	go func() { // idle but alive: its reader answers pings
		for {
			if _, _, err := alive.conn.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	dead := g.joinRaw() // never reads again, so never answers a ping
	deadID, aliveID := dead.welcome.WorkerID, alive.welcome.WorkerID

	connected := func(id string) bool {
		for _, w := range g.srv.WorkerViews() {
			if w.ID == id {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for connected(deadID) {
		if time.Now().After(deadline) {
			t.Fatalf("a worker that answers no pings is still connected after 10 s (ping interval %v, 2 misses)", interval)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Twenty more intervals: the idle worker that answers stays.
	time.Sleep(20 * interval)
	if !connected(aliveID) {
		t.Fatal("an idle worker that answers pings was disconnected")
	}
	if !strings.Contains(rec.text(), "worker "+deadID+` left ("no answer to 2 pings`) {
		t.Errorf("the log does not say why %s left:\n%s", deadID, rec.text())
	}
}

// Buffers for frames and updates are shared, not kept per connection: after
// many connections each sent one full-size result, the memory they hold
// stays near the pool's size, not one update per connection.
func TestFullSizeFramesAreNotHeldPerConnection(t *testing.T) {
	const conns, pool = 40, 2
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.DecodeBuffers = pool
		c.MaxConnsPerAddress = conns // all from 127.0.0.1
	})
	frame := fullSizeResult(t, g)
	rcs := make([]*rawClient, conns)
	before := heapAndStack()
	for i := range rcs {
		rcs[i] = g.joinRaw()
		if err := rcs[i].sendBytes(frame); err != nil {
			t.Fatal(err)
		}
		if a := rcs[i].ack(1 << 40); a.Accepted {
			t.Fatal("a result for a lease nobody holds was accepted")
		}
	}
	held := heapAndStack() - before
	// Per-connection buffers would hold 2 x frame each (frame bytes and the
	// decoded update): 80 frames here. The pool keeps 2 x pool frames;
	// the bound leaves room for the connections themselves and noise.
	limit := int64(10 * len(frame))
	t.Logf("%d connections that each sent a %d-byte result hold %.1f MiB (limit %.1f MiB)",
		conns, len(frame), float64(held)/(1<<20), float64(limit)/(1<<20))
	if held > limit {
		t.Fatalf("%d connections that each sent one %d-byte result hold %d bytes, want under %d (10 frames)", conns, len(frame), held, limit)
	}
}

// End to end: a worker flooding NaN results over a real websocket buys one
// test-set evaluation per NonFiniteEvalInterval, not one per 20 results.
func TestNaNFloodStartsOneEvaluationPerInterval(t *testing.T) {
	rec := &logRecorder{t: t}
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.Logf, c.NonFiniteEvalInterval = rec.Logf, time.Hour
	})
	rc := g.joinRaw()
	nan := make(protocol.Floats, rc.welcome.Job.NumParams)
	nan[0] = float32(math.NaN())
	const results = 100
	for range results {
		l := rc.leases(1)[0]
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: nan, Examples: l.Count, LossSum: 1})
		if a := rc.ack(l.ID); a.Accepted || a.Reason != protocol.ReasonInvalid {
			t.Fatalf("NaN result: %+v, want rejected as invalid", a)
		}
	}
	if n := strings.Count(rec.text(), "evaluating the model for divergence"); n != 1 {
		t.Fatalf("%d NaN results started %d evaluations, want 1 within the interval", results, n)
	}
	if v := g.jobView(); v.State != coordinator.StateRunning || v.Version != 0 {
		t.Fatalf("job %s at version %d after NaN results, want running at 0", v.State, v.Version)
	}
}

// One address may hold only so many websocket connections, whether they
// said hello or not (3,000 stalled hellos from one address took 430 MB;
// 300 stalled results 600 MB): the next is refused before the upgrade,
// a slot comes back when a connection ends, and another address is not
// affected.
func TestConnectionsPerAddressAreLimited(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.MaxConnsPerAddress = 3 })
	dialFrom := func(ip string) (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, resp, err := websocket.Dial(ctx, g.wsURL(), &websocket.DialOptions{HTTPClient: clientFrom(t, ip)})
		if err == nil {
			t.Cleanup(func() { c.CloseNow() })
		}
		return c, resp, err
	}
	joined := g.joinRaw()                    // one that said hello
	silent1, _, err := dialFrom("127.0.0.1") // two that never speak
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dialFrom("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	_, resp, err := dialFrom("127.0.0.1")
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a 4th connection from one address: err %v, response %+v; want 429 with Retry-After", err, resp)
	}
	if _, _, err := dialFrom("127.0.0.2"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	// Slots come back as connections end, joined or not.
	joined.conn.Close(websocket.StatusNormalClosure, "bye")
	silent1.CloseNow()
	for range 2 {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, _, err := dialFrom("127.0.0.1")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no slot came back after connections closed: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
