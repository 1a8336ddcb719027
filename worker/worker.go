package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// Config configures a Worker. Coordinator and Backend are required.
type Config struct {
	// Coordinator is the websocket URL, e.g. ws://127.0.0.1:8080/ws, or
	// a comma-separated list of them (a coordinator's relays): the
	// worker connects to the first it reaches and moves to the next when
	// the one it uses cannot be reached.
	Coordinator string
	Backend     Backend
	// Kind is the kind of worker it says it is in hello:
	// protocol.KindNative (the default), KindBrowser or KindGPU. It is
	// the worker's, not its backend's: a browser tab and a native daemon
	// run the same CPU backend.
	Kind string
	// Client names this software and its version in hello.
	Client string
	// Token is the join token, for a coordinator that takes only
	// volunteers with one (serve --join token).
	Token string
	// VolunteerKey is the random key the volunteer keeps (22..128
	// characters of base64url): its credit and standing attach to it.
	// Empty sends none: the coordinator knows the volunteer by address.
	VolunteerKey string
	// Name is the display name on the coordinator's leaderboard
	// (protocol.CheckVolunteerName); empty stays anonymous.
	Name string
	// HTTPClient fetches snapshots and shards; nil means http.DefaultClient,
	// or a client with TLSConfig when that is set.
	HTTPClient *http.Client
	// TLSConfig is for wss:// and https:// coordinators: nil trusts the
	// system's CAs; set RootCAs for a private CA (work --ca-file). It is
	// used for the websocket, and for downloads when HTTPClient is nil.
	TLSConfig *tls.Config
	// Deltas says how a new snapshot comes down once one is held:
	// DeltasAuto (the zero value) measures both ways and takes the
	// cheaper, DeltasAlways asks for a delta every time it can.
	Deltas DeltaPolicy
	// Fetch, when set, downloads snapshots and shards instead of
	// HTTPClient: it GETs url and returns the body, reusing buf's storage
	// where it can, or an error naming the status. The browser worker sets
	// it: one fetch into one ArrayBuffer is several times faster than
	// net/http's js transport, which copies a stream chunk by chunk.
	// workerID is the session's worker id, for the X-Crowdtrain-Worker
	// header (WorkerHeader) the request must carry.
	Fetch func(ctx context.Context, url, workerID string, buf []byte) ([]byte, error)
	// Logf receives connection events and problems; nil means log.Printf.
	Logf func(format string, args ...any)
	// MinBackoff and MaxBackoff bound the wait between reconnects.
	MinBackoff, MaxBackoff time.Duration
	// Prefetch is how many leases to hold at once: 2 fetches the next
	// task's data while the current one computes.
	Prefetch int
	// StartAhead starts the next lease with snapshot "latest", and
	// downloads its snapshot, while the current one computes, instead of
	// after its result (startahead.go). The backend waits less; the base
	// misses that result, one version more staleness, which costs
	// examples where staleness hurts (charlm-tiny: 1.5x to 1.8x the
	// examples with two workers).
	StartAhead bool
	// ShardCacheBytes bounds the shards kept in memory, by their encoded
	// size (0: DefaultShardCacheBytes). The browser keeps a small one:
	// its Cache Storage holds the downloads.
	ShardCacheBytes int64
	// Job pins the worker to one job, or a sweep's trials, by id; empty:
	// whatever job the coordinator places it on.
	Job string
	// Caps is what the worker tells the coordinator it can run (memory,
	// model size, layers, speed); nil sends none, and only jobs that
	// require nothing are placed on it. The data sets it holds shards of
	// are added to it.
	Caps *protocol.Caps
	// Duty is the share of wall time spent computing, in (0, 1]; 0 means
	// 1. After each task the worker rests so that computing takes this
	// share, which keeps a laptop cool or a browser tab light. SetDuty
	// changes it while the worker runs.
	Duty float64
	// Idle, when set, keeps the worker to the times the machine is
	// otherwise idle, and Hours, when set, to a daily window: asked every
	// PollEvery (0: DefaultPollEvery), a no pauses the worker (Pause) and
	// a yes from both, held for ResumeAfter, resumes it. Now is the clock
	// Hours is read on (nil: time.Now, local time).
	Idle        IdleDetector
	Hours       Hours
	PollEvery   time.Duration
	ResumeAfter time.Duration
	Now         func() time.Time
}

