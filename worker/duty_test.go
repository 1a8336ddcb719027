package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/protocol"
)

func TestDutyCycleRests(t *testing.T) {
	w, err := New(Config{Coordinator: "ws://127.0.0.1:1/ws", Backend: &refBackend{}})
	if err != nil {
		t.Fatal(err)
	}
	if r := w.rest(100 * time.Millisecond); r != 0 {
		t.Errorf("full duty rests %v", r)
	}
	for _, c := range []struct {
		duty float64
		want time.Duration
	}{{0.5, 100 * time.Millisecond}, {0.25, 300 * time.Millisecond}} {
		if err := w.SetDuty(c.duty); err != nil {
			t.Fatal(err)
		}
		if r := w.rest(100 * time.Millisecond); r != c.want {
			t.Errorf("duty %v after 100ms of work rests %v, want %v", c.duty, r, c.want)
		}
	}
	for _, bad := range []float64{0, -1, 1.5} {
		if err := w.SetDuty(bad); err == nil || !strings.Contains(err.Error(), "(0, 1]") {
			t.Errorf("SetDuty(%v) = %v, want an error naming the range", bad, err)
		}
	}
	if _, err := New(Config{Coordinator: "ws://127.0.0.1:1/ws", Backend: &refBackend{}, Duty: 2}); err == nil {
		t.Error("New accepted a duty cycle of 2")
	}
}

// A browser's long user agent is cut to what hello allows, never refused.
func TestLongClientIsTruncated(t *testing.T) {
	w, err := New(Config{Coordinator: "ws://127.0.0.1:1/ws", Backend: &refBackend{}, Client: strings.Repeat("é", 100)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(w.cfg.Client); n > protocol.MaxShortText || n < protocol.MaxShortText-1 {
		t.Errorf("client is %d bytes, want at most %d", n, protocol.MaxShortText)
	}
	if !strings.HasPrefix(strings.Repeat("é", 100), w.cfg.Client) {
		t.Error("truncation split a character")
	}
}
