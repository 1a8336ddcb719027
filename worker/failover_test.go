//go:build !js

package worker

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// A worker given several coordinators (a root's relays) connects to the
// first it reaches, skipping one that is down, and moves to another when
// the one it uses goes away.
func TestWorkerMovesToTheNextCoordinator(t *testing.T) {
	// An address nothing listens on: a listener opened and closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "ws://" + ln.Addr().String() + "/ws"
	ln.Close()
	a, b := newTestCoordinator(t), newTestCoordinator(t)
	wsURL := func(tc *testCoordinator) string { return "ws" + strings.TrimPrefix(tc.srv.URL, "http") + "/ws" }
	w, err := New(Config{Coordinator: dead + ", " + wsURL(a) + "," + wsURL(b), Backend: &refBackend{}, Logf: t.Logf,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	hello := func(tc *testCoordinator, name string) *websocket.Conn {
		t.Helper()
		select {
		case conn := <-tc.conns:
			s := &coordSide{t: t, conn: conn}
			if _, ok := s.recv().(*protocol.Hello); !ok {
				t.Fatalf("%s: the worker's first message is not a hello", name)
			}
			return conn
		case <-time.After(10 * time.Second):
			t.Fatalf("the worker did not reach %s", name)
			return nil
		}
	}
	conn := hello(a, "the second coordinator (the first is down)")
	// The coordinator in use goes away: its connection drops and it no
	// longer listens.
	conn.CloseNow()
	a.srv.CloseClientConnections()
	a.srv.Close()
	hello(b, "the third coordinator after the second went away")
	cancel()
	<-done

	for _, bad := range []string{"ws://a/ws,", "ws://a/ws,ftp://b/ws", "ws://a/ws,ws://a/ws"} {
		if _, err := New(Config{Coordinator: bad, Backend: &refBackend{}}); err == nil {
			t.Errorf("New accepted the coordinator list %q", bad)
		}
	}
}

// A worker given a root's http URL asks it for its relays and joins the
// least busy one it can reach, passing over one that is down.
func TestWorkerJoinsARootsRelays(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "ws://" + ln.Addr().String() + "/ws"
	ln.Close()
	busy, idle := newTestCoordinator(t), newTestCoordinator(t)
	wsURL := func(tc *testCoordinator) string { return "ws" + strings.TrimPrefix(tc.srv.URL, "http") + "/ws" }
	root := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/relays" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"relays":[{"name":"dead","url":%q,"workers":0},{"name":"busy","url":%q,"workers":9},{"name":"idle","url":%q,"workers":2}]}`,
			dead, wsURL(busy), wsURL(idle))
	}))
	defer root.Close()
	w, err := New(Config{Coordinator: root.URL, Backend: &refBackend{}, Logf: t.Logf, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case conn := <-idle.conns:
		s := &coordSide{t: t, conn: conn}
		if _, ok := s.recv().(*protocol.Hello); !ok {
			t.Fatal("the worker's first message is not a hello")
		}
	case <-busy.conns:
		t.Fatal("the worker joined the busiest relay")
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not join the least busy relay it could reach")
	}
	cancel()
	<-done
}
