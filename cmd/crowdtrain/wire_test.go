package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// bigJob is dense layers of 1,871,242 parameters: a result may be about
// 7.5 MB, room for a frame nested millions of levels deep.
const bigJob = `name: big
model:
  - {type: dense, units: 2048}
  - {type: relu}
  - {type: dense, units: 128}
  - {type: relu}
  - {type: dense, units: 10}
target_accuracy: 0.99
eval_every: 1000000
`

// startBigJob starts a real coordinator process on bigJob and returns its
// address.
func startBigJob(t *testing.T, extra ...string) (*proc, string) {
	t.Helper()
	spec := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(spec, []byte(bigJob), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := startProc(t, append([]string{"serve", "--addr", addr, "--db", "", "--job", spec}, extra...)...)
	p.waitLine("coordinator listening", time.Minute)
	return p, addr
}

// hostileFrame is a well-formed [version, typ, body] frame whose body has
// one more key, "zz", holding the raw msgpack value extra.
func hostileFrame(t testing.TB, typ string, body map[string]any, extra []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	check := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	check(enc.EncodeArrayLen(3))
	check(enc.EncodeInt(protocol.Version))
	check(enc.EncodeString(typ))
	check(enc.EncodeMapLen(len(body) + 1))
	for k, v := range body {
		check(enc.EncodeString(k))
		check(enc.Encode(v))
	}
	check(enc.EncodeString("zz"))
	buf.Write(extra)
	return buf.Bytes()
}

// deepArray is a value nested n arrays deep.
func deepArray(n int) []byte {
	return append(bytes.Repeat([]byte{0x91}, n), 0xc0)
}

func helloBody() map[string]any {
	return map[string]any{"protocol": protocol.Version, "kind": "native", "backend": "hostile", "threads": 1}
}

// wsSession is a raw websocket client for hostile tests.
type wsSession struct {
	c       *websocket.Conn
	welcome *protocol.Welcome
}

func dialWS(ctx context.Context, addr string) (*wsSession, error) {
	return dialWSFrom(ctx, addr, "")
}

// dialWSFrom is dialWS from the local address bind (e.g. 127.0.0.2; ""
// lets the system choose): per-address limits see another client.
func dialWSFrom(ctx context.Context, addr, bind string) (*wsSession, error) {
	var opts *websocket.DialOptions
	if bind != "" {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(bind)}}
		opts = &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}}
	}
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", opts)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	return &wsSession{c: c}, nil
}

// join says hello and reads the welcome.
func (s *wsSession) join(ctx context.Context) error {
	b, _ := protocol.Encode(&protocol.Hello{Protocol: protocol.Version, Kind: protocol.KindNative, Backend: "raw", Threads: 1})
	if err := s.c.Write(ctx, websocket.MessageBinary, b); err != nil {
		return err
	}
	_, m, err := s.c.Read(ctx)
	if err != nil {
		return err
	}
	msg, err := protocol.Decode(m, 1<<20)
	if err != nil {
		return err
	}
	w, ok := msg.(*protocol.Welcome)
	if !ok {
		if e, isErr := msg.(*protocol.Error); isErr {
			return fmt.Errorf("expected a welcome, got error %s: %q", e.Code, e.Message)
		}
		return fmt.Errorf("expected a welcome, got %s", msg.MessageType())
	}
	s.welcome = w
	return nil
}

// closeStatus sends frame (the server may close before it is all sent) and
// reads until the connection closes.
func (s *wsSession) closeStatus(ctx context.Context, frame []byte) websocket.StatusCode {
	_ = s.c.Write(ctx, websocket.MessageBinary, frame)
	for {
		if _, _, err := s.c.Read(ctx); err != nil {
			s.c.CloseNow()
			return websocket.CloseStatus(err)
		}
	}
}

