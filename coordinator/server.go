package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// Config configures a Server. Train and Test are required.
type Config struct {
	Train, Test *dataset.Set
	// Logf receives progress and problems; nil means log.Printf.
	Logf func(format string, args ...any)
	// IdleRetry is how soon a worker with nothing to do asks again.
	IdleRetry time.Duration
	// HelloTimeout bounds how long a new connection may take to say hello.
	HelloTimeout time.Duration
	// WriteTimeout bounds every websocket write; a worker that cannot take
	// a message in time is disconnected, never waited on.
	WriteTimeout time.Duration
	// MaxLeases is how many leases one worker may hold at once.
	MaxLeases int
	// Store keeps jobs, checkpoints, metrics and workers; nil keeps
	// nothing (a coordinator that dies loses its jobs).
	Store *store.Store
	// CheckpointInterval is the longest time between checkpoints of a job
	// whose model has moved.
	CheckpointInterval time.Duration
	// KeepCheckpoints is how many checkpoints of each job are kept.
	KeepCheckpoints int
	// Verbose logs every checkpoint written.
	Verbose bool
	// AdminToken guards the admin API and page (see auth.go). Empty
	// disables them: every admin route answers 401.
	AdminToken string
	// Pages serves every path the coordinator does not (the contribute
	// page at / and its assets; see package web). Nil serves a plain index
	// that links the API.
	Pages http.Handler

	// HTTP access: who may reach what (access.go, docs/SECURITY.md).
	//
	// PublicURLs are the URLs volunteers and the operator reach the
	// coordinator by ("https://grid.example.org", "http://10.0.0.5:8080"):
	// requests naming another Host, and browser requests from another
	// Origin (scheme, host and port), are refused. Loopback names are
	// always allowed.
	PublicURLs []string
	// TrustedProxies are addresses or CIDRs whose X-Forwarded-For header
	// names the client; from anyone else it is ignored.
	TrustedProxies []string
	// AuthFailBurst failed token checks per client address, then one per
	// AuthFailEvery; while an address is over, even the right token from
	// it is refused (a signed-in session still works).
	AuthFailBurst int
	AuthFailEvery time.Duration
	// ClientTableSize bounds each per-address table; the least recently
	// seen address is forgotten first.
	ClientTableSize int
	// AnonBulkRate (bytes/s) and AnonBulkBurst (bytes) are what an address
	// holding no lease may download of snapshots, shards and the pages'
	// assets. A worker's own leases' snapshots and shards are free.
	AnonBulkRate, AnonBulkBurst int64
	// MinReadRate (bytes/s) is the slowest a client may read a snapshot,
	// shard, download or page asset once MinReadGrace has passed; a slower
	// one is disconnected.
	MinReadRate  int64
	MinReadGrace time.Duration
	// MetricsToken, when set, must come as "Authorization: Bearer TOKEN"
	// to read /metrics.
	MetricsToken string
	// MetricsPageMax is the most rows one /api/v1/jobs/{id}/metrics
	// response holds.
	MetricsPageMax int
	// ReadBodyTimeout bounds how long a client may take to send a
	// request's body (the header timeout is the HTTP server's).
	ReadBodyTimeout time.Duration

	// Durability (see durability.go and docs/SECURITY.md).
	// CheckpointRetryMin and CheckpointRetryMax bound the backoff between
	// attempts to write a checkpoint that failed (disk full, file system
	// read-only): the wait doubles from Min up to Max.
	CheckpointRetryMin, CheckpointRetryMax time.Duration
	// StoreShutdownTimeout bounds how long Close waits for the store: the
	// final checkpoints (retried until then if they fail) and the last
	// worker records. A frozen file system cannot hang shutdown past it.
	StoreShutdownTimeout time.Duration
	// MaxWorkerRecords is how many worker records the store keeps (the
	// most recently seen); WorkerRecordMaxAge drops records not seen for
	// that long (0 keeps any age).
	MaxWorkerRecords   int
	WorkerRecordMaxAge time.Duration
	// WorkerRecordQueue bounds the worker records waiting to be written;
	// past it, a record is dropped (and counted), never waited for.
	WorkerRecordQueue int

	// Wire: what one websocket connection may send, hold and owe
	// (docs/SECURITY.md, section Wire).
	//
	// MaxControlBytes is the size limit of every message but a result
	// (hello, want, release, bye); only results get the job's limit of
	// one full update plus 64 KiB.
	MaxControlBytes int64
	// FrameBounds limit every received frame's nesting and element count
	// (protocol.CheckFrame); zero fields take protocol.DefaultBounds'.
	FrameBounds protocol.Bounds
	// DecodeBuffers is how many frame and update buffers are kept between
	// messages, shared by every connection. More are allocated while that
	// many are in use and dropped afterwards, so what an idle connection
	// holds does not depend on what it sent.
	DecodeBuffers int
	// PingInterval is how often each connection is pinged; a connection
	// that leaves MaxMissedPings pings in a row unanswered (no pong
	// within PingInterval each) is closed. Negative disables pings.
	PingInterval   time.Duration
	MaxMissedPings int
	// NonFiniteEvalInterval is the least time between the evaluations
	// that runs of non-finite results start (each scores the test set).
	NonFiniteEvalInterval time.Duration
	// MaxHTTPConnsPerAddress is how many HTTP connections one peer
	// address (an IPv6 /64) may hold open at once, served by an
	// http.Server whose ConnState is Server.ConnState; more are closed
	// as they arrive. A trusted proxy's connections are not counted.
	MaxHTTPConnsPerAddress int
	// MaxConnsPerAddress is how many websocket connections one client
	// address (an IPv6 /64) may hold open at once, from the upgrade on,
	// hello or not; more are refused with 429 before the upgrade.
	MaxConnsPerAddress int
}

