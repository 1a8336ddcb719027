package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// Config is a load: Idle connected volunteers that never ask for work and
// Active ones that each hold a lease and return a result every Every.
type Config struct {
	Coordinator string // websocket URL
	Idle        int
	Active      int
	Every       time.Duration // how long an active worker holds each lease
	// Binds are local addresses the connections come from, in turn
	// (127.0.0.N on loopback), so that no one address holds them all; empty:
	// the system's choice.
	Binds []string
	// Ramp is how long connecting them all takes (evenly spread), so that
	// the coordinator's hello limits and the kernel's accept queue see a
	// crowd arriving, not a burst.
	Ramp time.Duration
	Logf func(format string, args ...any)
}

// Stats are the load's counters and the lease latencies seen since the
// last Window call.
type Stats struct {
	IdleConnected, ActiveConnected int64
	Leases, Results, Accepted      int64
	Rejected                       map[string]int64 // ack reasons
	Errors                         int64            // sessions that ended with an error
}

// Load runs a Config until its context ends.
type Load struct {
	cfg Config

	idle, active              atomic.Int64
	leases, results, accepted atomic.Int64
	errs                      atomic.Int64
	mu                        sync.Mutex
	rejected                  map[string]int64
	latencies                 []time.Duration // want → lease, this window
	lastErr                   string
}

// New checks cfg.
func New(cfg Config) (*Load, error) {
	switch {
	case cfg.Coordinator == "":
		return nil, errors.New("loadgen: no coordinator URL")
	case cfg.Idle < 0 || cfg.Active < 0 || cfg.Idle+cfg.Active == 0:
		return nil, fmt.Errorf("loadgen: %d idle and %d active workers: want some", cfg.Idle, cfg.Active)
	case cfg.Active > 0 && cfg.Every <= 0:
		return nil, errors.New("loadgen: active workers need a positive Every")
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Load{cfg: cfg, rejected: map[string]int64{}}, nil
}

// Run connects the workers, keeps them connected (reconnecting any that
// drop) and returns when ctx ends.
func (l *Load) Run(ctx context.Context) {
	n := l.cfg.Idle + l.cfg.Active
	var wg sync.WaitGroup
	step := time.Duration(0)
	if n > 1 {
		step = l.cfg.Ramp / time.Duration(n)
	}
	for i := range n {
		if i > 0 && step > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return
			case <-time.After(step):
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.worker(ctx, i, i >= l.cfg.Idle)
		}()
	}
	wg.Wait()
}

// Stats returns the counters.
func (l *Load) Stats() Stats {
	l.mu.Lock()
	rej := make(map[string]int64, len(l.rejected))
	for k, v := range l.rejected {
		rej[k] = v
	}
	l.mu.Unlock()
	return Stats{IdleConnected: l.idle.Load(), ActiveConnected: l.active.Load(), Leases: l.leases.Load(),
		Results: l.results.Load(), Accepted: l.accepted.Load(), Rejected: rej, Errors: l.errs.Load()}
}

// Window returns the lease latencies (from a want to its lease) seen since
// the last call, sorted, and the last session error.
func (l *Load) Window() ([]time.Duration, string) {
	l.mu.Lock()
	lat := l.latencies
	l.latencies = nil
	e := l.lastErr
	l.mu.Unlock()
	slices.Sort(lat)
	return lat, e
}

// Quantile is the q quantile of sorted durations; 0 when there are none.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// worker keeps one volunteer connected until ctx ends.
func (l *Load) worker(ctx context.Context, i int, active bool) {
	rng := rand.New(rand.NewPCG(uint64(i), 0x6c6f6164))
	for ctx.Err() == nil {
		err := l.session(ctx, i, active, rng)
		if ctx.Err() != nil {
			return
		}
		l.errs.Add(1)
		l.mu.Lock()
		l.lastErr = err.Error()
		l.mu.Unlock()
		// Back off 1 to 2 s: a crowd reconnecting at once is not the load.
		select {
		case <-ctx.Done():
		case <-time.After(time.Second + rand.N(time.Second)):
		}
	}
}

func (l *Load) dialer(i int) *net.Dialer {
	d := &net.Dialer{Timeout: 30 * time.Second}
	if len(l.cfg.Binds) > 0 {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(l.cfg.Binds[i%len(l.cfg.Binds)])}
	}
	return d
}

type session struct {
	ws *websocket.Conn
}

func (s *session) send(ctx context.Context, m protocol.Message) error {
	b, err := protocol.Encode(m)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return s.ws.Write(wctx, websocket.MessageBinary, b)
}

