package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/tlsfiles"
	"github.com/crowdtrain/crowdtrain/nativeworker"
	"github.com/crowdtrain/crowdtrain/nativeworker/polite"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

func work(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("work", flag.ContinueOnError)
	coord := fs.String("coordinator", "ws://127.0.0.1:8080/ws", "coordinator websocket `URLs`, comma-separated (a coordinator's relays): the worker moves to the next when the one in use cannot be reached; an http(s)://HOST:PORT entry is a coordinator whose relays (GET /api/v1/relays) the worker joins, the least busy first")
	caFile := fs.String("ca-file", "", "PEM `FILE` of a private CA (or a self-signed certificate) to trust for a wss:// or https:// --coordinator, beside the system's CAs")
	threads := fs.Int("threads", 1, "CPU threads to train with (0 = one per CPU; --backend cpu)")
	joinToken := fs.String("join-token", "", "join `TOKEN` from the coordinator's operator, for a coordinator run with --join token")
	name := fs.String("name", "", "display `NAME` on the coordinator's leaderboard (default: anonymous)")
	keyFile := fs.String("key-file", defaultKeyFile(), "`FILE` holding this volunteer's key, made on first use; '' sends no key (credit then goes to the address)")
	adminToken := fs.String("token", "", "not a work flag: the join token is --join-token")
	backend := fs.String("backend", backendAuto, "`auto` (the GPU if usable, else the CPU), cpu or cuda")
	device := fs.Int("device", 0, "CUDA device number (--backend cuda or auto)")
	kernel := fs.String("kernel", nativeworker.KernelAuto, "CPU: GEMM `kernel` (auto, avx512, avx2, neon, openblas, gonum, go)")
	pin := fs.String("job", "", "compute only for job `ID` (or a sweep's trials); default: any job the coordinator places this worker on")
	memoryMB := fs.Int("memory-mb", 0, "memory in `MB` this worker may spend on a job (default: what the system has available)")
	config := fs.String("config", "", "worker config `FILE` (YAML, keys as these flags with _ for -); default ~/.config/crowdtrain/"+workConfigName+" or the OS's config directory, if there; flags override it")
	idleOnly := fs.Bool("idle-only", false, "compute only while the machine is otherwise idle (no input for --idle-after, other programs under --idle-cpu); stop within a second when that ends")
	idleAfter := fs.Duration("idle-after", polite.DefaultInputIdle, "--idle-only: the user counts as away this `long` after their last input")
	idleCPU := &percentFlag{v: polite.DefaultMaxOthersCPU}
	fs.Var(idleCPU, "idle-cpu", "--idle-only: the machine counts as idle while other programs use at most this `PERCENT` of its CPUs")
	var hours hoursFlag
	fs.Var(&hours, "hours", "compute only in this daily window of local time, `FROM-TO` on a 24-hour clock (22-07 wraps midnight; 9:30-17)")
	maxCPU := &percentFlag{v: 1}
	fs.Var(maxCPU, "max-cpu", "share of the time to compute, `PERCENT`: after each task the worker rests so that computing takes this share (as the contribute page's CPU setting)")
	var priority priorityFlag
	fs.Var(&priority, "priority", "`low` (nice 10; below normal on Windows) or normal")
	logFlags := addLogFlags(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *config == "" {
		*config = defaultWorkConfig()
	}
	if *config != "" {
		if err := applyWorkConfig(fs, *config, "config", "token"); err != nil {
			return usagef("%v", err)
		}
	}
	if *adminToken != "" {
		return usagef("--token is the admin token of status and submit; the join token is --join-token")
	}
	if err := protocol.CheckVolunteerName(*name); err != nil {
		return usagef("--name %q: %v", *name, err)
	}
	var key string
	if *keyFile != "" {
		var err error
		if key, err = loadVolunteerKey(*keyFile); err != nil {
			return err
		}
	}
	sl, err := logFlags.logger(stderr)
	if err != nil {
		return err
	}
	logger := stdLogger(sl)
	if *config != "" {
		logger.Printf("settings from %s, and the command line over them", *config)
	}
	if !priority.normal {
		if err := polite.LowerPriority(); err != nil {
			logger.Printf("cannot lower this process's priority (--priority normal says not to try): %v", err)
		}
	}
	var idle worker.IdleDetector
	if *idleOnly {
		if *idleAfter <= 0 {
			return usagef("--idle-after %v: want a positive duration, such as 3m", *idleAfter)
		}
		var err error
		if idle, err = polite.System(polite.Options{MaxOthersCPU: idleCPU.v, InputIdle: *idleAfter}); err != nil {
			return fmt.Errorf("--idle-only: %v", err)
		}
	}
	var tlsConfig *tls.Config
	if *caFile != "" {
		var err error
		if tlsConfig, err = tlsfiles.ClientConfig("--ca-file", *caFile); err != nil {
			return usagef("%v", err)
		}
	}
	b, release, err := openBackend(*backend, *device, *threads, *kernel, logger.Printf)
	if err != nil {
		return err
	}
	defer release()
	w, err := worker.New(worker.Config{
		Coordinator: *coord, Backend: b, Kind: workerKind(b), Token: *joinToken, VolunteerKey: key, Name: *name,
		Client: "crowdtrain/" + version, Logf: logger.Printf, TLSConfig: tlsConfig,
		Job: *pin, Caps: workerCaps(b, *memoryMB),
		Duty: maxCPU.v, Idle: idle, Hours: hours.h, ResumeAfter: idleResumeAfter,
	})
	if err != nil {
		return usagef("%v", err)
	}
	logger.Printf("worker starting: %s, coordinator %s%s", describeBackend(b), *coord, manners(*idleOnly, hours.h, maxCPU.v, priority.normal))
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