// Stats is what a worker has done so far, for progress lines and pages.
type Stats struct {
	Connected     bool
	WorkerID      string
	JobID         string
	JobName       string
	Examples      int64 // examples in accepted results
	Computed      int64 // examples computed, accepted or not
	Accepted      int64
	Rejected      int64
	Rejections    map[string]int64 // reason → count
	LastReason    string           // why the last rejection happened
	LastStaleness int64
	Version       int64 // the model version in the last ack
	Connects      int
	Idle          bool
	Paused        bool   // by Pause, Config.Idle or Config.Hours
	PauseReason   string // why, while Paused
	// Generating is set while the worker computes an RL job's rollout
	// lease (inference: sampling completions), not a training step.
	Generating bool
}

// Worker runs the shared worker loop. Run it once; Stats may be called
// concurrently from any goroutine.
type Worker struct {
	cfg   Config
	addrs []string // Coordinator's URLs
	http  *http.Client

	duty  atomic.Uint64 // math.Float64bits of the duty cycle
	pause pauseState    // pause.go

	mu    sync.Mutex
	stats Stats

	snaps snapCache // the last snapshot, kept across sessions (snapcache.go)

	// The shards kept in memory, across sessions and jobs (fetch.go):
	// jobs that cut the same data share their URLs.
	shardMu    sync.Mutex
	shards     map[string]cachedShard
	shardOrder []string
	shardBytes int64 // the cached shards' encoded sizes, summed
}

// ErrRefused means the coordinator refused this worker for a reason that
// retrying will not fix (a protocol version mismatch, a bad join token).
var ErrRefused = errors.New("coordinator refused this worker")

// ErrBanned (which is also ErrRefused) means the coordinator banned this
// volunteer; the error's text carries the operator's reason. A ban can be
// lifted, so a caller that keeps trying does so slowly.
var ErrBanned = fmt.Errorf("%w: banned", ErrRefused)

// ErrJoinToken (which is also ErrRefused) means the coordinator takes only
// volunteers with a join token, and this one's is missing, wrong or revoked.
var ErrJoinToken = fmt.Errorf("%w: join_token", ErrRefused)

// New checks cfg and returns a worker.
func New(cfg Config) (*Worker, error) {
	if cfg.Backend == nil {
		return nil, errors.New("worker: Config.Backend is required")
	}
	addrs, err := parseCoordinators(cfg.Coordinator)
	if err != nil {
		return nil, err
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	if cfg.VolunteerKey != "" {
		if err := protocol.CheckVolunteerKey(cfg.VolunteerKey); err != nil {
			return nil, fmt.Errorf("worker: volunteer key: %v", err)
		}
	}
	if err := protocol.CheckVolunteerName(cfg.Name); err != nil {
		return nil, fmt.Errorf("worker: name %q: %v", cfg.Name, err)
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(30*time.Second, cfg.MinBackoff)
	}
	switch cfg.Kind {
	case "":
		cfg.Kind = protocol.KindNative
	case protocol.KindNative, protocol.KindBrowser, protocol.KindGPU:
	default:
		return nil, fmt.Errorf("worker: kind %q; want %s, %s or %s", cfg.Kind, protocol.KindNative, protocol.KindBrowser, protocol.KindGPU)
	}
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = 2
	}
	cfg.Prefetch = min(cfg.Prefetch, protocol.MaxWant)
	if cfg.Client == "" {
		cfg.Client = "crowdtrain"
	}
	// A browser's user agent can be longer than hello allows; cut it
	// rather than be refused.
	cfg.Client = strings.ToValidUTF8(truncate(cfg.Client, protocol.MaxShortText), "")
	if cfg.Duty == 0 {
		cfg.Duty = 1
	}
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = DefaultPollEvery
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if len(cfg.Job) > protocol.MaxShortText {
		return nil, fmt.Errorf("worker: job id of %d bytes; ids are at most %d", len(cfg.Job), protocol.MaxShortText)
	}
	w := &Worker{cfg: cfg, addrs: addrs, http: cfg.HTTPClient, shards: map[string]cachedShard{}}
	if w.http == nil && cfg.TLSConfig != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = cfg.TLSConfig
		w.http = &http.Client{Transport: t}
	}
	if w.http == nil {
		w.http = http.DefaultClient
	}
	if err := w.SetDuty(cfg.Duty); err != nil {
		return nil, err
	}
	return w, nil
}

