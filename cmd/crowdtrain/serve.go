//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/store"
	"github.com/crowdtrain/crowdtrain/tokenizer"
	"github.com/crowdtrain/crowdtrain/web"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// serveOptions are serve's settings, as its flags set them.
type serveOptions struct {
	addr, jobArg, join, dataDir, dataRoot, dbPath, adminToken, webDist, downloads                  string
	localWorkers, threads, keepCkpts, maxWorkerRecords, decodeBuffers, pingMisses, maxConnsPerAddr int
	maxParams, maxControlBytes                                                                     int64
	dataLoadTimeout, progressEvery, ckptInterval, ckptRetryMin, ckptRetryMax, storeShutdown        time.Duration
	workerRecordAge, pingInterval, nonFiniteEval                                                   time.Duration
	verbose                                                                                        bool
	access                                                                                         accessFlags // serveaccess.go: names, proxies, HTTP limits
	abuse                                                                                          abuseFlags  // serveabuse.go: per-address and hostage limits
	relays                                                                                         relayFlags  // relaycmd.go: NATS for relays
	tls                                                                                            tlsFlags    // servetls.go: HTTPS and WSS
	memory                                                                                         memoryFlags // servememory.go: the snapshot cache
	log                                                                                            *logFlags   // logflags.go: --log-format, --log-level
}

