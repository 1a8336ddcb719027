//go:build !js

package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// The kind a worker says it is comes from its configuration: the same CPU
// backend runs in a native daemon and in a browser tab.
func TestHelloCarriesTheConfiguredKind(t *testing.T) {
	for _, c := range []struct{ kind, want string }{
		{"", protocol.KindNative},
		{protocol.KindBrowser, protocol.KindBrowser},
		{protocol.KindGPU, protocol.KindGPU},
	} {
		tc := newTestCoordinator(t)
		ctx, cancel := context.WithCancel(context.Background())
		w, err := New(Config{Coordinator: "ws" + strings.TrimPrefix(tc.srv.URL, "http") + "/ws", Backend: &refBackend{},
			Kind: c.kind, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		go w.Run(ctx)
		var conn *websocket.Conn
		select {
		case conn = <-tc.conns:
		case <-time.After(10 * time.Second):
			t.Fatal("the worker did not connect")
		}
		s := &coordSide{t: t, conn: conn}
		h, ok := s.recv().(*protocol.Hello)
		cancel()
		if !ok || h.Kind != c.want {
			t.Errorf("Kind %q: hello %+v, want kind %q", c.kind, h, c.want)
		}
	}
	_, err := New(Config{Coordinator: "ws://127.0.0.1:1/ws", Backend: &refBackend{}, Kind: "toaster"})
	if err == nil || !strings.Contains(err.Error(), "toaster") || !strings.Contains(err.Error(), protocol.KindBrowser) {
		t.Errorf("New with kind toaster: %v, want an error naming it and the kinds", err)
	}
}