// Wire defaults (docs/SECURITY.md, section Wire).
const (
	DefaultMaxControlBytes       = 64 << 10
	DefaultDecodeBuffers         = 8
	DefaultPingInterval          = 30 * time.Second
	DefaultMaxMissedPings        = 3
	DefaultNonFiniteEvalInterval = 30 * time.Second
	DefaultMaxConnsPerAddress    = 32
)

// DefaultMaxHTTPConnsPerAddress is the default of
// Config.MaxHTTPConnsPerAddress (docs/SECURITY.md, section HTTP access).
const DefaultMaxHTTPConnsPerAddress = 64

func (c *Config) setDefaults() {
	if c.Logf == nil {
		c.Logf = log.Printf
	}
	if c.IdleRetry <= 0 {
		c.IdleRetry = 100 * time.Millisecond
	}
	if c.HelloTimeout <= 0 {
		c.HelloTimeout = 10 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.MaxLeases <= 0 {
		c.MaxLeases = 2
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = 10 * time.Second
	}
	if c.KeepCheckpoints <= 0 {
		c.KeepCheckpoints = 5
	}
	c.setAccessDefaults()
	c.setDurabilityDefaults()
	if c.MaxControlBytes <= 0 {
		c.MaxControlBytes = DefaultMaxControlBytes
	}
	if c.DecodeBuffers <= 0 {
		c.DecodeBuffers = DefaultDecodeBuffers
	}
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.MaxMissedPings <= 0 {
		c.MaxMissedPings = DefaultMaxMissedPings
	}
	if c.NonFiniteEvalInterval <= 0 {
		c.NonFiniteEvalInterval = DefaultNonFiniteEvalInterval
	}
	if c.MaxConnsPerAddress <= 0 {
		c.MaxConnsPerAddress = DefaultMaxConnsPerAddress
	}
	if c.MaxHTTPConnsPerAddress <= 0 {
		c.MaxHTTPConnsPerAddress = DefaultMaxHTTPConnsPerAddress
	}
}

// Server is the coordinator: it owns the jobs, accepts worker connections
// at /ws and serves the JSON API, snapshots and shards.
//
// All methods may be called concurrently. Close stops every goroutine the
// server started and waits for them.
type Server struct {
	cfg    Config
	router *mux.Router
	ctx    context.Context // ends the connections
	cancel context.CancelFunc
	// Job loops outlive the connections by a final checkpoint.
	loopCtx   context.Context
	stopLoops context.CancelFunc
	bootID    uint32 // keeps worker ids unique across restarts

	leaseIDs atomic.Uint64
	workerN  atomic.Uint64

	mu      sync.Mutex
	closed  bool // set by Close before it waits; guards conns.Add
	jobs    []*Job
	workers map[string]*workerConn
	// connsFrom counts open websocket connections per client key; an
	// entry goes when its count reaches zero.
	connsFrom map[string]int
	// httpConns maps each HTTP connection counted in httpConnsFrom (per
	// peer key) to its key; guarded by mu.
	httpConns     map[net.Conn]string
	httpConnsFrom map[string]int

	auth    *auth
	proxies trustedProxies
	hosts   *hostPolicy
	bulk    *rateLimiter // anonymous downloads, bytes per client address
	handler http.Handler // router behind the Host/Origin check
	events  hub
	metrics *promMetrics

	decodeBufs *decodePool // frame and update buffers shared by connections

	loops   sync.WaitGroup // job loops
	writers sync.WaitGroup // job checkpoint writers
	conns   sync.WaitGroup // websocket connections
	once    sync.Once

	// storeDeadline is set by Close before it closes the writers' queues:
	// until then they retry failed checkpoints.
	storeDeadline time.Time
	writerErrs    []error // guarded by mu
	closeErr      error
	workerRecords *workerRecorder
}

// New returns a running server with no jobs.
func New(cfg Config) (*Server, error) {
	if cfg.Train == nil || cfg.Test == nil {
		return nil, errors.New("coordinator: Config.Train and Config.Test are required")
	}
	cfg.setDefaults()
	proxies, err := parseTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	hosts, err := newHostPolicy(cfg.PublicURLs, proxies)
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	fails := newRateLimiter(1/cfg.AuthFailEvery.Seconds(), float64(cfg.AuthFailBurst), cfg.ClientTableSize)
	s := &Server{
		cfg: cfg, workers: map[string]*workerConn{}, connsFrom: map[string]int{}, httpConns: map[net.Conn]string{}, httpConnsFrom: map[string]int{},
		bootID: rand.Uint32() & 0xffff,
		auth:   newAuth(cfg.AdminToken, fails), proxies: proxies, hosts: hosts,
		bulk: newRateLimiter(float64(cfg.AnonBulkRate), float64(cfg.AnonBulkBurst), cfg.ClientTableSize),
	}
	s.decodeBufs = newDecodePool(cfg.DecodeBuffers)
	s.metrics = newPromMetrics(s)
	if cfg.Store != nil {
		s.workerRecords = newWorkerRecorder(cfg.Store, cfg.MaxWorkerRecords, cfg.WorkerRecordMaxAge, cfg.WorkerRecordQueue, cfg.Logf)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.loopCtx, s.stopLoops = context.WithCancel(context.Background())
	s.routes()
	return s, nil
}

// AddJob validates spec, builds its model at version 0 and starts training.
// With a store, the job and its version-0 checkpoint are saved first.
func (s *Server) AddJob(spec JobSpec) (*Job, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	// A random suffix keeps ids unique across coordinators and databases.
	id := fmt.Sprintf("%s-%08x", idSafe(spec.Name), rand.Uint32())
	j, err := newJob(id, spec, s.cfg.Train, s.cfg.Test, &s.leaseIDs, s.cfg.Logf)
	if err != nil {
		return nil, err
	}
	if st := s.cfg.Store; st != nil {
		specJSON, err := json.Marshal(spec)
		if err != nil {
			return nil, err
		}
		rec := store.JobRecord{ID: id, Name: spec.Name, Spec: specJSON, State: StateRunning, CreatedAt: j.st.startedAt, Incarnation: 1}
		if err := st.CreateJob(context.Background(), rec); err != nil {
			return nil, fmt.Errorf("saving job %s: %w", id, err)
		}
	}
	s.startJob(j)
	s.cfg.Logf("job %s (%q): %d parameters, %d shards of %d, batch %d, local_steps %d, max_staleness %d, target accuracy %.3f",
		id, spec.Name, j.model.NumParams, len(j.shards), spec.ShardSize, spec.BatchSize, spec.LocalSteps, spec.MaxStaleness, spec.TargetAccuracy)
	return j, nil
}

// startJob registers j and starts its loop and, with a store, its writer
// (after a first checkpoint, so the job can be resumed from the start).
func (s *Server) startJob(j *Job) {
	j.onMetric = func(m store.Metric) { s.events.publish(MetricEvent{Job: j.ID, Metric: m}) }
	j.onCheckpoint = func(d time.Duration) { s.metrics.checkpointSeconds.Observe(d.Seconds()) }
	j.nonFiniteEvalEvery = s.cfg.NonFiniteEvalInterval
	if s.cfg.Store != nil {
		j.store, j.verbose = s.cfg.Store, s.cfg.Verbose
		j.saveCheckpoint = s.cfg.Store.SaveCheckpointState
		j.ckptCh = make(chan *checkpointOp, 1)
		j.ckptPool = make(chan *ckptBuffers, 2)
		j.metricCh = make(chan store.Metric, 64)
		if j.st.ckptVersion == 0 && j.st.model.Version == 0 {
			j.checkpoint(true)
		}
		s.writers.Add(1)
		go func() {
			defer s.writers.Done()
			policy := backoff{Min: s.cfg.CheckpointRetryMin, Max: s.cfg.CheckpointRetryMax}
			if err := j.writeLoop(s.cfg.KeepCheckpoints, policy, func() time.Time { return s.storeDeadline }); err != nil {
				s.mu.Lock()
				s.writerErrs = append(s.writerErrs, err)
				s.mu.Unlock()
			}
		}()
	}
	s.mu.Lock()
	s.jobs = append(s.jobs, j)
	s.mu.Unlock()
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		j.loop(s.loopCtx, s.cfg.CheckpointInterval)
	}()
}

// ResumeJobs loads every job of the store: unfinished ones continue from
// their latest checkpoint, finished ones are served as they ended. It
// returns the unfinished jobs.
func (s *Server) ResumeJobs(ctx context.Context) ([]*Job, error) {
	st := s.cfg.Store
	if st == nil {
		return nil, nil
	}
	recs, err := st.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	var resumed []*Job
	for _, rec := range recs {
		var spec JobSpec
		if err := json.Unmarshal(rec.Spec, &spec); err != nil {
			return nil, fmt.Errorf("job %s in %s: spec: %w", rec.ID, st.Path(), err)
		}
		j, err := newJob(rec.ID, spec, s.cfg.Train, s.cfg.Test, &s.leaseIDs, s.cfg.Logf)
		if err != nil {
			return nil, fmt.Errorf("job %s in %s: %w", rec.ID, st.Path(), err)
		}
		j.st.state, j.st.reason, j.st.doneAt, j.st.startedAt = rec.State, rec.Reason, rec.DoneAt, rec.CreatedAt
		c, err := st.LatestCheckpoint(ctx, rec.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("job %s: %w", rec.ID, err)
		default:
			if err := j.restore(c); err != nil {
				return nil, fmt.Errorf("job %s in %s: %w", rec.ID, st.Path(), err)
			}
		}
		j.health.markDurable(j.st.model.Version, rec.State) // read back from the store
		if j.st.state == StateRunning || j.st.state == StatePaused {
			if j.run, err = st.NextIncarnation(ctx, rec.ID); err != nil {
				return nil, err
			}
			resumed = append(resumed, j)
			s.cfg.Logf("job %s (%q): resumed at version %d, epoch %d (run %d)", j.ID, spec.Name, j.st.model.Version, j.st.epoch, j.run)
		} else {
			j.run = rec.Incarnation
			j.st.sched.SetQueue(nil)
		}
		s.startJob(j)
		if j.st.finalEvalAfter && j.st.state == StateRunning {
			_ = j.exec(ctx, func(*jobState) { j.startEval(true) })
		}
	}
	return resumed, nil
}

// Handler returns the HTTP handler: API, snapshots, shards and /ws.
func (s *Server) Handler() http.Handler { return s.handler }

// Close tells every worker the coordinator is going away, writes a final
// checkpoint of every job, stops the job loops and waits for all of it,
// but for the store no longer than Config.StoreShutdownTimeout. The error
// says what could not be made durable (a checkpoint the disk had no room
// for, a store that did not answer); the next start resumes each job from
// its last durable checkpoint. It is safe to call more than once.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel()
		s.conns.Wait()
		s.mu.Lock()
		jobs := slices.Clone(s.jobs)
		s.mu.Unlock()
		for _, j := range jobs {
			_ = j.exec(context.Background(), func(st *jobState) {
				if j.dirty() {
					j.checkpoint(true)
				}
			})
		}
		s.stopLoops()
		s.loops.Wait()
		// Failed final checkpoints are retried through the first half of
		// the store's time; waitForStore stops waiting at the end of it.
		start := time.Now()
		s.storeDeadline = start.Add(s.cfg.StoreShutdownTimeout / 2)
		for _, j := range jobs {
			if j.ckptCh != nil {
				close(j.ckptCh)
			}
		}
		s.closeErr = s.waitForStore(start)
		for _, j := range jobs {
			j.evals.Wait()
		}
	})
	return s.closeErr
}

