package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// pinger is what the liveness check needs of a connection
// (*websocket.Conn has both).
type pinger interface {
	// Ping sends a ping and waits for its pong or ctx's end.
	Ping(ctx context.Context) error
	CloseNow() error
}

// startPings pings wc every PingInterval and closes it after
// MaxMissedPings pings in a row go unanswered. A volunteer that is idle
// but alive (a paused tab, a daemon waiting for work) answers pings from
// its websocket stack; one that stopped answering is gone, and would
// otherwise hold a connection, and maybe leases, until the TCP stack
// notices, which can take hours. The returned stop ends the pings.
func (s *Server) startPings(wc *workerConn) (stop func()) {
	return watchLiveness(wc.ws, s.cfg.PingInterval, s.cfg.MaxMissedPings, func(why string) {
		wc.closedBy.Store(&why)
	})
}

// watchLiveness pings p every interval (from the start of one ping to the
// next); each ping waits at most one interval for its pong. After misses
// unanswered pings in a row it calls gone and drops the connection, at
// once: a peer that reads nothing would not read a close frame either.
// Between pings this costs a timer, not a goroutine. interval <= 0 turns
// it off.
func watchLiveness(p pinger, interval time.Duration, misses int, gone func(why string)) (stop func()) {
	if interval <= 0 {
		return func() {}
	}
	var mu sync.Mutex
	stopped := false
	missed := 0 // only the timer's function, one run at a time, uses it
	var t *time.Timer
	// The first ping may fire before AfterFunc returns: t is assigned, and
	// read by the ping, under mu.
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(interval, func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		err := p.Ping(ctx)
		cancel()
		switch {
		case err == nil:
			missed = 0
		case errors.Is(err, context.DeadlineExceeded):
			if missed++; missed >= misses {
				gone(fmt.Sprintf("no answer to %d pings in a row, %v apart", missed, interval))
				p.CloseNow()
				return
			}
		default:
			return // the connection is closed
		}
		mu.Lock()
		if !stopped {
			t.Reset(max(0, interval-time.Since(start)))
		}
		mu.Unlock()
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}