func (l *Load) session(ctx context.Context, i int, active bool, rng *rand.Rand) error {
	hc := &http.Client{Transport: &http.Transport{DialContext: l.dialer(i).DialContext}}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ws, _, err := websocket.Dial(dctx, l.cfg.Coordinator, &websocket.DialOptions{HTTPClient: hc})
	cancel()
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	s := &session{ws: ws}
	if err := s.send(ctx, &protocol.Hello{Protocol: protocol.Version, Kind: protocol.KindNative, Backend: "loadgen", Threads: 1,
		Client: "crowdtrain-loadgen", Codecs: []string{protocol.CodecF32}}); err != nil {
		return err
	}
	msgs := make(chan protocol.Message, 16)
	errc := make(chan error, 1)
	go func() {
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				errc <- err
				return
			}
			m, err := protocol.Decode(b, 1<<20)
			if err != nil {
				continue
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	var welcome *protocol.Welcome
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return fmt.Errorf("no welcome: %w", err)
	case m := <-msgs:
		w, ok := m.(*protocol.Welcome)
		if !ok {
			if e, ok := m.(*protocol.Error); ok {
				return fmt.Errorf("refused: %s: %s", e.Code, e.Message)
			}
			return fmt.Errorf("expected welcome, got %s", m.MessageType())
		}
		welcome = w
	case <-time.After(30 * time.Second):
		return errors.New("no welcome within 30 s")
	}
	counter := &l.idle
	if active {
		counter = &l.active
	}
	counter.Add(1)
	defer counter.Add(-1)
	if !active {
		// An idle volunteer: connected, answering pings (the reader above
		// does), asking for nothing.
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return fmt.Errorf("connection: %w", err)
		}
	}
	return l.activeLoop(ctx, s, welcome, msgs, errc, rng)
}

// activeLoop asks for one lease at a time, holds it for Every and sends
// a result of the job's size.
func (l *Load) activeLoop(ctx context.Context, s *session, w *protocol.Welcome, msgs <-chan protocol.Message, errc <-chan error, rng *rand.Rand) error {
	update := make(protocol.Floats, w.Job.NumParams)
	wantAt := time.Now()
	if err := s.send(ctx, &protocol.Want{N: 1}); err != nil {
		return err
	}
	type held struct {
		lease   *protocol.Lease
		base    int64
		started bool // a lease on the latest snapshot: its base is fixed
	}
	due := map[uint64]*held{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var next uint64                // the lease whose result is due when timer fires
	var wantLater <-chan time.Time // set after an idle: when to ask again
	for {
		select {
		case <-ctx.Done():
			bctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.send(bctx, &protocol.Bye{Reason: "load over"})
			cancel()
			return nil
		case err := <-errc:
			return fmt.Errorf("connection: %w", err)
		case <-timer.C:
			h := due[next]
			if h == nil {
				continue
			}
			if !h.started {
				// A lease on the latest snapshot: start it now, at the end
				// of the hold, so that its base is what a worker that had
				// just computed would have (its staleness is what the
				// coordinator applied meanwhile, not the whole hold).
				if err := s.send(ctx, &protocol.Start{LeaseID: h.lease.ID, JobID: h.lease.JobID}); err != nil {
					return err
				}
				continue
			}
			if err := l.sendResult(ctx, s, h.lease, h.base, update, rng); err != nil {
				return err
			}
			delete(due, next)
		case m := <-msgs:
			switch m := m.(type) {
			case *protocol.Lease:
				l.leases.Add(1)
				l.mu.Lock()
				l.latencies = append(l.latencies, time.Since(wantAt))
				l.mu.Unlock()
				due[m.ID] = &held{lease: m, base: m.BaseVersion, started: m.Snapshot != protocol.SnapshotLatest}
				next = m.ID
				timer.Reset(l.cfg.Every)
			case *protocol.Started:
				if h := due[m.LeaseID]; h != nil && !h.started {
					if err := l.sendResult(ctx, s, h.lease, m.BaseVersion, update, rng); err != nil {
						return err
					}
					delete(due, m.LeaseID)
				}
			case *protocol.Ack:
				if m.Accepted {
					l.accepted.Add(1)
				} else {
					l.mu.Lock()
					l.rejected[m.Reason]++
					l.mu.Unlock()
					delete(due, m.LeaseID) // a refused start, or a refused result
				}
				if len(due) == 0 {
					wantAt = time.Now()
					if err := s.send(ctx, &protocol.Want{N: 1}); err != nil {
						return err
					}
				}
			case *protocol.Idle:
				wantLater = time.After(time.Duration(max(m.RetryMs, 50)) * time.Millisecond)
			}
		case <-wantLater:
			wantLater = nil
			wantAt = time.Now()
			if err := s.send(ctx, &protocol.Want{N: 1}); err != nil {
				return err
			}
		}
	}
}

// sendResult sends a result for lease on base: noise of the job's size,
// so that no two results are alike.
func (l *Load) sendResult(ctx context.Context, s *session, lease *protocol.Lease, base int64, update protocol.Floats, rng *rand.Rand) error {
	for i := range update {
		update[i] = float32(rng.NormFloat64() * 1e-4)
	}
	if err := s.send(ctx, &protocol.Result{LeaseID: lease.ID, JobID: lease.JobID, BaseVersion: base,
		Codec: protocol.CodecF32, Update: update, Examples: lease.Count, LossSum: 2.3 * float64(lease.Count),
		ComputeMs: float64(l.cfg.Every.Milliseconds())}); err != nil {
		return err
	}
	l.results.Add(1)
	return nil
}