// currentJob is the job new workers join: the newest running one, else
// the newest.
func (s *Server) currentJob() *Job {
	s.mu.Lock()
	jobs := slices.Clone(s.jobs)
	s.mu.Unlock()
	for i := len(jobs) - 1; i >= 0; i-- {
		var running bool
		if jobs[i].exec(s.ctx, func(st *jobState) { running = st.state == StateRunning }) == nil && running {
			return jobs[i]
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	return jobs[len(jobs)-1]
}

// idSafe keeps the URL-safe characters of a job name.
func idSafe(name string) string {
	b := make([]byte, 0, len(name))
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			b = append(b, c)
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		}
	}
	if len(b) == 0 || len(b) > 40 {
		return "job"
	}
	return string(b)
}

func (s *Server) job(id string) *Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.jobs {
		if j.ID == id {
			return j
		}
	}
	return nil
}

// JobViews returns every job as the API shows it.
func (s *Server) JobViews(ctx context.Context) ([]JobView, error) {
	s.mu.Lock()
	jobs := slices.Clone(s.jobs)
	s.mu.Unlock()
	out := make([]JobView, 0, len(jobs))
	for _, j := range jobs {
		v, err := s.jobView(ctx, j)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (s *Server) jobView(ctx context.Context, j *Job) (JobView, error) {
	var v JobView
	err := j.exec(ctx, func(st *jobState) { v = j.view(st) })
	v.Workers = s.countWorkers(j.ID)
	return v, err
}

// JobView returns one job, or false if there is none with that id.
func (s *Server) JobView(ctx context.Context, id string) (JobView, bool, error) {
	j := s.job(id)
	if j == nil {
		return JobView{}, false, nil
	}
	v, err := s.jobView(ctx, j)
	return v, true, err
}

func (s *Server) countWorkers(jobID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.workers {
		if w.job.ID == jobID {
			n++
		}
	}
	return n
}

// WorkerViews returns the connected workers, oldest first.
func (s *Server) WorkerViews() []WorkerView {
	s.mu.Lock()
	out := make([]WorkerView, 0, len(s.workers))
	for _, w := range s.workers {
		out = append(out, w.view())
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b WorkerView) int { return a.ConnectedAt.Compare(b.ConnectedAt) })
	return out
}

func (s *Server) routes() {
	r := mux.NewRouter()
	r.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	}).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/ws", s.serveWorker)
	api := r.PathPrefix("/api/v1").Subrouter()
	api.HandleFunc("/jobs", s.handleJobs).Methods(http.MethodGet)
	api.HandleFunc("/jobs/{id}", s.handleJob).Methods(http.MethodGet)
	api.HandleFunc("/jobs/{id}/snapshots/{run:[0-9]+}/{version:[0-9]+}", s.handleSnapshot).Methods(http.MethodGet, http.MethodHead)
	api.HandleFunc("/jobs/{id}/metrics", s.handleMetrics).Methods(http.MethodGet)
	api.HandleFunc("/jobs/{id}/shards/{shard:[0-9]+}", s.handleShard).Methods(http.MethodGet, http.MethodHead)
	s.adminRoutes(r, api)
	r.Handle("/metrics", s.guardMetrics(s.metrics.handler())).Methods(http.MethodGet)
	api.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API endpoint %s; see docs/API.md", r.URL.Path)
	})
	if s.cfg.Pages != nil {
		r.PathPrefix("/").Handler(s.budgetPages(s.cfg.Pages))
	} else {
		r.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, `<!doctype html><title>crowdtrain</title><h1>crowdtrain coordinator</h1>
<p>Jobs: <a href="/api/v1/jobs">/api/v1/jobs</a> · Workers: <a href="/api/v1/workers">/api/v1/workers</a></p>
<p>Join with a native worker: <code>crowdtrain work --coordinator ws://HOST/ws</code></p>`)
		}).Methods(http.MethodGet)
	}
	s.router = r
	s.handler = s.checkAccess(r)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, args...)})
}

