package coordinator

import (
	"context"
	"sync"

	"github.com/coder/websocket"
)

// outbox queues a connection's outgoing frames and writes them from a
// goroutine that exists only while there is something to write: the read
// loop never waits on a slow peer, and an idle connection spends no
// goroutine (and no stack) on writing.
type outbox struct {
	mu      sync.Mutex
	idle    sync.Cond // signalled when the writer stops; L is &mu
	queue   [][]byte
	writing bool // a writer goroutine is running
	broken  bool // a write failed: the connection is being dropped
}

// push queues b and starts a writer if none runs. It reports false when
// sendQueue frames are already waiting (full: the peer is too slow) or
// the connection broke.
func (s *Server) push(wc *workerConn, b []byte) (ok, full bool) {
	o := &wc.out
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.broken {
		return false, false
	}
	if len(o.queue) >= sendQueue {
		return false, true
	}
	o.queue = append(o.queue, b)
	if !o.writing {
		o.writing = true
		go s.drain(wc)
	}
	return true, false
}

// drain writes queued frames until none is left.
func (s *Server) drain(wc *workerConn) {
	o := &wc.out
	for {
		o.mu.Lock()
		if len(o.queue) == 0 || o.broken {
			o.queue, o.writing = o.queue[:0], false
			o.idle.Broadcast()
			o.mu.Unlock()
			return
		}
		b := o.queue[0]
		o.queue[0] = nil
		o.queue = o.queue[1:]
		o.mu.Unlock()
		wctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
		err := wc.ws.Write(wctx, websocket.MessageBinary, b)
		cancel()
		if err != nil {
			wc.ws.CloseNow()
			o.mu.Lock()
			o.broken = true
			o.mu.Unlock()
		}
	}
}

// flush waits until everything queued is written (or the connection broke).
func (o *outbox) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.writing {
		o.idle.Wait()
	}
}