func healthy(t *testing.T, p *proc, addr string) {
	t.Helper()
	select {
	case err := <-p.done:
		t.Fatalf("the coordinator exited: %v; log:\n%s", err, lastLines(p.logText(), 30))
	default:
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz: %v; log:\n%s", err, lastLines(p.logText(), 30))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// One frame used to end the coordinator: an unknown key whose value nests
// millions of arrays deep, skipped by recursion until Go's stack overflowed
// ("fatal error: stack overflow"). The process must live, answer /healthz
// and close that connection with the documented code.
func TestDeepFrameDoesNotKillTheCoordinator(t *testing.T) {
	testenv.Long(t, "runs a coordinator process")
	p, addr := startBigJob(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Before the welcome: a deep hello, within the control limit.
	s, err := dialWS(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.closeStatus(ctx, hostileFrame(t, "hello", helloBody(), deepArray(60_000))); st != websocket.StatusPolicyViolation {
		t.Errorf("deep hello: close %v, want %v (policy violation, bad_hello)", st, websocket.StatusPolicyViolation)
	}
	healthy(t, p, addr)

	// After it: a result as large as the job allows, nested all the way.
	s, err = dialWS(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.join(ctx); err != nil {
		t.Fatal(err)
	}
	limit := int(s.welcome.Limits.MaxMessageBytes)
	if s.welcome.Job.NumParams < 1_800_000 {
		t.Fatalf("the job has %d parameters; the test needs ~1.86M", s.welcome.Job.NumParams)
	}
	body := map[string]any{"lease_id": 1}
	head := len(hostileFrame(t, "result", body, nil))
	frame := hostileFrame(t, "result", body, deepArray(limit-head-1))
	if len(frame) != limit {
		t.Fatalf("frame of %d bytes, want exactly the limit %d", len(frame), limit)
	}
	if st := s.closeStatus(ctx, frame); st != websocket.StatusUnsupportedData {
		t.Errorf("%d-byte deep result: close %v, want %v (unsupported data: malformed)", len(frame), st, websocket.StatusUnsupportedData)
	}
	healthy(t, p, addr)
	if !strings.Contains(p.logText(), "nested deeper than") {
		t.Errorf("the coordinator did not log why it refused the frame; log:\n%s", lastLines(p.logText(), 20))
	}
}

// vmStatus reads a field (VmRSS, VmHWM) of /proc/PID/status in bytes.
func vmStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// hostileRSSLimit is the peak resident memory allowed while 64 hostile
// connections hammer a coordinator of a 1.87M-parameter job (its own
// footprint, MNIST and Adam state included, is about 0.3 GB). Before the
// frame walker one deep result frame alone cost 250 MB and was not
// returned; 64 connections of deep hellos took RSS to 4 GB.
const hostileRSSLimit = 1 << 30

// 64 connections loop hostile frames for 10 s: deep hellos, deep results,
// length bombs and oversized frames. The coordinator's peak RSS stays
// bounded, it stays healthy, and an honest worker can still join.
func TestHostileFramesKeepMemoryBounded(t *testing.T) {
	testenv.Long(t, "runs a coordinator process for 10 s")
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc to read the coordinator's RSS")
	}
	// All 64 from 127.0.0.1, with the hello rate raised so that the
	// frames, not the rate limit, are what is tested.
	p, addr := startBigJob(t, "--max-conns-per-address", "64", "--hellos-per-second", "10000")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	probe, err := dialWS(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.join(ctx); err != nil {
		t.Fatal(err)
	}
	limit := int(probe.welcome.Limits.MaxMessageBytes)
	probe.c.CloseNow()
	startRSS := vmStatus(t, p.cmd.Process.Pid, "VmRSS")

	result := map[string]any{"lease_id": 1}
	head := len(hostileFrame(t, "result", result, nil))
	attacks := []struct {
		name      string
		joinFirst bool
		frame     []byte
	}{
		{"deep hello", false, hostileFrame(t, "hello", helloBody(), deepArray(60_000))},
		{"deep result", true, hostileFrame(t, "result", result, deepArray(limit-head-1))},
		{"length bomb", true, hostileFrame(t, "result", result, []byte{0xdd, 0x7f, 0xff, 0xff, 0xff})},
		{"bin length bomb", true, []byte("\x93" + string(rune(protocol.Version)) + "\xa6result\x81\xa6update\xc6\x7f\xff\xff\xff")},
		{"oversized result", true, hostileFrame(t, "result", result, append([]byte{0xc6, 0x00, 0x90, 0x00, 0x00}, make([]byte, 0x900000)...))},
		{"oversized hello", false, hostileFrame(t, "hello", helloBody(), append([]byte{0xc6, 0x00, 0x10, 0x00, 0x00}, make([]byte, 0x100000)...))},
	}
	const conns = 64
	deadline := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent := map[string]int{}
	for i := range conns {
		a := attacks[i%len(attacks)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				s, err := dialWS(ctx, addr)
				if err != nil {
					continue
				}
				if a.joinFirst {
					if err := s.join(ctx); err != nil {
						s.c.CloseNow()
						continue
					}
				}
				s.closeStatus(ctx, a.frame)
				mu.Lock()
				sent[a.name]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	peak := vmStatus(t, p.cmd.Process.Pid, "VmHWM")
	t.Logf("RSS %.0f MiB at the start; peak %.0f MiB under %d hostile connections for 10 s (limit %.0f MiB); frames sent: %v",
		float64(startRSS)/(1<<20), float64(peak)/(1<<20), conns, float64(hostileRSSLimit)/(1<<20), sent)
	healthy(t, p, addr)
	for _, a := range attacks {
		if sent[a.name] == 0 {
			t.Errorf("no %s frame was sent: the test proves nothing about it", a.name)
		}
	}
	if peak > hostileRSSLimit {
		t.Errorf("peak RSS %d MiB, want under %d MiB", peak>>20, hostileRSSLimit>>20)
	}
	// From another address, as an honest volunteer would be.
	honest, err := dialWSFrom(ctx, addr, "127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	defer honest.c.CloseNow()
	if err := honest.join(ctx); err != nil {
		t.Fatalf("an honest worker from another address cannot join after the attack: %v", err)
	}
}
