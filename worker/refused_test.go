//go:build !js

package worker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// The hello carries the volunteer's key and name; a ban or a refused join
// token ends Run with an error that says which (the browser worker keeps
// asking a banned volunteer slowly, and points at its token field), with
// the coordinator's words in it.
func TestRefusedHelloSaysWhy(t *testing.T) {
	for _, c := range []struct {
		code string
		want error
	}{
		{"banned", ErrBanned},
		{"join_token", ErrJoinToken},
		{"bad_hello", ErrRefused},
	} {
		t.Run(c.code, func(t *testing.T) {
			tc := newTestCoordinator(t)
			key := strings.Repeat("k", 43)
			w, err := New(Config{Coordinator: "ws" + strings.TrimPrefix(tc.srv.URL, "http") + "/ws", Backend: &refBackend{},
				Logf: t.Logf, VolunteerKey: key, Name: "Ada", Token: "tok"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			var conn *websocket.Conn
			select {
			case conn = <-tc.conns:
			case <-time.After(10 * time.Second):
				t.Fatal("the worker did not connect")
			}
			s := &coordSide{t: t, conn: conn}
			h, ok := s.recv().(*protocol.Hello)
			if !ok || h.VolunteerKey != key || h.Name != "Ada" || h.Token != "tok" {
				t.Fatalf("hello %+v, want key %q, name Ada and token tok", h, key)
			}
			s.send(&protocol.Error{Code: c.code, Message: "reason from the operator"})
			conn.Close(websocket.StatusPolicyViolation, "refused")
			err = <-done
			if !errors.Is(err, c.want) || !errors.Is(err, ErrRefused) {
				t.Fatalf("Run ended with %v, want %v (and ErrRefused)", err, c.want)
			}
			if !strings.Contains(err.Error(), "reason from the operator") {
				t.Errorf("%q lacks the coordinator's message", err)
			}
			if c.want != ErrBanned && errors.Is(err, ErrBanned) {
				t.Errorf("a %s refusal reads as a ban: %v", c.code, err)
			}
		})
	}
}
