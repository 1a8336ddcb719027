package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/tlsfiles"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
	"github.com/crowdtrain/crowdtrain/worker/cpu/native"
	"github.com/crowdtrain/crowdtrain/worker/cpu/polite"
)

// workOptions are work's settings, as its flags set them.
type workOptions struct {
	coord, caFile, joinToken, name, keyFile, backend, kernel, pin string
	threads, device, memoryMB                                     int
	idleOnly, startAhead                                          bool
	idleAfter                                                     time.Duration
	idleCPU, maxCPU                                               percentFlag
	hours                                                         hoursFlag
	priority                                                      priorityFlag
	log                                                           *logFlags // logflags.go: --log-format, --log-level
}

// newWorkFlags builds work's flag set, grouped for its help; parsing it
// starts nothing.
func newWorkFlags() (*cliFlags, *workOptions) {
	o := &workOptions{idleCPU: percentFlag{v: polite.DefaultMaxOthersCPU}, maxCPU: percentFlag{v: 1}}
	fs := newCLIFlags("work", "work [flags]   (every flag also as CROWDTRAIN_<FLAG> or in --config FILE)")
	fs.StringVar(&o.coord, "coordinator", "ws://127.0.0.1:8080/ws", "coordinator websocket `URLs`, comma-separated (a coordinator's relays): the worker moves to the next when the one in use cannot be reached; an http(s)://HOST:PORT entry is a coordinator whose relays (GET /api/v1/relays) the worker joins, the least busy first")
	fs.StringVar(&o.caFile, "ca-file", "", "PEM `FILE` of a private CA (or a self-signed certificate) to trust for a wss:// or https:// --coordinator, beside the system's CAs")
	fs.StringVar(&o.joinToken, "join-token", "", "join `TOKEN` from the coordinator's operator, for a coordinator run with --join token")
	fs.StringVar(&o.pin, "job", "", "compute only for job `ID` (or a sweep's trials); default: any job the coordinator places this worker on")
	fs.group("Coordinator")
	fs.StringVar(&o.name, "name", "", "display `NAME` on the coordinator's leaderboard (default: anonymous)")
	fs.StringVar(&o.keyFile, "key-file", defaultKeyFile(), "`FILE` holding this volunteer's key, made on first use; '' sends no key (credit then goes to the address)")
	fs.group("Volunteer")
	fs.StringVar(&o.backend, "backend", backendAuto, "`BACKEND`: auto (the GPU if usable, else the CPU), cpu or cuda")
	fs.IntVar(&o.device, "device", 0, "CUDA device number (--backend cuda or auto)")
	fs.IntVar(&o.threads, "threads", 1, "CPU threads to train with (0 = one per CPU; --backend cpu)")
	fs.StringVar(&o.kernel, "kernel", native.KernelAuto, "CPU: the GEMM `KERNEL` (auto, avx512, avx2, neon, openblas, gonum, go)")
	fs.IntVar(&o.memoryMB, "memory-mb", 0, "memory in `MB` this worker may spend on a job: the coordinator sends only jobs that fit, and the CPU backend computes a batch that does not fit in micro-batches (default: what the system has available)")
	fs.BoolVar(&o.startAhead, "start-ahead", false, "start the next task (its snapshot: latest) while one computes: less waiting, one version more staleness, which can cost the job examples (docs/BENCHMARKS.md, utilisation)")
	fs.group("Compute")
	fs.BoolVar(&o.idleOnly, "idle-only", false, "compute only while the machine is otherwise idle (no input for --idle-after, other programs under --idle-cpu); stop within a second when that ends")
	fs.DurationVar(&o.idleAfter, "idle-after", polite.DefaultInputIdle, "--idle-only: the user counts as away this `long` after their last input")
	fs.Var(&o.idleCPU, "idle-cpu", "--idle-only: the machine counts as idle while other programs use at most this `PERCENT` of its CPUs")
	fs.Var(&o.hours, "hours", "compute only in this daily window of local time, `FROM-TO` on a 24-hour clock (22-07 wraps midnight; 9:30-17)")
	fs.Var(&o.maxCPU, "max-cpu", "share of the time to compute, `PERCENT`: after each task the worker rests so that computing takes this share (as the contribute page's CPU setting)")
	fs.Var(&o.priority, "priority", "`PRIORITY`: low (nice 10; below normal on Windows) or normal")
	fs.group("Manners (docs/DAEMON.md)")
	o.log = addLogFlags(fs.FlagSet)
	fs.group("Logging")
	fs.addConfigFlags(func() *cliFlags { f, _ := newWorkFlags(); return f })
	fs.Lookup("config").Usage += "; default ~/.config/crowdtrain/" + workConfigName + " or the OS's config directory, if there"
	fs.group("Configuration")
	fs.hints["token"] = "--token is the admin token of status and submit; the join token is --join-token"
	return fs, o
}

func work(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, o := newWorkFlags()
	set, err := fs.parseLayered(ctx, args, defaultWorkConfig(), stdout, stderr)
	if err != nil {
		return err
	}
	return set.locate(o.run(ctx, set.file, stdout, stderr))
}