// SetDuty sets the share of wall time spent computing, in (0, 1]. It takes
// effect after the task being computed.
func (w *Worker) SetDuty(d float64) error {
	if !(d > 0 && d <= 1) {
		return fmt.Errorf("worker: duty cycle must be in (0, 1], got %v", d)
	}
	w.duty.Store(math.Float64bits(d))
	return nil
}

// rest is how long to pause after computing for busy, so that computing
// takes the duty-cycle share of the time.
func (w *Worker) rest(busy time.Duration) time.Duration {
	d := math.Float64frombits(w.duty.Load())
	if d >= 1 {
		return 0
	}
	return time.Duration(float64(busy) * (1 - d) / d)
}

// Stats returns a copy of the worker's counters.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.Rejections = maps.Clone(s.Rejections)
	return s
}

func (w *Worker) update(f func(*Stats)) {
	w.mu.Lock()
	f(&w.stats)
	w.mu.Unlock()
}

// Run connects and works until ctx ends, reconnecting with exponential
// backoff and jitter whenever the connection drops. It returns ctx's error,
// or an error wrapping ErrRefused when retrying cannot help. When ctx ends
// the worker says bye, so its leases go back at once. Run may be called
// again after it returns (a paused worker resuming); Stats keep counting.
func (w *Worker) Run(ctx context.Context) error {
	if w.cfg.Idle != nil || w.cfg.Hours.Set() {
		gctx, stop := context.WithCancel(ctx)
		defer stop()
		w.Pause("checking whether the machine is idle")
		go w.govern(gctx) // pause.go
	}
	backoff := w.cfg.MinBackoff
	// cur is the coordinator in use; unreached counts the ones that could
	// not be reached since one last could: the worker moves on to the next
	// at once, and waits only when none can be reached.
	cur, unreached := 0, 0
	failed := "" // the relay last found unreachable
	for {
		start := time.Now()
		addr := w.dialTarget(ctx, w.addrs[cur], failed)
		err := w.session(ctx, addr)
		if failed = ""; errors.Is(err, errDial) {
			failed = addr
		}
		w.update(func(s *Stats) { s.Connected = false })
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrRefused) {
			return err
		}
		if time.Since(start) > 10*time.Second {
			backoff = w.cfg.MinBackoff // it worked for a while: start over
		}
		if errors.Is(err, errDial) {
			unreached++
		} else {
			unreached = 0
		}
		if errors.Is(err, errDial) && len(w.addrs) > 1 {
			cur = (cur + 1) % len(w.addrs)
			if unreached < len(w.addrs) {
				w.cfg.Logf("%v; trying %s", err, w.addrs[cur])
				continue
			}
			unreached = 0
		}
		// Full jitter in [backoff/2, backoff) spreads a crowd of workers
		// reconnecting to a restarted coordinator.
		wait := backoff/2 + rand.N(backoff/2+1)
		if websocket.CloseStatus(err) == websocket.StatusGoingAway {
			err = errors.New("the coordinator is shutting down or restarting")
		}
		w.cfg.Logf("disconnected: %v; reconnecting to %s in %v", err, w.addrs[cur], wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(2*backoff, w.cfg.MaxBackoff)
	}
}

// errDial marks a session that could not connect at all.
var errDial = errors.New("unreachable")

