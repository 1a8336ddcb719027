package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// startPings pings wc every PingInterval and closes it after
// MaxMissedPings pings in a row go unanswered. A volunteer that is idle
// but alive (a paused tab, a daemon waiting for work) answers pings from
// its websocket stack; one that stopped answering is gone, and would
// otherwise hold a connection, and maybe leases, until the TCP stack
// notices, which can take hours. Between pings this costs a timer, not a
// goroutine. The returned stop ends the pings.
func (s *Server) startPings(wc *workerConn) (stop func()) {
	interval := s.cfg.PingInterval
	if interval <= 0 {
		return func() {}
	}
	var mu sync.Mutex
	stopped := false
	missed := 0 // only the timer's function, one run at a time, uses it
	var t *time.Timer
	t = time.AfterFunc(interval, func() {
		switch err := s.ping(wc); {
		case err == nil:
			missed = 0
		case errors.Is(err, context.DeadlineExceeded):
			if missed++; missed >= s.cfg.MaxMissedPings {
				why := fmt.Sprintf("no answer to %d pings in a row, %v apart", missed, interval)
				wc.closedBy.Store(&why)
				// It reads nothing, so it would not read a close frame
				// either: drop it at once, which ends the read loop.
				wc.ws.CloseNow()
				return
			}
		default:
			return // the connection is closed
		}
		mu.Lock()
		if !stopped {
			t.Reset(interval)
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

// ping waits at most one interval for the worker's pong. The pong is read
// by the library while the read loop waits for the next message.
func (s *Server) ping(wc *workerConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.PingInterval)
	defer cancel()
	return wc.ws.Ping(ctx)
}