// run checks the settings and runs the worker until ctx ends; config is
// the config file read, if any.
func (o *workOptions) run(ctx context.Context, config string, stdout, stderr io.Writer) error {
	idleCPU, maxCPU, hours, priority := &o.idleCPU, &o.maxCPU, &o.hours, &o.priority
	if err := protocol.CheckVolunteerName(o.name); err != nil {
		return usagef("--name %q: %v", o.name, err)
	}
	var key string
	if o.keyFile != "" {
		var err error
		if key, err = loadVolunteerKey(o.keyFile); err != nil {
			return err
		}
	}
	sl, err := o.log.logger(stderr)
	if err != nil {
		return err
	}
	logger := stdLogger(sl)
	if config != "" {
		logger.Printf("settings from %s, and CROWDTRAIN_ variables and the command line over them", config)
	}
	if !priority.normal {
		if err := polite.LowerPriority(); err != nil {
			logger.Printf("cannot lower this process's priority (--priority normal says not to try): %v", err)
		}
	}
	var idle worker.IdleDetector
	if o.idleOnly {
		if o.idleAfter <= 0 {
			return usagef("--idle-after %v: want a positive duration, such as 3m", o.idleAfter)
		}
		var err error
		if idle, err = polite.System(polite.Options{MaxOthersCPU: idleCPU.v, InputIdle: o.idleAfter}); err != nil {
			return fmt.Errorf("--idle-only: %v", err)
		}
	}
	var tlsConfig *tls.Config
	if o.caFile != "" {
		var err error
		if tlsConfig, err = tlsfiles.ClientConfig("--ca-file", o.caFile); err != nil {
			return usagef("%v", err)
		}
	}
	b, release, err := openBackend(o.backend, o.device, o.threads, o.kernel, logger.Printf)
	if err != nil {
		return err
	}
	defer release()
	caps := workerCaps(b, o.memoryMB)
	if cpu, ok := b.(*cpu.Backend); ok && caps.MemoryMB > 0 {
		// What it told the coordinator it may spend, it keeps to: a
		// batch that does not fit is computed in micro-batches.
		cpu.SetMemoryBudget(int64(caps.MemoryMB) << 20)
	}
	w, err := worker.New(worker.Config{
		Coordinator: o.coord, Backend: b, Kind: workerKind(b), Token: o.joinToken, VolunteerKey: key, Name: o.name,
		Client: "crowdtrain/" + version, Logf: logger.Printf, TLSConfig: tlsConfig,
		Job: o.pin, Caps: caps,
		Duty: maxCPU.v, Idle: idle, Hours: hours.h, ResumeAfter: idleResumeAfter,
		StartAhead: o.startAhead,
	})
	if err != nil {
		return usagef("%v", err)
	}
	logger.Printf("worker starting: %s, coordinator %s%s", describeBackend(b), o.coord, manners(o.idleOnly, hours.h, maxCPU.v, priority.normal))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	p := newProgress(stdout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			p.finish()
			return err
		case now := <-tick.C:
			p.print(now, w.Stats())
		}
	}
}

// manners says how the worker keeps out of the volunteer's way.
func manners(idleOnly bool, h worker.Hours, share float64, normal bool) string {
	var m []string
	if idleOnly {
		m = append(m, "only while the machine is idle")
	}
	if h.Set() {
		m = append(m, "only in the hours "+h.String())
	}
	if share < 1 {
		m = append(m, fmt.Sprintf("computing %.0f%% of the time", 100*share))
	}
	if !normal {
		m = append(m, "at low priority")
	}
	if len(m) == 0 {
		return ""
	}
	return "; " + strings.Join(m, ", ")
}

// progress prints a live line: rewritten in place on a terminal, one line
// every 10 seconds otherwise (logs).
type progress struct {
	out      io.Writer
	terminal bool
	last     worker.Stats
	lastAt   time.Time
	lastLine time.Time
	rate     float64
}

func newProgress(out io.Writer) *progress {
	p := &progress{out: out, lastAt: time.Now()}
	if f, ok := out.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

func (p *progress) print(now time.Time, s worker.Stats) {
	dt := now.Sub(p.lastAt).Seconds()
	inst := float64(s.Computed-p.last.Computed) / dt
	if p.rate == 0 {
		p.rate = inst
	} else {
		p.rate = 0.7*p.rate + 0.3*inst // smooth the per-second jitter
	}
	p.last, p.lastAt = s, now
	state := "working"
	switch {
	case s.Paused:
		state = "paused: " + s.PauseReason
	case !s.Connected:
		state = "connecting"
	case s.Idle:
		state = "idle"
	}
	line := fmt.Sprintf("%s | %s | %.0f examples/s | accepted %d, rejected %d | staleness %d | model v%d",
		s.WorkerID, state, p.rate, s.Accepted, s.Rejected, s.LastStaleness, s.Version)
	if s.Rejected > 0 && s.LastReason != "" {
		line += " | last rejection: " + s.LastReason
	}
	if p.terminal {
		fmt.Fprintf(p.out, "\r\033[K%s", line)
	} else if now.Sub(p.lastLine) >= 10*time.Second {
		fmt.Fprintln(p.out, line)
		p.lastLine = now
	}
}

func (p *progress) finish() {
	if p.terminal {
		fmt.Fprintln(p.out)
	}
}