// parseCoordinators splits Config.Coordinator into its URLs and checks
// each.
func parseCoordinators(list string) ([]string, error) {
	var addrs []string
	for a := range strings.SplitSeq(list, ",") {
		a = strings.TrimSpace(a)
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "ws" && u.Scheme != "wss" && u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("worker: coordinator URL %q must look like ws://HOST:PORT/ws (or wss://), or http://HOST:PORT for a coordinator whose relays to join; several are separated by commas", a)
		}
		if slices.Contains(addrs, a) {
			return nil, fmt.Errorf("worker: coordinator URL %q is listed twice", a)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// session is one connection, from dial to drop.
type session struct {
	w       *Worker
	conn    *websocket.Conn
	base    *url.URL // http(s) base that relative lease URLs resolve against
	welcome *protocol.Welcome

	// jobs.go: what it needs per job, the oldest first in order; the job
	// of the latest assign; the jobs whose leases were revoked.
	jobsMu  sync.Mutex
	jobs    map[string]*jobCtx
	order   []string
	current *jobCtx
	revoked sync.Map
	backend compute.Prepared // what the backend is prepared for
	// backendSent is the backend's name as the coordinator last heard it
	// (hello, or a result's backend): a kernel chosen after the hello is
	// sent with the next result.
	backendSent atomic.Pointer[string]

	sendMu  sync.Mutex
	sendBuf []byte
	batch   batcher // nil where writes need no batching

	link    linkEstimate  // link.go
	linkOut protocol.Link // the link a result points at: no allocation

	held atomic.Int32 // leases received and not yet answered
	// starved is set when a pause kept back a want: resuming asks again
	// (pause.go).
	starved atomic.Bool
	// counts maps lease id → example count until its ack arrives (acks
	// carry only the id).
	counts sync.Map
	// starting maps the id of a lease whose start was sent → a chan
	// *protocol.Started (capacity 1) that gets the answer, or nil when the
	// coordinator refused to start it (an ack rejecting it).
	starting sync.Map
	// readerDone is closed when the reader stops: nothing more will
	// answer a start.
	readerDone chan struct{}
}

func (w *Worker) session(ctx context.Context, addr string) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, batch, err := dial(dctx, addr, w.cfg.TLSConfig)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: failed to dial %s: %w", errDial, addr, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)

	s := &session{w: w, conn: conn, batch: batch, readerDone: make(chan struct{})}
	s.base, _ = url.Parse(addr)
	s.base.Scheme = map[string]string{"ws": "http", "wss": "https"}[s.base.Scheme]
	s.base.Path, s.base.RawQuery = "", ""

	b := w.cfg.Backend
	helloBackend := b.Name()
	s.backendSent.Store(&helloBackend)
	caps := &protocol.Caps{}
	if w.cfg.Caps != nil {
		*caps = *w.cfg.Caps
	}
	caps.Data = append(slices.Clip(caps.Data), w.heldData()...)
	if s, ok := b.(interface{ SplitsBatches() bool }); ok && s.SplitsBatches() {
		caps.MicroBatches = true
	}
	// Every worker computes RL jobs' rollout and learn leases, on the
	// host with nn whatever its backend (in a tab: wasm, with SIMD where
	// the browser has it).
	caps.RL, caps.RLLocalSteps = true, true
	if err := s.send(ctx, &protocol.Hello{
		Protocol: protocol.Version, Kind: w.cfg.Kind, Backend: helloBackend, Threads: b.Threads(),
		Client: w.cfg.Client, Codecs: protocol.UpdateCodecs, Token: w.cfg.Token,
		VolunteerKey: w.cfg.VolunteerKey, Name: w.cfg.Name,
		SnapshotCodecs: []string{protocol.SnapshotF32, protocol.SnapshotF16},
		// Only the HTTP client here reads the rebased version's header;
		// a Config.Fetch (the browser's) returns bodies alone.
		SnapshotRebase: w.cfg.Fetch == nil,
		Caps:           caps, Job: w.cfg.Job,
	}); err != nil {
		return err
	}
	if err := s.readWelcome(ctx); err != nil {
		return err
	}
	w.update(func(st *Stats) {
		st.Connected, st.WorkerID, st.JobID, st.JobName = true, s.welcome.WorkerID, s.welcome.Job.ID, s.welcome.Job.Name
		st.Connects++
	})
	// Strings from the other end are quoted: they must not forge log lines.
	if j := s.welcome.Job; j.ID != "" {
		w.cfg.Logf("connected as %q to job %q (%q, %d parameters, updates in %q)", s.welcome.WorkerID, j.ID, j.Name, j.NumParams, s.current.codec())
	} else {
		w.cfg.Logf("connected as %q; no job for this worker yet", s.welcome.WorkerID)
	}
	return s.work(ctx)
}

func (s *session) readWelcome(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := s.read(rctx)
	if err != nil {
		if st := websocket.CloseStatus(err); st == websocket.StatusUnsupportedData || st == websocket.StatusPolicyViolation {
			return fmt.Errorf("%w: %v", ErrRefused, err)
		}
		return fmt.Errorf("no welcome: %w", err)
	}
	switch m := m.(type) {
	case *protocol.Welcome:
		s.welcome = m
		if m.Job.ID != "" {
			s.addJob(m.Job, m.Limits)
		}
		return nil
	case *protocol.Error:
		switch m.Code {
		case "bad_hello":
			// Retrying the same hello cannot help.
			return fmt.Errorf("%w: %s: %s", ErrRefused, m.Code, m.Message)
		case "banned":
			return fmt.Errorf("%w: %s", ErrBanned, m.Message)
		case "join_token":
			return fmt.Errorf("%w: %s", ErrJoinToken, m.Message)
		}
		return fmt.Errorf("coordinator: %s: %s", m.Code, m.Message)
	default:
		return fmt.Errorf("expected welcome, got %s", m.MessageType())
	}
}

func (s *session) read(ctx context.Context) (protocol.Message, error) {
	typ, data, err := s.conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageBinary {
		return nil, errors.New("coordinator sent a text frame")
	}
	m, err := protocol.Decode(data, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("bad message from coordinator: %w", err)
	}
	return m, nil
}

// send encodes m into the session's reused buffer and writes it.
func (s *session) send(ctx context.Context, m protocol.Message) error {
	return s.sendFor(ctx, m, 0)
}

// sendFor is send; for a result (lease != 0) the link estimate notes when
// its frame starts going out and its size (link.go).
func (s *session) sendFor(ctx context.Context, m protocol.Message, lease uint64) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	b, err := protocol.AppendEncode(s.sendBuf, m)
	if err != nil {
		return err
	}
	s.sendBuf = b
	if lease != 0 {
		s.link.sending(lease, len(b), time.Now())
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if s.batch != nil {
		s.batch.hold()
	}
	err = s.conn.Write(wctx, websocket.MessageBinary, b)
	if s.batch != nil {
		if rerr := s.batch.release(); err == nil {
			err = rerr
		}
	}
	if err != nil {
		return fmt.Errorf("failed to send %s: %w", m.MessageType(), err)
	}
	return nil
}

// batcher holds a connection's writes for one message (see dial).
type batcher interface {
	hold()
	release() error
}

// work runs four stages until the connection drops: the reader takes
// leases and acks off the socket, the fetcher downloads each lease's shard
// and, for a "granted" lease, its snapshot, the starter hands tasks on
// (with Config.StartAhead, starting a "latest" lease and downloading its
// snapshot first: startahead.go), and this goroutine computes. The
// fetcher runs one task ahead, so the backend waits on the network only
// for what cannot be fetched before the task begins.
func (s *session) work(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	leases := make(chan protocol.Lease, protocol.MaxWant*2)
	f := newFetcher(s, s.w.cfg.Prefetch+1)
	ready := make(chan *task) // unbuffered: one started task waits at most
	errc := make(chan error, 3)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); defer close(s.readerDone); errc <- s.readLoop(ctx, leases) }()
	go func() { defer wg.Done(); errc <- f.run(ctx, leases) }()
	go func() { defer wg.Done(); errc <- s.startAhead(ctx, f, ready) }()
	defer func() {
		cancel()
		if parent.Err() != nil {
			s.goodbye()
		}
		s.conn.CloseNow() // ends the reader
		wg.Wait()
	}()

	if err := s.want(ctx, s.w.cfg.Prefetch); err != nil {
		return err
	}
	for {
		_, _, pauseChanged := s.w.paused()
		select {
		case err := <-errc:
			return err
		case <-parent.Done():
			return parent.Err()
		case <-pauseChanged:
			if !s.w.isPaused() {
				if err := s.resumed(ctx); err != nil {
					return err
				}
			}
		case t := <-ready:
			if s.w.isPaused() {
				err := s.handBack(ctx, t.lease)
				f.free <- t
				if err != nil {
					return err
				}
				continue
			}
			start := time.Now()
			err := s.computeAndSend(ctx, f, t)
			f.free <- t
			if err == nil {
				if rest := s.w.rest(time.Since(start)); rest > 0 {
					select {
					case <-parent.Done():
						return parent.Err()
					case <-time.After(rest):
					}
				}
			}
			if err != nil {
				if parent.Err() != nil {
					return parent.Err()
				}
				// The reader usually knows why (the close status); wait
				// for it briefly rather than report a bare write error.
				select {
				case rerr := <-errc:
					if websocket.CloseStatus(rerr) != -1 {
						return rerr
					}
				case <-time.After(time.Second):
				}
				return err
			}
		}
	}
}

