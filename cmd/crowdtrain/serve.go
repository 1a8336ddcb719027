//go:build cgo

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/cpubackend"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/store"
	"github.com/crowdtrain/crowdtrain/web"
	"github.com/crowdtrain/crowdtrain/worker"
)

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "`HOST:PORT` to listen on")
	jobArg := fs.String("job", "mnist-mlp", "a built-in job `NAME` ("+strings.Join(coordinator.JobPresetNames(), ", ")+") or a YAML/JSON spec FILE")
	localWorkers := fs.Int("local-workers", 0, "native workers to run inside this process")
	join := fs.String("join", coordinator.JoinOpen, "who may volunteer: `open` (anyone) or token (only with a join token issued on the admin page or POST /api/v1/tokens)")
	threads := fs.Int("threads", 1, "threads per local worker")
	dataDir := fs.String("data", "", "`PATH` of the job's data: for a text job (charlm) a UTF-8 text FILE or a DIR of them (default: the King James text `bible` prints); "+
		"for `dataset: mnist` the DIR holding the MNIST IDX files (default: search, see README); fashion-mnist is always read from "+dataset.FashionMNISTDir)
	dataRoot := fs.String("data-root", ".", "`DIR` whose files job specs submitted over the API may name (their relative paths are relative to it)")
	dataLoadTimeout := fs.Duration("data-load-timeout", coordinator.DefaultDataLoadTimeout, "longest a submitted job waits for its data to load; a slower load (a file that blocks) is refused and holds up no other submission")
	maxParams := fs.Int64("max-params", coordinator.DefaultMaxParams(), fmt.Sprintf("largest model in `PARAMETERS` a job may have (the coordinator holds about %d bytes a parameter: weights, optimizer moments, snapshots, checkpoint copies); default: what fits in a quarter of this machine's memory; 0 takes any", coordinator.BytesPerParamHeld))
	progressEvery := fs.Duration("progress", 5*time.Second, "how often to log training progress")
	dbPath := fs.String("db", "crowdtrain.db", "SQLite `FILE` keeping jobs, checkpoints, metrics and workers (\"\" keeps nothing)")
	ckptInterval := fs.Duration("checkpoint-interval", 10*time.Second, "longest time between checkpoints of a training job")
	keepCkpts := fs.Int("keep-checkpoints", 5, "checkpoints kept per job")
	verbose := fs.Bool("v", false, "log every checkpoint")
	// Durability.
	ckptRetryMin := fs.Duration("checkpoint-retry-min", time.Second, "first wait before retrying a checkpoint write that failed (disk full, read-only file system); doubles up to --checkpoint-retry-max")
	ckptRetryMax := fs.Duration("checkpoint-retry-max", time.Minute, "longest wait between retries of a failed checkpoint write")
	storeShutdown := fs.Duration("store-shutdown-timeout", 20*time.Second, "longest shutdown waits for the database: failed final checkpoints are retried for half of it")
	maxWorkerRecords := fs.Int("max-worker-records", 10000, "worker records kept in the database (the most recently seen)")
	workerRecordAge := fs.Duration("worker-record-max-age", 30*24*time.Hour, "worker records not seen for this long are deleted")
	adminToken := fs.String("admin-token", "", "`TOKEN` for the admin page and API (default: $CROWDTRAIN_ADMIN_TOKEN, else a random one printed at start)")
	// HTTP access: names, proxies, limits (serveaccess.go).
	var access accessFlags
	access.register(fs)
	// Wire: limits on what one websocket connection may send and hold (docs/SECURITY.md).
	maxControlBytes := fs.Int64("max-control-bytes", coordinator.DefaultMaxControlBytes, "size limit in `BYTES` of every worker message but a result (results: one update plus 64 KiB)")
	decodeBuffers := fs.Int("decode-buffers", coordinator.DefaultDecodeBuffers, "decode buffers kept between messages, shared by all connections; each holds one received frame and the update decoded from it (about two fp32 updates' worth)")
	pingInterval := fs.Duration("ping-interval", coordinator.DefaultPingInterval, "how often each worker connection is pinged (negative: never)")
	pingMisses := fs.Int("ping-misses", coordinator.DefaultMaxMissedPings, "unanswered pings in a row after which a worker connection is closed")
	nonFiniteEval := fs.Duration("nonfinite-eval-interval", coordinator.DefaultNonFiniteEvalInterval, "least time between evaluations started by runs of NaN/Inf results")
	webDist := fs.String("web-dist", "", "`DIR` holding the browser worker ("+web.WasmFile+" and "+web.WasmExecFile+") to serve instead of the build embedded in this binary (`make wasm` writes it to web/dist)")
	downloads := fs.String("downloads", "", "`DIR` of the worker's release archives and SHA256SUMS (what make dist writes to dist/), served under /downloads/ with the installers /install.sh and /install.ps1 and offered on the contribute page")
	maxConnsPerAddr := fs.Int("max-conns-per-address", coordinator.DefaultMaxConnsPerAddress, "worker connections one client address (IPv6: its /64) may hold open at once, said hello or not (loopback: plus --local-workers)")
	var abuse abuseFlags // serveabuse.go: per-address and hostage limits
	abuse.register(fs)
	var relays relayFlags // relaycmd.go: NATS for relays
	relays.register(fs)
	var tlsf tlsFlags // servetls.go: HTTPS and WSS
	tlsf.register(fs)
	tlsf.registerACME(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if len(tlsf.acmeDomains) > 0 {
		if tlsf.acmeCache == "" && *dbPath != "" {
			tlsf.acmeCache = *dbPath + ".acme"
		}
		// The names certificates are obtained for are names volunteers
		// reach the coordinator by.
		if _, port, err := net.SplitHostPort(*addr); err == nil {
			for _, d := range tlsf.acmeDomains {
				access.publicURLs = append(access.publicURLs, "https://"+net.JoinHostPort(d, port))
			}
		}
	}
	if err := abuse.check(); err != nil {
		return err
	}
	if err := relays.check(*dbPath, *join); err != nil {
		return err
	}
	if *maxControlBytes < 1<<10 || *decodeBuffers < 1 || *pingInterval == 0 || *pingMisses < 1 || *nonFiniteEval <= 0 || *maxConnsPerAddr < 1 {
		return usagef("--max-control-bytes must be >= 1024, --decode-buffers, --ping-misses and --max-conns-per-address >= 1, --ping-interval non-zero, --nonfinite-eval-interval positive")
	}
	token, generated := *adminToken, false
	if token == "" {
		token = os.Getenv(adminTokenEnv)
	}
	if token == "" {
		token, generated = coordinator.NewAdminToken(), true
	} else if len(token) < 16 {
		return usagef("the admin token must be at least 16 characters (it guards job control); leave it unset for a random one")
	}
	if *join != coordinator.JoinOpen && *join != coordinator.JoinToken {
		return usagef("--join %q: want open (anyone may volunteer) or token (only with a join token from the admin page)", *join)
	}
	if *localWorkers < 0 || *threads < 1 {
		return usagef("--local-workers must be >= 0 and --threads >= 1")
	}
	if *progressEvery <= 0 {
		return usagef("--progress must be positive (how often to log training progress, e.g. 5s), got %v", *progressEvery)
	}
	if *ckptInterval <= 0 || *keepCkpts < 1 {
		return usagef("--checkpoint-interval must be positive and --keep-checkpoints >= 1")
	}
	if *ckptRetryMin <= 0 || *ckptRetryMax < *ckptRetryMin || *storeShutdown <= 0 || *maxWorkerRecords < 1 || *workerRecordAge <= 0 {
		return usagef("--checkpoint-retry-min must be positive and at most --checkpoint-retry-max, --store-shutdown-timeout " +
			"and --worker-record-max-age positive, and --max-worker-records >= 1")
	}
	spec, err := coordinator.LoadJobSpec(*jobArg)
	if err != nil {
		var se *coordinator.SpecError
		if errors.As(err, &se) || errors.Is(err, coordinator.ErrUnknownJob) {
			return &usageError{err.Error()}
		}
		return err
	}
	mnistDir := *dataDir
	if spec.Dataset.IsText() {
		mnistDir = ""
		if *dataDir != "" {
			// --data names the text a text job trains on.
			abs, err := filepath.Abs(*dataDir)
			if err != nil {
				return err
			}
			vf := spec.Dataset.ValFraction
			if vf == 0 {
				vf = dataset.DefaultValFraction
			}
			spec.Dataset = dataset.Spec{Type: dataset.TypeText, Path: abs, ValFraction: vf}
		}
	}
	logger := log.New(stderr, "", log.LstdFlags)
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
	opts, err := coordinator.DataOptions(spec)
	if err != nil {
		return &usageError{fmt.Sprintf("job %s: %v", *jobArg, err)}
	}
	train, test, err := loadData(spec.Dataset, opts)
	if err != nil {
		return &usageError{fmt.Sprintf("job %s: %v", *jobArg, err)}
	}
	if err := coordinator.CheckData(&spec, train); err != nil {
		return &usageError{fmt.Sprintf("job %s: the model does not fit the data (%s): %v", *jobArg, train.Describe(), err)}
	}
	logger.Printf("data: %s: train %s; test %s", spec.Dataset, train.Describe(), test.Describe())
	preloaded := spec.Dataset.Key()
	var db *store.Store
	storeStuck := false // a frozen store: closing it would hang
	if *dbPath != "" {
		if db, err = store.Open(*dbPath); err != nil {
			return err
		}
		defer func() {
			if !storeStuck {
				db.Close()
			}
		}()
	}
	webOpts := web.Options{Logf: logger.Printf, Downloads: *downloads, PublicURLs: access.publicURLs}
	if *webDist != "" {
		for _, f := range []string{web.WasmFile, web.WasmExecFile} {
			if _, err := os.Stat(filepath.Join(*webDist, f)); err != nil {
				return usagef("--web-dist %s: %v (build the browser worker there with `make wasm`, or leave --web-dist out)", *webDist, err)
			}
		}
		webOpts.Dist = os.DirFS(*webDist)
	}
	pages, err := web.NewHandler(webOpts)
	if err != nil {
		if *downloads != "" {
			return usagef("--downloads: %v", err)
		}
		return err
	}
	cfg := coordinator.Config{
		LoadData: func(d dataset.Spec, o dataset.Options) (*dataset.Set, *dataset.Set, error) {
			if d.Key() == preloaded && o == opts {
				return train, test, nil
			}
			return loadData(d, o)
		},
		Logf: logger.Printf, Store: db, DataRoot: *dataRoot, DataLoadTimeout: *dataLoadTimeout, MaxParams: *maxParams,
		CheckpointInterval: *ckptInterval, KeepCheckpoints: *keepCkpts, Verbose: *verbose,
		Pages: pages, AdminToken: token, Join: *join,
		CheckpointRetryMin: *ckptRetryMin, CheckpointRetryMax: *ckptRetryMax, StoreShutdownTimeout: *storeShutdown,
		MaxWorkerRecords: *maxWorkerRecords, WorkerRecordMaxAge: *workerRecordAge,
		MaxControlBytes: *maxControlBytes, DecodeBuffers: *decodeBuffers,
		PingInterval: *pingInterval, MaxMissedPings: *pingMisses, NonFiniteEvalInterval: *nonFiniteEval,
		// The local workers connect over loopback, on top of the limit.
		MaxConnsPerAddress: *maxConnsPerAddr + *localWorkers,
	}
	abuse.apply(&cfg, *localWorkers)
	if err := access.apply(&cfg, *addr, tlsf.scheme()); err != nil {
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
			return &usageError{fmt.Sprintf("resuming from %s: %v", *dbPath, err)}
		}
		return fmt.Errorf("resuming from %s: %w", *dbPath, err)
	}
	var job *coordinator.Job
	var sweep *coordinator.Sweep // a --job that is a sweep's spec
	switch {
	case len(resumed) > 0:
		job = resumed[len(resumed)-1]
		logger.Printf("resumed %d unfinished job(s) from %s; --job %s not started", len(resumed), *dbPath, *jobArg)
	case len(srv.Sweeps(ctx)) > 0:
		logger.Printf("resumed %d sweep(s) from %s; --job %s not started", len(srv.Sweeps(ctx)), *dbPath, *jobArg)
	case spec.Sweep != nil:
		if sweep, err = srv.AddSweep(spec); err != nil {
			return &usageError{err.Error()}
		}
	default:
		if job, err = srv.AddJob(spec); err != nil {
			return &usageError{err.Error()}
		}
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w (is another coordinator running? choose another --addr)", *addr, err)
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
	if msg := access.advice(*addr); msg != "" {
		logger.Print(msg)
	}
	if pages.HasWorker() {
		logger.Printf("contribute from a browser: open %s/ and press Contribute", base)
	}
	if *downloads != "" {
		logger.Printf("worker downloads from %s: %s/downloads/SHA256SUMS; install with: curl -fsSL %s/install.sh | sh (Windows: irm %s/install.ps1 | iex)",
			*downloads, base, base, base)
	}
	if generated {
		logger.Printf("admin page %s/admin; admin token (random, this run only; set --admin-token or $%s to keep one): %s", base, adminTokenEnv, token)
	} else {
		logger.Printf("admin page %s/admin (token from --admin-token or $%s)", base, adminTokenEnv)
	}

	if *join == coordinator.JoinToken {
		logger.Printf("join mode token: volunteers need a join token; issue them on the admin page (or POST /api/v1/tokens) and run: crowdtrain work --join-token TOKEN")
	}
	localToken := srv.LocalToken()
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range *localWorkers {
		b, err := cpubackend.New(*threads)
		if err != nil {
			stopWorkers()
			return err
		}
		wl := log.New(stderr, fmt.Sprintf("local worker %d: ", i+1), log.LstdFlags)
		// The operator's own workers send no volunteer key; in token
		// mode they get a token of their own.
		w, err := worker.New(worker.Config{
			Coordinator: tlsf.wsScheme() + "://" + loopbackAddr(ln.Addr()) + "/ws", Backend: b, Token: localToken,
			TLSConfig: tlsf.loopbackClient(),
			Client:    "crowdtrain/" + version + " (local)", Logf: wl.Printf,
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
				wl.Printf("stopped: %v", err)
			}
		}()
	}

	tick := time.NewTicker(*progressEvery)
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
					logger.Printf("job %s: checkpoint v%d not written yet (%d failures since %s, retrying): %s",
						v.ID, f.Version, f.Failures, f.PendingSince.Format(time.TimeOnly), f.LastError)
				}
				logger.Printf("job %s: epoch %d (%.0f%%), version %d, %.0f examples/s, %d workers, rejected %d, test accuracy %s",
					v.ID, v.Epoch, 100*v.EpochProgress, v.Version, rate, v.Workers, v.UpdatesRejected, acc)
			} else if v.State == coordinator.StateFinishing {
				if f := v.CheckpointFailure; f != nil {
					logger.Printf("job %s has ended (%s) but its final checkpoint v%d is not written yet (%d failures since %s, retrying): %s",
						v.ID, v.Reason, f.Version, f.Failures, f.PendingSince.Format(time.TimeOnly), f.LastError)
				}
			} else if announced != v.State {
				announced = v.State
				logger.Printf("job %s is %s: %s. Still serving the API; Ctrl-C to stop.", v.ID, v.State, v.Reason)
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
