package coordinator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/crowdtrain/crowdtrain/store"
)

// MetricEvent is one metrics row as the live event stream carries it.
type MetricEvent struct {
	Job    string       `json:"job"`
	Metric store.Metric `json:"metric"`
}

// hub fans metrics rows out to the live event streams. Publishing never
// blocks the job loop: a stream too slow to keep up loses rows (the page
// reloads history on reconnect).
type hub struct {
	mu   sync.Mutex
	subs map[chan MetricEvent]struct{}
}

func (h *hub) subscribe() chan MetricEvent {
	c := make(chan MetricEvent, 64)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[chan MetricEvent]struct{}{}
	}
	h.subs[c] = struct{}{}
	h.mu.Unlock()
	return c
}

func (h *hub) unsubscribe(c chan MetricEvent) {
	h.mu.Lock()
	delete(h.subs, c)
	h.mu.Unlock()
}

func (h *hub) publish(e MetricEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.subs {
		select {
		case c <- e:
		default:
		}
	}
}

// handleEvents streams server-sent events: "jobs" and "workers" (their
// views, about once a second) and "metric" (each metrics row as it is
// recorded).
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "this connection cannot stream events")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must not hold the stream back
	sub := s.events.subscribe()
	defer s.events.unsubscribe(sub)

	send := func(event string, v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	views := func() bool {
		jobs, err := s.JobViews(r.Context())
		if err != nil {
			return false
		}
		return send("jobs", jobs) && send("workers", s.workerViews(r.Context()))
	}
	fmt.Fprint(w, "retry: 2000\n\n")
	if !views() {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		case e := <-sub:
			if !send("metric", e) {
				return
			}
		case <-tick.C:
			if !views() {
				return
			}
		}
	}
}