// goodbye tells the coordinator this worker is stopping, so its leases go
// back to the queue at once, and closes the connection cleanly.
func (s *session) goodbye() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.send(ctx, &protocol.Bye{Reason: "worker stopping"}); err == nil {
		s.conn.Close(websocket.StatusNormalClosure, "worker stopping")
	}
}

func (s *session) computeAndSend(ctx context.Context, f *fetcher, t *task) error {
	var res *protocol.Result
	var err error
	if s.isRevoked(t.lease.JobID) {
		// Its job stopped handing out work: the lease is void there, and
		// the revoke asked for work elsewhere already.
		s.held.Add(-1)
		s.counts.Delete(t.lease.ID)
		return nil
	}
	jc, why := s.job(t.lease.JobID)
	if jc == nil {
		err = errors.New(why)
	} else if t.lease.Snapshot == protocol.SnapshotLatest {
		var refused bool
		if t.begun.done {
			refused, err = t.begun.refused, t.begun.err
		} else {
			refused, err = s.begin(ctx, f, t)
		}
		if refused {
			// The coordinator answered the start with a rejection: the
			// lease is over there, and the ack was counted by the reader.
			s.held.Add(-1)
			return s.want(ctx, 1)
		}
		if err != nil && (ctx.Err() != nil || isClosed(s.readerDone)) {
			return fmt.Errorf("lease %d: %w", t.lease.ID, err)
		}
	}
	if err == nil {
		rollout := t.lease.Rollout != nil
		s.w.update(func(st *Stats) { st.Generating = rollout })
		res, err = jc.compute(t)
	}
	s.held.Add(-1)
	if err != nil {
		s.counts.Delete(t.lease.ID) // no ack will come for it
		s.w.cfg.Logf("lease %d: %v; giving it back", t.lease.ID, err)
		if err := s.send(ctx, &protocol.Release{LeaseIDs: []uint64{t.lease.ID}, Reason: truncate(err.Error(), 1000), JobID: t.lease.JobID}); err != nil {
			return err
		}
	} else {
		s.w.update(func(st *Stats) { st.Computed += int64(res.Examples) })
		if err := jc.enc.pack(res, t.lease); err != nil {
			s.w.cfg.Logf("lease %d: %v; sending it as %s", t.lease.ID, err, protocol.CodecF32)
		}
		s.link.fill(res, t.snapMs, &s.linkOut)
		if name := s.w.cfg.Backend.Name(); *s.backendSent.Swap(&name) != name {
			res.Backend = name
		}
		if err := s.sendFor(ctx, res, res.LeaseID); err != nil {
			return err
		}
	}
	return s.want(ctx, 1)
}