// newServeFlags builds serve's flag set, grouped for its help; parsing it
// starts nothing.
func newServeFlags() (*cliFlags, *serveOptions) {
	o := &serveOptions{}
	fs := newCLIFlags("serve", "serve [flags]   (every flag also as CROWDTRAIN_<FLAG> or in --config FILE)")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "`HOST:PORT` to listen on")
	fs.StringVar(&o.jobArg, "job", "mnist-mlp", "a built-in job `NAME` ("+strings.Join(jobspec.PresetNames(), ", ")+") or a YAML/JSON spec FILE")
	fs.IntVar(&o.localWorkers, "local-workers", 0, "native workers to run inside this process")
	fs.StringVar(&o.join, "join", coordinator.JoinOpen, "who may volunteer, `MODE`: open (anyone) or token (only with a join token issued on the admin page or POST /api/v1/tokens)")
	fs.IntVar(&o.threads, "threads", 1, "threads per local worker")
	fs.StringVar(&o.dataDir, "data", "", "`PATH` of the job's data: for a text job (charlm) a UTF-8 text FILE or a DIR of them (default: the King James text `bible` prints; "+
		"for a job on go-source or a text tree with a glob, the DIR the glob reads); "+
		"for `dataset: mnist` the DIR holding the MNIST IDX files (default: search, see README); fashion-mnist is always read from "+dataset.FashionMNISTDir+
		" ($"+dataset.EnvData+" is one of the places the MNIST search looks, not a setting of --data)")
	fs.StringVar(&o.dataRoot, "data-root", ".", "`DIR` whose files job specs submitted over the API may name (their relative paths are relative to it)")
	fs.DurationVar(&o.dataLoadTimeout, "data-load-timeout", coordinator.DefaultDataLoadTimeout, "longest a submitted job waits for its data to load; a slower load (a file that blocks) is refused and holds up no other submission")
	fs.Int64Var(&o.maxParams, "max-params", coordinator.DefaultMaxParams(), fmt.Sprintf("largest model in `PARAMETERS` a job may have (the coordinator holds about %d bytes a parameter: weights, optimizer moments, snapshots, checkpoint copies); default: what fits in a quarter of this machine's memory; 0 takes any", coordinator.BytesPerParamHeld))
	fs.DurationVar(&o.progressEvery, "progress", 5*time.Second, "how often to log training progress")
	fs.StringVar(&o.dbPath, "db", "crowdtrain.db", "SQLite `FILE` keeping jobs, checkpoints, metrics and workers (\"\" keeps nothing)")
	fs.DurationVar(&o.ckptInterval, "checkpoint-interval", 10*time.Second, "longest time between checkpoints of a training job")
	fs.IntVar(&o.keepCkpts, "keep-checkpoints", 5, "checkpoints kept per job")
	fs.BoolVar(&o.verbose, "v", false, "log every checkpoint")
	// Durability.
	fs.DurationVar(&o.ckptRetryMin, "checkpoint-retry-min", time.Second, "first wait before retrying a checkpoint write that failed (disk full, read-only file system); doubles up to --checkpoint-retry-max")
	fs.DurationVar(&o.ckptRetryMax, "checkpoint-retry-max", time.Minute, "longest wait between retries of a failed checkpoint write")
	fs.DurationVar(&o.storeShutdown, "store-shutdown-timeout", 20*time.Second, "longest shutdown waits for the database: failed final checkpoints are retried for half of it")
	fs.IntVar(&o.maxWorkerRecords, "max-worker-records", 10000, "worker records kept in the database (the most recently seen)")
	fs.DurationVar(&o.workerRecordAge, "worker-record-max-age", 30*24*time.Hour, "worker records not seen for this long are deleted")
	fs.StringVar(&o.adminToken, "admin-token", "", "`TOKEN` for the admin page and API, at least 16 characters (default: $"+adminTokenEnv+", else a random one printed at start)")
	o.access.register(fs.FlagSet)
	// Wire: limits on what one websocket connection may send and hold (docs/SECURITY.md).
	fs.Int64Var(&o.maxControlBytes, "max-control-bytes", coordinator.DefaultMaxControlBytes, "size limit in `BYTES` of every worker message but a result (results: one update plus 64 KiB)")
	fs.IntVar(&o.decodeBuffers, "decode-buffers", coordinator.DefaultDecodeBuffers, "decode buffers kept between messages, shared by all connections; each holds one received frame and the update decoded from it (about two fp32 updates' worth)")
	fs.DurationVar(&o.pingInterval, "ping-interval", coordinator.DefaultPingInterval, "how often each worker connection is pinged (negative: never)")
	fs.IntVar(&o.pingMisses, "ping-misses", coordinator.DefaultMaxMissedPings, "unanswered pings in a row after which a worker connection is closed")
	fs.DurationVar(&o.nonFiniteEval, "nonfinite-eval-interval", coordinator.DefaultNonFiniteEvalInterval, "least time between evaluations started by runs of NaN/Inf results")
	fs.StringVar(&o.webDist, "web-dist", "", "`DIR` holding the browser worker ("+web.WasmFile+" and "+web.WasmExecFile+") to serve instead of the build embedded in this binary (`make wasm` writes it to web/dist)")
	fs.StringVar(&o.downloads, "downloads", "", "`DIR` of the worker's release archives and SHA256SUMS (what make dist writes to dist/), served under /downloads/ with the installers /install.sh and /install.ps1 and offered on the contribute page")
	fs.IntVar(&o.maxConnsPerAddr, "max-conns-per-address", coordinator.DefaultMaxConnsPerAddress, "worker connections one client address (IPv6: its /64) may hold open at once, said hello or not (loopback: plus --local-workers)")
	o.abuse.register(fs.FlagSet)
	o.relays.register(fs.FlagSet)
	o.tls.register(fs.FlagSet)
	o.tls.registerACME(fs.FlagSet)
	o.memory.register(fs.FlagSet)
	o.log = addLogFlags(fs.FlagSet)
	fs.addConfigFlags(func() *cliFlags { f, _ := newServeFlags(); return f })

	fs.place("Network and TLS", "addr", "public-url", "trusted-proxy", "tls-cert", "tls-key", "tls-reload-interval",
		"acme-domain", "acme-email", "acme-cache", "acme-directory", "acme-ca-file")
	fs.place("Jobs", "job", "local-workers", "threads", "data", "data-root", "data-load-timeout", "max-params")
	fs.place("Jobs", "snapshot-cache-mb")
	fs.place("Storage", "db", "checkpoint-interval", "keep-checkpoints", "checkpoint-retry-min", "checkpoint-retry-max",
		"store-shutdown-timeout", "max-worker-records", "worker-record-max-age")
	fs.place("Security", "admin-token", "join", "auth-fail-burst", "auth-fail-every")
	fs.place("Volunteer limits", "max-conns-per-address", "max-leases-per-address", "hellos-per-second", "result-bytes-per-second",
		"max-result-pause", "max-expiries-in-a-row", "hostage-cool-off", "max-control-bytes", "decode-buffers",
		"ping-interval", "ping-misses", "nonfinite-eval-interval")
	fs.place("HTTP limits", "max-http-conns-per-address", "anon-bulk-rate", "anon-bulk-burst", "min-read-rate", "min-read-grace",
		"idle-timeout", "read-header-timeout", "read-body-timeout", "metrics-page-max")
	fs.place("Relays", "nats-listen", "nats", "nats-creds", "nats-tls-cert", "nats-tls-key", "relay-approval", "relay-stream-bytes")
	fs.place("Web pages", "web-dist", "downloads")
	fs.place("Observability", "progress", "v", "log-format", "log-level", "metrics-token")
	fs.place("Configuration", "config", "print-config")
	return fs, o
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, o := newServeFlags()
	set, err := fs.parseLayered(ctx, args, "", stdout, stderr)
	if err != nil {
		return err
	}
	return set.locate(o.run(ctx, stderr))
}

