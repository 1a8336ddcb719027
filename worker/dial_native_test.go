//go:build !js

package worker

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type countingConn struct {
	net.Conn
	writes int
	data   bytes.Buffer
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes++
	return c.data.Write(p)
}

func TestBatchConnCoalescesHeldWrites(t *testing.T) {
	under := &countingConn{}
	bc := &batchConn{Conn: under}
	bc.Write([]byte("a")) // not held: straight through
	bc.hold()
	for range 230 {
		bc.Write(bytes.Repeat([]byte("x"), 4096))
	}
	if under.writes != 1 {
		t.Fatalf("%d writes reached the connection while held, want only the one before", under.writes)
	}
	if err := bc.release(); err != nil {
		t.Fatal(err)
	}
	if under.writes != 2 || under.data.Len() != 1+230*4096 {
		t.Fatalf("after release: %d writes, %d bytes; want 2 writes, all bytes in order", under.writes, under.data.Len())
	}
	bc.Write([]byte("b"))
	if under.writes != 3 {
		t.Fatal("writes after release should pass straight through")
	}
}

// A refused upgrade reports the coordinator's reason, not only the
// library's "expected 101".
func TestRefusedDialSaysWhy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"error":"this coordinator does not answer to the host \"evil.example\"; add it with --public-url"}`)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", nil)
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "--public-url") {
		t.Fatalf("dial error %v; want the status and the coordinator's reason", err)
	}
}