// startTimeout bounds the wait for the coordinator's started.
const startTimeout = 30 * time.Second

// begin fixes the base of a lease with snapshot "latest": it sends start,
// waits for started, and fills t with that snapshot, downloading it only
// when it is not the one the fetcher holds. refused is true when the
// coordinator answered with a rejection instead (the lease expired, or its
// job stopped).
func (s *session) begin(ctx context.Context, f *fetcher, t *task) (refused bool, err error) {
	id := t.lease.ID
	answer := make(chan *protocol.Started, 1)
	s.starting.Store(id, answer)
	defer s.starting.Delete(id)
	if err := s.send(ctx, &protocol.Start{LeaseID: id, JobID: t.lease.JobID}); err != nil {
		return false, err
	}
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	var st *protocol.Started
	select {
	case st = <-answer:
	case <-ctx.Done():
		return false, ctx.Err()
	case <-s.readerDone:
		return false, errors.New("the connection closed while waiting for started")
	case <-timer.C:
		return false, fmt.Errorf("the coordinator did not answer start within %v", startTimeout)
	}
	if st == nil {
		return true, nil
	}
	before := f.snapNanos.Load()
	base, err := f.fillSnapshot(ctx, t, st.SnapshotURL, st.BaseVersion)
	if err != nil {
		return false, err
	}
	// Only a "latest" job's started leases download snapshots here, and
	// then the fetcher downloads none: the difference is this lease's.
	t.snapMs = ms(time.Duration(f.snapNanos.Load() - before))
	t.base = base
	return false, nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (s *session) readLoop(ctx context.Context, leases chan<- protocol.Lease) error {
	for {
		// Not ctx: cancelling a read drops the connection without a close
		// frame, and goodbye still needs it. work closes the connection to
		// end this loop.
		m, err := s.read(context.Background())
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *protocol.Lease:
			s.held.Add(1)
			s.w.update(func(st *Stats) { st.Idle = false })
			select {
			case leases <- *m:
			default:
				return errors.New("coordinator sent more leases than asked for")
			}
		case *protocol.Started:
			if ch, ok := s.starting.LoadAndDelete(m.LeaseID); ok {
				ch.(chan *protocol.Started) <- m
			} else {
				s.w.cfg.Logf("ignoring started for lease %d, which this worker is not starting", m.LeaseID)
			}
		case *protocol.Ack:
			s.link.acked(m.LeaseID, m.RecvMs, time.Now())
			if ch, ok := s.starting.LoadAndDelete(m.LeaseID); ok {
				ch.(chan *protocol.Started) <- nil // start refused
			}
			examples := s.examplesOf(m.LeaseID)
			s.w.update(func(st *Stats) {
				st.LastStaleness, st.Version = m.Staleness, m.Version
				if m.Accepted {
					st.Accepted++
					st.Examples += int64(examples)
				} else {
					st.Rejected++
					st.LastReason = m.Reason
					if st.Rejections == nil {
						st.Rejections = map[string]int64{}
					}
					st.Rejections[m.Reason]++
				}
			})
			if !m.Accepted {
				s.w.cfg.Logf("result for lease %d rejected: %q: %q", m.LeaseID, m.Reason, m.Detail)
			}
		case *protocol.Idle:
			s.w.update(func(st *Stats) { st.Idle = true })
			retry := time.Duration(m.RetryMs) * time.Millisecond
			time.AfterFunc(retry, func() {
				if ctx.Err() == nil && s.held.Load() == 0 {
					_ = s.want(ctx, s.w.cfg.Prefetch)
				}
			})
		case *protocol.Assign:
			jc := s.addJob(m.Job, m.Limits) // jobs.go
			s.w.cfg.Logf("computing for job %q (%q, %d parameters, updates in %q)", m.Job.ID, m.Job.Name, m.Job.NumParams, jc.codec())
		case *protocol.Revoke:
			// jobs.go: the job's queued leases are dropped where they
			// wait; ask for work elsewhere now.
			s.revoked.Store(m.JobID, true)
			s.w.cfg.Logf("job %q: %q; asking for other work", m.JobID, m.Reason)
			_ = s.want(ctx, s.w.cfg.Prefetch)
		case *protocol.Error:
			s.w.cfg.Logf("coordinator says: %q: %q", m.Code, m.Message)
		default:
			s.w.cfg.Logf("ignoring unexpected %s message", m.MessageType())
		}
	}
}

// examplesOf is the example count of an answered lease.
func (s *session) examplesOf(id uint64) int {
	v, ok := s.counts.LoadAndDelete(id)
	if !ok {
		return 0
	}
	return v.(int)
}
