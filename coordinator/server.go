package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"

	"github.com/crowdtrain/crowdtrain/engine/placement"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/store"
)

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
	// snapPool bounds every job's snapshot cache together (snapcache.go).
	snapPool snapPool
	// refusedHellos keeps an address whose hellos are refused over and
	// over from repeating the WARN line (logging.go).
	refusedHellos warnLimiter

	mu      sync.Mutex
	closed  bool // set by Close before it waits; guards conns.Add
	jobs    []*Job
	sweeps  []*Sweep // sweep.go
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
	data          *dataSets
	shardSets     shardSets // shardsets.go: encoded shards shared by jobs
	// route.go: the compute each job got lately, which ranks the jobs.
	poolMu     sync.Mutex
	pool       placement.Pool
	volunteers *volunteerBook
	// Per-address rates (limits.go) and the volunteers dropped for a
	// while (hostages.go).
	hellos, resultRate *rateLimiter
	coolOff            coolOffs

	// gate is set on a root that serves relays (relaygate.go); relay on
	// a relay (relayserver.go).
	gate  atomic.Pointer[relayGate]
	relay *relayRuntime
}

// New returns a running server with no jobs.
func New(cfg Config) (*Server, error) {
	if (cfg.Train == nil || cfg.Test == nil) && cfg.LoadData == nil {
		return nil, errors.New("coordinator: Config.Train and Config.Test, or Config.LoadData, are required")
	}
	cfg.setDefaults()
	if cfg.Join != JoinOpen && cfg.Join != JoinToken {
		return nil, fmt.Errorf("coordinator: join mode %q: want %q (anyone may volunteer) or %q (only with a join token)", cfg.Join, JoinOpen, JoinToken)
	}
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
	s.data = newDataSets(cfg.Train, cfg.Test, cfg.LoadData, cfg.DataLoadTimeout)
	s.snapPool.limit = cfg.SnapshotCacheBytes
	s.volunteers = newVolunteerBook()
	s.volunteers.onBan = s.closeVolunteer
	if cfg.Store != nil {
		if err := s.volunteers.load(context.Background(), cfg.Store, cfg.Logger); err != nil {
			return nil, fmt.Errorf("coordinator: loading the volunteer ledger: %w", err)
		}
	}
	s.hellos = newRateLimiter(cfg.HelloRate, float64(cfg.HelloBurst), cfg.ClientTableSize)
	s.resultRate = newRateLimiter(float64(cfg.ResultBytesRate), float64(cfg.ResultBytesBurst), cfg.ClientTableSize)
	s.coolOff.max = cfg.ClientTableSize
	s.decodeBufs = newDecodePool(cfg.DecodeBuffers)
	s.metrics = newPromMetrics(s)
	if cfg.Store != nil {
		s.workerRecords = newWorkerRecorder(cfg.Store, cfg.MaxWorkerRecords, cfg.WorkerRecordMaxAge, cfg.WorkerRecordQueue, cfg.Logger)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.loopCtx, s.stopLoops = context.WithCancel(context.Background())
	s.routes()
	return s, nil
}

// AddJob validates spec, builds its model at version 0 and starts training.
// With a store, the job and its version-0 checkpoint are saved first.
func (s *Server) AddJob(spec jobspec.Spec) (*Job, error) {
	if spec.Sweep != nil {
		return nil, jobspec.Errorf("sweep", "a sweep's spec starts trials, not one job: submit it to POST /api/v1/jobs (Server.AddSweep)")
	}
	return s.addJob(spec, "")
}

// addJob is AddJob for a job that is a trial of sweep parent ("" none).
func (s *Server) addJob(spec jobspec.Spec, parent string) (*Job, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := refuseRL(spec); err != nil {
		return nil, err
	}
	// A random suffix keeps ids unique across coordinators and databases.
	id := fmt.Sprintf("%s-%08x", idSafe(spec.Name), rand.Uint32())
	// The tokenizer is read or trained once, here, and stored with the
	// spec below.
	if err := PrepareTokenizer(&spec); err != nil {
		return nil, err
	}
	// An RL job's policy is read and checked first: the parameters it
	// improves are what it is about.
	var initial []float32
	if spec.Kind == jobspec.KindRL {
		var err error
		if initial, err = s.rlPolicy(&spec); err != nil { // rljob.go
			return nil, err
		}
		if err := pinTaskFile(&spec); err != nil {
			return nil, err
		}
	}
	train, test, err := s.data.get(spec)
	if err != nil {
		return nil, rlDataError(spec, err)
	}
	if err := CheckData(&spec, train); err != nil {
		return nil, err
	}
	if err := s.checkModelSize(spec); err != nil {
		return nil, err
	}
	// Parameters from `init` are read and checked now, before anything
	// is stored, and where they came from is recorded in the spec.
	if spec.Init != nil {
		model, err := nn.NewModel(spec.Model)
		if err != nil {
			return nil, &jobspec.Error{Key: "model", Problem: err.Error()}
		}
		if initial, err = s.initParams(context.Background(), &spec, model); err != nil {
			return nil, err
		}
	}
	j, err := newJob(id, spec, train, test, &s.leaseIDs, s.cfg.Logger, &s.shardSets)
	if err != nil {
		return nil, err
	}
	if initial != nil {
		copy(j.st.model.Params, initial)
	}
	j.setReference(j.st.model.Params) // an RL job's KL reference (rlreference.go)
	if parent != "" {
		j.parent = parent
		j.place.Store(j.placeInfo(spec))
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
	j.log.Info(fmt.Sprintf("job %s (%q): %d parameters, %s, %d shards of %d, batch %d, local_steps %d, max_staleness %d, target accuracy %.3f",
		id, spec.Name, j.model.NumParams, describeStart(spec), len(j.shards), spec.ShardSize, spec.BatchSize, spec.LocalSteps, spec.MaxStaleness, spec.TargetAccuracy),
		"name", spec.Name)
	if spec.Init != nil || spec.Policy != nil {
		// A job that starts from a trained model is scored before it
		// trains, so its curve starts where its source's ended (an RL
		// job's at its policy's solved share).
		_ = j.exec(context.Background(), func(*jobState) { j.startEval(false) })
	}
	return j, nil
}

// startJob registers j and starts its loop and, with a store, its writer
// (after a first checkpoint, so the job can be resumed from the start).
func (s *Server) startJob(j *Job) {
	j.onMetric = func(m store.Metric) { s.events.publish(MetricEvent{Job: j.ID, Metric: m}) }
	j.onCheckpoint = func(d time.Duration) { s.metrics.checkpointSeconds.Observe(d.Seconds()) }
	j.nonFiniteEvalEvery = s.cfg.NonFiniteEvalInterval
	j.ledger = s.volunteers
	if j.mirror != nil {
		j.ledger = strikeTap{s.volunteers, j.mirror}
	}
	j.onVersion = func(v int64) {
		if g := s.gate.Load(); g != nil {
			g.announce(j.ID, v)
		}
	}
	j.limits = s.jobLimits()
	j.snaps.pool = &s.snapPool
	j.onState = func(state string) {
		if state != StateRunning {
			go s.handOff(j, state) // route.go; never on the job's loop
		}
	}
	j.active.Store(j.st.state == StateRunning)
	if s.cfg.Store != nil {
		j.store, j.verbose = s.cfg.Store, s.cfg.Verbose
		j.credits = s.volunteers
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
	sweeps := map[string]sweepRecord{}
	var sweepOrder []string
	loaded := map[string]*Job{}
	for _, rec := range recs {
		var probe struct {
			SweepRecord int `json:"sweep_record"`
		}
		if json.Unmarshal(rec.Spec, &probe) == nil && probe.SweepRecord != 0 {
			var sr sweepRecord
			if err := json.Unmarshal(rec.Spec, &sr); err != nil {
				return nil, fmt.Errorf("sweep %s in %s: %w", rec.ID, st.Path(), err)
			}
			sweeps[rec.ID] = sr
			sweepOrder = append(sweepOrder, rec.ID)
			continue
		}
		var spec jobspec.Spec
		if err := json.Unmarshal(rec.Spec, &spec); err != nil {
			return nil, fmt.Errorf("job %s in %s: spec: %w", rec.ID, st.Path(), err)
		}
		train, test, err := s.data.get(spec)
		if err != nil {
			return nil, fmt.Errorf("job %s in %s: %w", rec.ID, st.Path(), err)
		}
		j, err := newJob(rec.ID, spec, train, test, &s.leaseIDs, s.cfg.Logger, &s.shardSets)
		if err != nil {
			return nil, fmt.Errorf("job %s in %s: %w", rec.ID, st.Path(), err)
		}
		j.st.state, j.st.reason, j.st.doneAt, j.st.startedAt = rec.State, rec.Reason, rec.DoneAt, rec.CreatedAt
		c, err := st.LatestCheckpoint(ctx, rec.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// Stopped before its version 0 was saved: a job started
			// from init reads its parameters again.
			if err := s.reinit(ctx, j); err != nil {
				return nil, fmt.Errorf("job %s in %s: %w", rec.ID, st.Path(), err)
			}
		case err != nil:
			return nil, fmt.Errorf("job %s: %w", rec.ID, err)
		default:
			if err := j.restore(c); err != nil {
				return nil, fmt.Errorf("job %s in %s: %w", rec.ID, st.Path(), err)
			}
		}
		if err := s.resumeReference(ctx, j, st, err == nil); err != nil { // rlreference.go
			return nil, fmt.Errorf("job %s in %s: %w", rec.ID, st.Path(), err)
		}
		j.health.markDurable(j.st.model.Version, rec.State) // read back from the store
		if j.st.state == StateRunning || j.st.state == StatePaused {
			if j.run, err = st.NextIncarnation(ctx, rec.ID); err != nil {
				return nil, err
			}
			resumed = append(resumed, j)
			j.log.Info(fmt.Sprintf("job %s (%q): resumed at version %d, epoch %d (run %d)", j.ID, spec.Name, j.st.model.Version, j.st.epoch, j.run),
				"name", spec.Name, "version", j.st.model.Version)
		} else {
			j.run = rec.Incarnation
			j.st.sched.SetQueue(nil)
		}
		s.startJob(j)
		loaded[j.ID] = j
		if j.st.finalEvalAfter && j.st.state == StateRunning {
			_ = j.exec(ctx, func(*jobState) { j.startEval(true) })
		}
	}
	for _, id := range sweepOrder {
		s.resumeSweep(id, sweeps[id], loaded) // sweep.go
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
		if g := s.gate.Load(); g != nil {
			g.stop()
		}
		s.cancel()
		if s.relay != nil {
			s.relay.stop()
		}
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
	v.Workers, v.WorkerUtilisation = s.countWorkers(j.ID), s.meanUtilisation(j.ID)
	v.Warning = s.placementWarning(j)
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
		if j := w.cur.Load(); j != nil && j.ID == jobID {
			n++
		}
	}
	return n
}

// meanUtilisation is the mean utilisation of the workers computing for
// the job that have one yet.
func (s *Server) meanUtilisation(jobID string) float64 {
	s.mu.Lock()
	ws := make([]*workerConn, 0, len(s.workers))
	for _, w := range s.workers {
		if j := w.cur.Load(); j != nil && j.ID == jobID {
			ws = append(ws, w)
		}
	}
	s.mu.Unlock()
	sum, n := 0.0, 0
	for _, w := range ws {
		w.wire.mu.Lock()
		u, ok := w.wire.util.share()
		w.wire.mu.Unlock()
		if ok {
			sum += u
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
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
