package coordinator_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// rawClient speaks the protocol by hand, to play broken, hostile or
// vanishing workers.
type rawClient struct {
	t       testing.TB
	conn    *websocket.Conn
	welcome *protocol.Welcome
}

func (g *testGrid) dialRaw() *websocket.Conn {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, g.wsURL(), nil)
	if err != nil {
		g.t.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	g.t.Cleanup(func() { c.CloseNow() })
	return c
}

// joinRaw dials and completes hello/welcome.
func (g *testGrid) joinRaw() *rawClient {
	g.t.Helper()
	return g.joinRawKey("")
}

// joinRawKey is joinRaw for the volunteer with key ("" sends none).
func (g *testGrid) joinRawKey(key string) *rawClient {
	g.t.Helper()
	rc := &rawClient{t: g.t, conn: g.dialRaw()}
	rc.send(&protocol.Hello{Protocol: protocol.Version, Kind: protocol.KindNative, Backend: "raw", Threads: 1, Client: "raw test client", VolunteerKey: key})
	w, ok := rc.read().(*protocol.Welcome)
	if !ok {
		g.t.Fatal("expected a welcome")
	}
	rc.welcome = w
	return rc
}

func (rc *rawClient) sendBytes(b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return rc.conn.Write(ctx, websocket.MessageBinary, b)
}

func (rc *rawClient) send(m protocol.Message) {
	rc.t.Helper()
	b, err := protocol.Encode(m)
	if err != nil {
		rc.t.Fatal(err)
	}
	if err := rc.sendBytes(b); err != nil {
		rc.t.Fatalf("send %s: %v", m.MessageType(), err)
	}
}

func (rc *rawClient) readErr() (protocol.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := rc.conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	return protocol.Decode(b, 1<<20)
}

func (rc *rawClient) read() protocol.Message {
	rc.t.Helper()
	m, err := rc.readErr()
	if err != nil {
		rc.t.Fatalf("read: %v", err)
	}
	return m
}

// leases asks for n leases and returns them, each started: a lease that
// takes the latest snapshot gets its base from a start/started exchange,
// as a worker does when it begins computing.
func (rc *rawClient) leases(n int) []protocol.Lease {
	rc.t.Helper()
	out := rc.grantedLeases(n)
	for i := range out {
		rc.start(&out[i])
	}
	return out
}

// grantedLeases asks for n leases and returns them as granted (a latest
// lease has no base yet).
func (rc *rawClient) grantedLeases(n int) []protocol.Lease {
	rc.t.Helper()
	rc.send(&protocol.Want{N: n})
	var out []protocol.Lease
	for len(out) < n {
		switch m := rc.read().(type) {
		case *protocol.Lease:
			out = append(out, *m)
		case *protocol.Idle:
			rc.t.Fatalf("got idle (%s) waiting for leases", m.Reason)
		}
	}
	return out
}

// start fixes l's base if it takes the latest snapshot.
func (rc *rawClient) start(l *protocol.Lease) {
	rc.t.Helper()
	if l.Snapshot != protocol.SnapshotLatest {
		return
	}
	rc.send(&protocol.Start{LeaseID: l.ID})
	for {
		switch m := rc.read().(type) {
		case *protocol.Started:
			if m.LeaseID == l.ID {
				l.BaseVersion, l.SnapshotURL, l.DeadlineUnixMs = m.BaseVersion, m.SnapshotURL, m.DeadlineUnixMs
				return
			}
		case *protocol.Ack:
			if m.LeaseID == l.ID {
				rc.t.Fatalf("start of lease %d refused: %s: %s", l.ID, m.Reason, m.Detail)
			}
		}
	}
}

// ack reads until the ack for lease id.
func (rc *rawClient) ack(id uint64) *protocol.Ack {
	rc.t.Helper()
	for {
		if a, ok := rc.read().(*protocol.Ack); ok && a.LeaseID == id {
			return a
		}
	}
}

// closeStatus reads until the connection closes and returns its status.
func (rc *rawClient) closeStatus() websocket.StatusCode {
	rc.t.Helper()
	for {
		_, err := rc.readErr()
		if err == nil {
			continue
		}
		var ve *protocol.ValidationError
		if errors.As(err, &ve) || errors.Is(err, protocol.ErrMalformed) {
			continue
		}
		return websocket.CloseStatus(err)
	}
}

var smallUpdates atomic.Uint32

// smallUpdate is an update of n values for a test where the values do not
// matter: small, never all zeros (refused as a lie where the model does
// not fit the task: emptyupdates.go), and each one different (the replay
// window refuses bit-identical ones).
func smallUpdate(n int) protocol.Floats {
	u := make(protocol.Floats, n)
	for i := range u {
		u[i] = 1e-6
	}
	u[0] = 1e-6 * float32(2+smallUpdates.Add(1))
	return u
}
