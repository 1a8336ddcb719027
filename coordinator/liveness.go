package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coder/websocket"
)

// writeLoop drains wc.send until the read loop closes it, and pings the
// worker every PingInterval while it does. A worker that leaves
// MaxMissedPings pings in a row unanswered is closed: a volunteer that is
// idle but alive (a paused tab, a daemon waiting for work) answers pings
// from its websocket stack; one that stopped answering is gone, and would
// otherwise hold a connection, and maybe leases, until the TCP stack
// notices, which can take hours.
func (s *Server) writeLoop(wc *workerConn) {
	var tick <-chan time.Time
	if s.cfg.PingInterval > 0 {
		t := time.NewTicker(s.cfg.PingInterval)
		defer t.Stop()
		tick = t.C
	}
	missed := 0
	for {
		select {
		case b, ok := <-wc.send:
			if !ok {
				return
			}
			wctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
			err := wc.ws.Write(wctx, websocket.MessageBinary, b)
			cancel()
			if err != nil {
				s.abandon(wc)
				return
			}
		case <-tick:
			switch err := s.ping(wc); {
			case err == nil:
				missed = 0
			case errors.Is(err, context.DeadlineExceeded):
				if missed++; missed >= s.cfg.MaxMissedPings {
					why := fmt.Sprintf("no answer to %d pings in a row, %v apart", missed, s.cfg.PingInterval)
					wc.closedBy.Store(&why)
					// It reads nothing, so it would not read a close
					// frame either: drop it at once.
					s.abandon(wc)
					return
				}
			default: // the connection is closed
				s.abandon(wc)
				return
			}
		}
	}
}

// ping waits at most one interval for the worker's pong. The pong is read
// by the library while the read loop waits for the next message.
func (s *Server) ping(wc *workerConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.PingInterval)
	defer cancel()
	return wc.ws.Ping(ctx)
}

// abandon drops the connection, which ends the read loop, and drains
// wc.send so that the read loop never blocks on it.
func (s *Server) abandon(wc *workerConn) {
	wc.ws.CloseNow()
	for range wc.send {
	}
}