// run checks the settings and runs the coordinator until ctx ends.
func (o *serveOptions) run(ctx context.Context, stderr io.Writer) error {
	access, abuse, relays, tlsf := &o.access, &o.abuse, &o.relays, &o.tls
	if len(tlsf.acmeDomains) > 0 {
		if tlsf.acmeCache == "" && o.dbPath != "" {
			tlsf.acmeCache = o.dbPath + ".acme"
		}
		// The names certificates are obtained for are names volunteers
		// reach the coordinator by.
		if _, port, err := net.SplitHostPort(o.addr); err == nil {
			for _, d := range tlsf.acmeDomains {
				access.publicURLs = append(access.publicURLs, "https://"+net.JoinHostPort(d, port))
			}
		}
	}
	if err := abuse.check(); err != nil {
		return err
	}
	if err := o.memory.check(); err != nil {
		return err
	}
	if err := relays.check(o.dbPath, o.join); err != nil {
		return err
	}
	if o.maxControlBytes < 1<<10 || o.decodeBuffers < 1 || o.pingInterval == 0 || o.pingMisses < 1 || o.nonFiniteEval <= 0 || o.maxConnsPerAddr < 1 {
		return usagef("--max-control-bytes must be >= 1024, --decode-buffers, --ping-misses and --max-conns-per-address >= 1, --ping-interval non-zero, --nonfinite-eval-interval positive")
	}
	// $CROWDTRAIN_ADMIN_TOKEN sets --admin-token, as every CROWDTRAIN_<FLAG> its flag.
	token, generated := o.adminToken, false
	if token == "" {
		token, generated = coordinator.NewAdminToken(), true
	} else if len(token) < 16 {
		return usagef("--admin-token: the admin token must be at least 16 characters (it guards job control); leave it unset for a random one")
	}
	if o.join != coordinator.JoinOpen && o.join != coordinator.JoinToken {
		return usagef("--join %q: want open (anyone may volunteer) or token (only with a join token from the admin page)", o.join)
	}
	if o.localWorkers < 0 || o.threads < 1 {
		return usagef("--local-workers must be >= 0 and --threads >= 1")
	}
	if o.progressEvery <= 0 {
		return usagef("--progress must be positive (how often to log training progress, e.g. 5s), got %v", o.progressEvery)
	}
	if o.ckptInterval <= 0 || o.keepCkpts < 1 {
		return usagef("--checkpoint-interval must be positive and --keep-checkpoints >= 1")
	}
	if o.ckptRetryMin <= 0 || o.ckptRetryMax < o.ckptRetryMin || o.storeShutdown <= 0 || o.maxWorkerRecords < 1 || o.workerRecordAge <= 0 {
		return usagef("--checkpoint-retry-min must be positive and at most --checkpoint-retry-max, --store-shutdown-timeout " +
			"and --worker-record-max-age positive, and --max-worker-records >= 1")
	}
	spec, err := jobspec.Load(o.jobArg)
	if err != nil {
		var se *jobspec.Error
		if errors.As(err, &se) || errors.Is(err, jobspec.ErrUnknownJob) {
			return &usageError{err.Error()}
		}
		return err
	}
	mnistDir := o.dataDir
	if spec.Dataset.IsText() {
		mnistDir = ""
		if o.dataDir != "" && spec.Dataset.ReadsTextFiles() {
			// --data names the text a text job trains on.
			abs, err := filepath.Abs(o.dataDir)
			if err != nil {
				return err
			}
			// A tree keeps its glob: go-source's .go files, or the spec's.
			d := dataset.Spec{Type: dataset.TypeText, Path: abs, Glob: spec.Dataset.Glob, ValFraction: spec.Dataset.ValFraction}
			if spec.Dataset.Name == dataset.GoSource {
				d.Glob, d.ValFraction = dataset.GoSourceGlob, dataset.GoSourceValFraction
			}
			if d.ValFraction == 0 {
				d.ValFraction = dataset.DefaultValFraction
			}
			spec.Dataset = d
		}
	}
	sl, err := o.log.logger(stderr)
	if err != nil {
		return err
	}
	logger := stdLogger(sl)
	// A certificate that cannot be served exits 2 before anything changes.
	if err := tlsf.load(logger); err != nil {
		return err
	}
	// The job's data set is loaded, and the model checked against it,
	// before the database is opened: bad data exits 2 with nothing
	// changed. Resumed jobs and jobs submitted later load theirs through
	// the same function, once each.
	loadData := func(d dataset.Spec, o dataset.Options) (*dataset.Set, *dataset.Set, error) {
		o.MNISTDir = mnistDir
		return dataset.Load(d, o)
	}
	// A tokenized job's tokenizer is read or trained before its data
	// loads (the data is encoded with it): a bad file or a vocabulary
	// that does not fit the model exits 2 here. An RL job reads its
	// policy's tokens: it takes the policy file's tokenizer.
	if err := coordinator.InheritPolicyTokenizer(&spec); err != nil {
		return &usageError{fmt.Sprintf("job %s: %v", o.jobArg, err)}
	}
	if err := coordinator.PrepareTokenizer(&spec); err != nil {
		return &usageError{fmt.Sprintf("job %s: %v", o.jobArg, err)}
	}
	// An RL job reads its task's problems as text (coordinator.JobData).
	dspec := spec
	dspec.Dataset = coordinator.JobData(spec)
	opts, err := coordinator.DataOptions(dspec)
	if err != nil {
		return &usageError{fmt.Sprintf("job %s: %v", o.jobArg, err)}
	}
	train, test, err := loadData(dspec.Dataset, opts)
	if err != nil {
		return &usageError{fmt.Sprintf("job %s: %v", o.jobArg, err)}
	}
	if err := coordinator.CheckData(&dspec, train); err != nil {
		return &usageError{fmt.Sprintf("job %s: the model does not fit the data (%s): %v", o.jobArg, train.Describe(), err)}
	}
	// Starting parameters that do not fit the model exit 2 here too
	// (init: {job: ID} is checked when the job is added).
	if err := coordinator.CheckInitFile(spec); err != nil {
		return &usageError{fmt.Sprintf("job %s: %v", o.jobArg, err)}
	}
	spec.Model = dspec.Model
	logger.Printf("data: %s: train %s; test %s", dspec.Dataset, train.Describe(), test.Describe())
	preloaded := dspec.Dataset.Key()
	var db *store.Store
	storeStuck := false // a frozen store: closing it would hang
	if o.dbPath != "" {
		if db, err = store.Open(o.dbPath); err != nil {
			if errors.Is(err, store.ErrNewerSchema) {
				// A newer crowdtrain's database: the fix is the binary,
				// and the file was left as it is.
				return &usageError{err.Error()}
			}
			return err
		}
		if from := db.UpgradedFrom(); from > 0 {
			logger.Printf("database %s: schema upgraded from version %d to %d (an older crowdtrain can no longer open it)",
				o.dbPath, from, store.SchemaVersion())
		}
		defer func() {
			if !storeStuck {
				db.Close()
			}
		}()
	}
	webOpts := web.Options{Logf: logger.Printf, Downloads: o.downloads, PublicURLs: access.publicURLs}
	if o.webDist != "" {
		for _, f := range []string{web.WasmFile, web.WasmExecFile} {
			if _, err := os.Stat(filepath.Join(o.webDist, f)); err != nil {
				return usagef("--web-dist %s: %v (build the browser worker there with `make wasm`, or leave --web-dist out)", o.webDist, err)
			}
		}
		webOpts.Dist = os.DirFS(o.webDist)
	}
	pages, err := web.NewHandler(webOpts)
	if err != nil {
		if o.downloads != "" {
			return usagef("--downloads: %v", err)
		}
		return err
	}
	cfg := coordinator.Config{
		LoadData: func(d dataset.Spec, o dataset.Options) (*dataset.Set, *dataset.Set, error) {
			if d.Key() == preloaded && o.Context == opts.Context && o.MNISTDir == opts.MNISTDir && sameTokenizer(o.Tokenizer, opts.Tokenizer) {
				return train, test, nil
			}
			return loadData(d, o)
		},
		Logger: sl, Store: db, DataRoot: o.dataRoot, DataLoadTimeout: o.dataLoadTimeout, MaxParams: o.maxParams,
		CheckpointInterval: o.ckptInterval, KeepCheckpoints: o.keepCkpts, Verbose: o.verbose,
		Pages: pages, AdminToken: token, Join: o.join,
		CheckpointRetryMin: o.ckptRetryMin, CheckpointRetryMax: o.ckptRetryMax, StoreShutdownTimeout: o.storeShutdown,
		MaxWorkerRecords: o.maxWorkerRecords, WorkerRecordMaxAge: o.workerRecordAge,
		MaxControlBytes: o.maxControlBytes, DecodeBuffers: o.decodeBuffers,
		PingInterval: o.pingInterval, MaxMissedPings: o.pingMisses, NonFiniteEvalInterval: o.nonFiniteEval,
		// The local workers connect over loopback, on top of the limit.
		MaxConnsPerAddress: o.maxConnsPerAddr + o.localWorkers,
	}
	abuse.apply(&cfg, o.localWorkers)
	o.memory.apply(&cfg)
	if err := access.apply(&cfg, o.addr, tlsf.scheme()); err != nil {
		return err
	}
	srv, err := coordinator.New(cfg)
	if err != nil {
		return &usageError{err.Error()}
	}
	// Tabs of the contribute page fetch their data from a relay.
	pages.AllowConnect(srv.RelayOrigins)
	defer srv.Close() // on early returns; the shutdown below closes it first
	// Unfinished jobs in the database carry on; --job starts a new one
	// only when there are none, so restarting never duplicates a job.
	resumed, err := srv.ResumeJobs(ctx)
	if err != nil {
		var ke *dataset.KeyError
		if dataset.IsNotFound(err) || errors.As(err, &ke) {
			// A stored job's data that is gone or broken: bad input.
			return &usageError{fmt.Sprintf("resuming from %s: %v", o.dbPath, err)}
		}
		return fmt.Errorf("resuming from %s: %w", o.dbPath, err)
	}
	var job *coordinator.Job
	var sweep *coordinator.Sweep // a --job that is a sweep's spec
	switch {
	case len(resumed) > 0:
		job = resumed[len(resumed)-1]
		logger.Printf("resumed %d unfinished job(s) from %s; --job %s not started", len(resumed), o.dbPath, o.jobArg)
	case len(srv.Sweeps(ctx)) > 0:
		logger.Printf("resumed %d sweep(s) from %s; --job %s not started", len(srv.Sweeps(ctx)), o.dbPath, o.jobArg)
	case spec.Sweep != nil:
		if sweep, err = srv.AddSweep(spec); err != nil {
			return &usageError{err.Error()}
		}
	default:
		if job, err = srv.AddJob(spec); err != nil {
			return &usageError{err.Error()}
		}
	}

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w (is another coordinator running? choose another --addr)", o.addr, err)
	}
	tctx, stopTLS := context.WithCancel(ctx)
	defer stopTLS()
	hs := &http.Server{Handler: srv.Handler(), ConnState: srv.ConnState, ReadHeaderTimeout: access.readHeaderTimeout, IdleTimeout: access.idleTimeout,
		ErrorLog: logger}
	serveErr := make(chan error, 1)
	go func(ln net.Listener) { serveErr <- hs.Serve(ln) }(tlsf.wrap(tctx, ln, logger))
	base := tlsf.scheme() + "://" + ln.Addr().String()
	closeRelays, err := relays.serve(ctx, srv, base, cfg.PublicURLs, logger)
	if err != nil {
		hs.Close()
		return err
	}
	defer closeRelays()
	logger.Printf("coordinator listening on %s (API %s/api/v1/jobs); workers join with: crowdtrain work --coordinator %s://%s/ws",
		base, base, tlsf.wsScheme(), ln.Addr())
	if msg := access.advice(ln.Addr().String()); msg != "" { // the port bound, for --addr HOST:0
		logger.Print(msg)
	}
	if pages.HasWorker() {
		logger.Printf("contribute from a browser: open %s/ and press Contribute", base)
	}
	if o.downloads != "" {
		logger.Printf("worker downloads from %s: %s/downloads/SHA256SUMS; install with: curl -fsSL %s/install.sh | sh (Windows: irm %s/install.ps1 | iex)",
			o.downloads, base, base, base)
	}
	if generated {
		logger.Printf("admin page %s/admin; admin token (random, this run only; set --admin-token or $%s to keep one): %s", base, adminTokenEnv, token)
	} else {
		logger.Printf("admin page %s/admin (token from --admin-token or $%s)", base, adminTokenEnv)
	}

	if o.join == coordinator.JoinToken {
		logger.Printf("join mode token: volunteers need a join token; issue them on the admin page (or POST /api/v1/tokens) and run: crowdtrain work --join-token TOKEN")
	}
	localToken := srv.LocalToken()
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range o.localWorkers {
		b, err := cpu.New(o.threads)
		if err != nil {
			stopWorkers()
			return err
		}
		wl := printf(sl.With("local_worker", i+1), fmt.Sprintf("local worker %d: ", i+1))
		// The operator's own workers send no volunteer key; in token
		// mode they get a token of their own.
		w, err := worker.New(worker.Config{
			Coordinator: tlsf.wsScheme() + "://" + loopbackAddr(ln.Addr()) + "/ws", Backend: b, Token: localToken,
			TLSConfig: tlsf.loopbackClient(),
			Client:    "crowdtrain/" + version + " (local)", Logf: wl,
			MinBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second,
			Caps: workerCaps(b, 0),
		})
		if err != nil {
			stopWorkers()
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(wctx); err != nil && wctx.Err() == nil {
				wl("stopped: %v", err)
			}
		}()
	}

	tick := time.NewTicker(o.progressEvery)
	defer tick.Stop()
	var lastExamples int64
	lastAt := time.Now()
	announced := ""
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case err := <-serveErr:
			stopWorkers()
			wg.Wait()
			return fmt.Errorf("http server: %w", err)
		case now := <-tick.C:
			if job == nil {
				if sweep != nil {
					if sv := sweep.View(ctx); announced != sv.State {
						announced = sv.State
						logger.Printf("sweep %s is %s (%d trials; best %+v)", sv.ID, sv.State, len(sv.Trials), sv.Best)
					}
				}
				continue
			}
			v, ok, err := srv.JobView(ctx, job.ID)
			if !ok || err != nil {
				continue
			}
			rate := float64(v.ExamplesSeen-lastExamples) / now.Sub(lastAt).Seconds()
			lastExamples, lastAt = v.ExamplesSeen, now
			acc := "-"
			if v.Eval != nil {
				acc = fmt.Sprintf("%.4f (v%d)", v.Eval.Accuracy, v.Eval.Version)
			}
			if v.State == coordinator.StateRunning {
				if f := v.CheckpointFailure; f != nil {
					sl.Error(fmt.Sprintf("job %s: checkpoint v%d not written yet (%d failures since %s, retrying): %s",
						v.ID, f.Version, f.Failures, f.PendingSince.Format(time.TimeOnly), f.LastError), "job", v.ID)
				}
				sl.Info(fmt.Sprintf("job %s: epoch %d (%.0f%%), version %d, %.0f examples/s, %d workers, rejected %d, test accuracy %s",
					v.ID, v.Epoch, 100*v.EpochProgress, v.Version, rate, v.Workers, v.UpdatesRejected, acc), "job", v.ID)
			} else if v.State == coordinator.StateFinishing {
				if f := v.CheckpointFailure; f != nil {
					sl.Error(fmt.Sprintf("job %s has ended (%s) but its final checkpoint v%d is not written yet (%d failures since %s, retrying): %s",
						v.ID, v.Reason, f.Version, f.Failures, f.PendingSince.Format(time.TimeOnly), f.LastError), "job", v.ID)
				}
			} else if announced != v.State {
				announced = v.State
				sl.Info(fmt.Sprintf("job %s is %s: %s. Still serving the API; Ctrl-C to stop.", v.ID, v.State, v.Reason), "job", v.ID, "state", v.State)
			}
		}
	}
	logger.Printf("shutting down")
	stopWorkers()
	wg.Wait()
	// Tells remote workers the coordinator is going away and writes final
	// checkpoints; an error means one is not durable, and the exit status
	// says so.
	closeErr := srv.Close()
	if closeErr != nil {
		storeStuck = true // it may still be inside a write
		closeErr = fmt.Errorf("shutting down: %w", closeErr)
	}
	// Shutdown waits for in-flight requests; a connection that never sent
	// one (a client's speculative dial) would hold it for seconds, so after
	// a grace period the rest is closed outright.
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
		logger.Printf("closed the HTTP connections still open after 3s")
	}
	return closeErr
}

// sameTokenizer reports whether two data options encode alike (both
// bytes, or tokenizers of the same merges).
func sameTokenizer(a, b dataset.Encoder) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ta, ok := a.(*tokenizer.Tokenizer)
	tb, ok2 := b.(*tokenizer.Tokenizer)
	return ok && ok2 && ta.Equal(tb)
}