func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	views, err := s.JobViews(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "jobs unavailable: %v", err)
		return
	}
	writeJSON(w, views)
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	v, ok, err := s.JobView(r.Context(), id)
	switch {
	case !ok:
		writeError(w, http.StatusNotFound, "no job %q; GET /api/v1/jobs lists them", id)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "job %s unavailable: %v", id, err)
	default:
		writeJSON(w, v)
	}
}

func (s *Server) handleWorkers(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.workerViews(r.Context()))
}

// workerViews is WorkerViews with each worker's held leases.
func (s *Server) workerViews(ctx context.Context) []WorkerView {
	views := s.WorkerViews()
	held := map[string][]uint64{}
	s.mu.Lock()
	jobs := slices.Clone(s.jobs)
	s.mu.Unlock()
	for _, j := range jobs {
		_ = j.exec(ctx, func(st *jobState) {
			for id, l := range st.sched.Leases() {
				held[l.Worker] = append(held[l.Worker], id)
			}
		})
	}
	for i := range views {
		if ids := held[views[i].ID]; ids != nil {
			slices.Sort(ids)
			views[i].Leases = ids
		}
	}
	return views
}

// serveImmutable serves bytes that never change under this URL, so any
// cache between here and the volunteers may keep them. Unless free, the
// body is charged to the client's anonymous budget.
func (s *Server) serveImmutable(w http.ResponseWriter, r *http.Request, etag string, body []byte, free bool) {
	h := w.Header()
	if r.Header.Get("If-None-Match") == etag {
		h.Set("ETag", etag)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if r.Method != http.MethodHead && !free && !s.chargeBulk(w, r, len(body)) {
		return
	}
	h.Set("ETag", etag)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	if err := s.writePaced(w, body); err != nil {
		s.cfg.Logf("%s %q from %s: %v", r.Method, r.URL.Path, r.RemoteAddr, err)
	}
}

func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	j := s.job(vars["id"])
	if j == nil {
		writeError(w, http.StatusNotFound, "no job %q", vars["id"])
		return
	}
	version, err := strconv.ParseInt(vars["version"], 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad version %q", vars["version"])
		return
	}
	var body []byte
	if vars["run"] == strconv.FormatInt(j.run, 10) {
		body = j.snapshotBody(version)
	}
	if body == nil {
		// Either never published or already too old for any acceptable
		// result: the worker should give the lease back and ask again.
		writeError(w, http.StatusGone, "snapshot %d of job %s is not available (too old or never published); release the lease and ask for a new one", version, j.ID)
		return
	}
	free := s.leaseHeldFrom(r.Context(), r, j, func(l *engine.Lease) bool { return l.Base == version })
	s.serveImmutable(w, r, fmt.Sprintf(`"%s-r%d-v%d"`, j.ID, j.run, version), body, free)
}

func (s *Server) handleShard(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	j := s.job(vars["id"])
	if j == nil {
		writeError(w, http.StatusNotFound, "no job %q", vars["id"])
		return
	}
	shard, err := strconv.Atoi(vars["shard"])
	if err != nil || shard < 0 || shard >= len(j.shardBody) {
		writeError(w, http.StatusNotFound, "job %s has shards 0..%d, not %q", j.ID, len(j.shardBody)-1, vars["shard"])
		return
	}
	free := s.leaseHeldFrom(r.Context(), r, j, func(l *engine.Lease) bool { return l.Task.Shard == shard })
	s.serveImmutable(w, r, fmt.Sprintf(`"%s-s%d-%d"`, j.ID, j.Spec.ShardSize, shard), j.shardBody[shard], free)
}

func (s *Server) handleCheckpoints(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if s.job(id) == nil {
		writeError(w, http.StatusNotFound, "no job %q", id)
		return
	}
	out := []store.CheckpointInfo{}
	if s.cfg.Store != nil {
		cs, err := s.cfg.Store.Checkpoints(r.Context(), id)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "reading checkpoints: %v", err)
			return
		}
		out = append(out, cs...)
	}
	writeJSON(w, out)
}
