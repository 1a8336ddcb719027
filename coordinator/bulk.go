package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
)

// Bulk data (snapshots, shards, the pages' wasm) is large next to the
// request that asks for it, so an anonymous client could make the
// coordinator send gigabytes a second. A client address that holds no
// lease gets a small budget (AnonBulkRate, AnonBulkBurst); a worker's own
// leases' snapshots and shards are free, however fast it trains. The URLs,
// ETags and Cache-Control stay as they are, so a cache in front serves them
// without these limits.

// paceChunk is how much is written under one write deadline.
const paceChunk = 256 << 10

// chargeBulk spends n bytes of the anonymous budget of r's client, or
// answers 429 and returns false. Headers already set for the body are
// dropped.
func (s *Server) chargeBulk(w http.ResponseWriter, r *http.Request, n int) bool {
	if n <= 0 || s.fromRelay(r) {
		return true
	}
	ok, wait := s.bulk.take(s.clientKey(r), float64(n), time.Now())
	if ok {
		return true
	}
	h := w.Header()
	for _, k := range []string{"Content-Length", "Content-Encoding", "ETag", "Cache-Control", "Vary"} {
		h.Del(k) // set for the body that is not coming
	}
	secs := retryAfterSeconds(wait)
	h.Set("Retry-After", strconv.Itoa(secs))
	writeError(w, http.StatusTooManyRequests,
		"this address has downloaded its share of snapshots, shards and page files without holding a lease "+
			"(%d bytes/s after a first %d bytes); try again in %d s, or join as a worker: the data of a worker's own leases is not limited",
		s.cfg.AnonBulkRate, s.cfg.AnonBulkBurst, secs)
	return false
}

// leaseHeldFrom reports whether a worker connected from r's client address
// holds a lease of j that match accepts.
func (s *Server) leaseHeldFrom(ctx context.Context, r *http.Request, j *Job, match func(*engine.Lease) bool) bool {
	ids := s.workersFrom(r, j)
	if len(ids) == 0 {
		return false
	}
	return j.holds(ctx, ids, match)
}

// snapshotHeldFrom is leaseHeldFrom for a lease based on version: a
// started lease is found without the job's loop (startgrants.go).
func (s *Server) snapshotHeldFrom(ctx context.Context, r *http.Request, j *Job, version int64) bool {
	ids := s.workersFrom(r, j)
	if len(ids) == 0 {
		return false
	}
	if j.grants.holds(ids, version, time.Now()) {
		return true
	}
	return j.holds(ctx, ids, func(l *engine.Lease) bool { return l.Base == version })
}

// workersFrom is the ids of the workers of j connected from r's client
// address.
func (s *Server) workersFrom(r *http.Request, j *Job) map[string]bool {
	key := s.clientKey(r)
	ids := map[string]bool{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, w := range s.workers {
		if w.clientKey == key && w.jobOf(j.ID) == j {
			ids[id] = true
		}
	}
	return ids
}

// holds asks the job's loop whether one of workers holds a lease that
// match accepts.
func (j *Job) holds(ctx context.Context, workers map[string]bool, match func(*engine.Lease) bool) bool {
	held := false
	_ = j.exec(ctx, func(st *jobState) {
		for _, l := range st.sched.Leases() {
			if workers[l.Worker] && match(l) {
				held = true
				return
			}
		}
	})
	return held
}

// writePaced writes body in chunks, each under a write deadline that holds
// the client to MinReadRate once MinReadGrace has passed. A slow link
// downloading a big snapshot is fine; a client that stops reading and pins
// the socket's kernel buffers is cut.
func (s *Server) writePaced(w http.ResponseWriter, body []byte) error {
	rc := http.NewResponseController(w)
	start := time.Now()
	paced := true
	for written := 0; written < len(body); {
		n := min(paceChunk, len(body)-written)
		if paced {
			allowed := time.Duration(float64(written+n) / float64(s.cfg.MinReadRate) * float64(time.Second))
			if err := rc.SetWriteDeadline(start.Add(s.cfg.MinReadGrace + allowed)); errors.Is(err, http.ErrNotSupported) {
				paced = false // a test's recorder: nothing to pin
			}
		}
		if _, err := w.Write(body[written : written+n]); err != nil {
			return fmt.Errorf("client read slower than %d bytes/s: %w", s.cfg.MinReadRate, err)
		}
		written += n
	}
	if paced {
		_ = rc.SetWriteDeadline(time.Time{})
	}
	return nil
}

// budgetPages charges what the pages (chiefly the browser worker's wasm)
// send to the anonymous budget and paces the writing.
func (s *Server) budgetPages(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&budgetWriter{ResponseWriter: w, s: s, r: r}, r)
	})
}

// budgetWriter charges a response's Content-Length when its header is
// written, and answers 429 instead when the budget is spent.
type budgetWriter struct {
	http.ResponseWriter
	s           *Server
	r           *http.Request
	wroteHeader bool
	refused     bool
}

func (b *budgetWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }

func (b *budgetWriter) WriteHeader(code int) {
	if b.wroteHeader {
		return
	}
	b.wroteHeader = true
	// A range of a download (206) is charged as well: ranges must not
	// fetch what a whole response would be refused.
	if (code == http.StatusOK || code == http.StatusPartialContent) && b.r.Method == http.MethodGet {
		n, _ := strconv.Atoi(b.Header().Get("Content-Length"))
		if !b.s.chargeBulk(b.ResponseWriter, b.r, n) {
			b.refused = true
			return
		}
	}
	b.ResponseWriter.WriteHeader(code)
}

func (b *budgetWriter) Write(p []byte) (int, error) {
	if !b.wroteHeader {
		b.WriteHeader(http.StatusOK)
	}
	if b.refused {
		return len(p), nil // the 429 is written; the page's body is dropped
	}
	if err := b.s.writePaced(b.ResponseWriter, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
