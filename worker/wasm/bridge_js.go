//go:build js && wasm

package wasm

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall/js"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/wasm/webgpu"
)

// control is one message from the page, copied out of its JS object.
type control struct {
	typ         string
	coordinator string
	client      string
	duty        float64
	paused      bool
	// The volunteer's identity, sent in hello: the key the page keeps in
	// localStorage, the display name and the join token.
	volunteerKey, name, token string
	// job pins the tab to a job or sweep ("" any); memoryMB is the
	// memory the page lets a job use (hello's caps).
	job      string
	memoryMB int
	// backend is the backend worker.js prepared (webgpu, wasm-simd,
	// wasm-go).
	backend string
	data    []string // data sets whose shards the page's Cache Storage holds
	// bench: the model, batch, number of rounds and seconds per round.
	model         string
	spec          string // gradient: a model spec in JSON instead of a preset
	lease         string // gradient: a lease in JSON to compute (worker.ComputeLease) instead of one gradient
	batch, rounds int
	localSteps    int // bench: steps per timed lease on a GPU backend
	seconds       float64
	x             []float32 // the batch to time, from xBytes (float32 LE); nil: random
	labels        []int32   // from labelBytes (one byte each)
	params        []float32 // gradient: from paramBytes (float32 LE); nil: nn's initialisation from seed 1
}

func parseControl(v js.Value) control {
	c := control{duty: 1}
	if v.Type() != js.TypeObject {
		return c
	}
	str := func(k string) string {
		if f := v.Get(k); f.Type() == js.TypeString {
			return f.String()
		}
		return ""
	}
	c.typ, c.coordinator, c.client = str("type"), str("coordinator"), str("client")
	c.volunteerKey, c.name, c.token = str("volunteerKey"), str("name"), str("token")
	c.job, c.backend = str("job"), str("backend")
	if d := v.Get("data"); d.Type() == js.TypeObject {
		for i := range min(d.Length(), 64) {
			if k := d.Index(i); k.Type() == js.TypeString && len(k.String()) <= 64 {
				c.data = append(c.data, k.String())
			}
		}
	}
	if f := v.Get("memoryMB"); f.Type() == js.TypeNumber && f.Float() > 0 && f.Float() < 1<<30 {
		c.memoryMB = int(f.Float())
	}
	for _, k := range []string{"duty", "value"} {
		if f := v.Get(k); f.Type() == js.TypeNumber {
			c.duty = f.Float()
		}
	}
	c.paused = v.Get("paused").Truthy()
	c.model, c.spec, c.lease = str("model"), str("spec"), str("lease")
	num := func(k string, def float64) float64 {
		if f := v.Get(k); f.Type() == js.TypeNumber {
			return f.Float()
		}
		return def
	}
	c.batch, c.rounds, c.seconds = int(num("batch", 64)), int(num("rounds", 5)), num("seconds", 1)
	c.localSteps = int(num("localSteps", 1))
	if xb, lb := bytesOf(v.Get("xBytes")), bytesOf(v.Get("labelBytes")); xb != nil && lb != nil {
		c.x = floatsLE(xb)
		c.labels = make([]int32, len(lb))
		for i, l := range lb {
			c.labels[i] = int32(l)
		}
	}
	if pb := bytesOf(v.Get("paramBytes")); pb != nil {
		c.params = floatsLE(pb)
	}
	return c
}

// floatsLE reads little-endian float32s.
func floatsLE(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// bytesOf copies a Uint8Array; nil for anything else.
func bytesOf(v js.Value) []byte {
	if v.Type() != js.TypeObject || !v.InstanceOf(js.Global().Get("Uint8Array")) {
		return nil
	}
	b := make([]byte, v.Get("length").Int())
	js.CopyBytesToGo(b, v)
	return b
}

// bridge owns the worker and runs on Main's goroutine; JS callbacks only
// queue controls, since a callback that blocks would stall the event loop
// the websocket and fetches need.
type bridge struct {
	ctrl   chan control
	w      *worker.Worker
	cancel context.CancelFunc // ends the running Run; nil when not running
	done   chan error
	paused bool
	failed string // why the worker gave up, shown on the page
	banned string // the coordinator's ban message while banned
	// retry fires when a banned worker asks again (a ban can be lifted);
	// nil when no retry is due.
	retry <-chan time.Time
	cfg   worker.Config // the running worker's, to rebuild it with a new identity
	// backend is what the worker computes on; gpuFailed says when the
	// GPU it uses fails, to move the tab to the CPU.
	backend   computeBackend
	gpuFailed chan error
	toolGPU   *webgpu.Backend // the bench and gradient controls' GPU backend, once opened
	// base holds the counters of workers replaced by an identity change,
	// so the page's totals keep counting.
	base worker.Stats

	lastComputed int64
	lastAt       time.Time
	rate         float64
}

// Main runs the browser worker until the page says stop.
func Main() {
	b := &bridge{ctrl: make(chan control, 64)}
	fn := js.FuncOf(func(_ js.Value, args []js.Value) any {
		if len(args) > 0 {
			select {
			case b.ctrl <- parseControl(args[0]):
			default: // a page flooding controls loses the excess, never blocks
			}
		}
		return nil
	})
	defer fn.Release()
	js.Global().Set("crowdtrainControl", fn)
	if ready := js.Global().Get("crowdtrainReady"); ready.Type() == js.TypeFunction {
		ready.Invoke()
	}
	b.loop()
}

func (b *bridge) loop() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	b.lastAt = time.Now()
	for {
		select {
		case c := <-b.ctrl:
			if !b.handle(c) {
				b.report()
				return
			}
			b.report()
		case err := <-b.done:
			// Run ended by itself: refused, or a setting it cannot use.
			b.cancel, b.done = nil, nil
			if errors.Is(err, worker.ErrBanned) {
				// Not a failure of this tab: say why, and ask again
				// now and then in case the operator lifts the ban.
				b.banned = strings.TrimPrefix(err.Error(), worker.ErrBanned.Error()+": ")
				b.retry = time.After(bannedRetry)
				b.logf("%v; asking again in %v", err, bannedRetry)
			} else if err != nil && !errors.Is(err, context.Canceled) {
				b.failed = err.Error()
				b.logf("worker stopped: %v", err)
				m := map[string]any{"type": "error", "message": "the worker stopped: " + err.Error()}
				if errors.Is(err, worker.ErrJoinToken) {
					// The page shows the coordinator's words at its token field.
					m["code"] = "join_token"
					m["detail"] = strings.TrimPrefix(err.Error(), worker.ErrJoinToken.Error()+": ")
				}
				report(m)
			}
			b.report()
		case <-b.retry:
			b.retry = nil
			if !b.paused {
				b.start()
			}
			b.report()
		case err := <-b.gpuFailed:
			b.toCPU(err)
			b.report()
		case <-tick.C:
			b.report()
		}
	}
}

// handle applies one control and reports whether to keep running.
func (b *bridge) handle(c control) bool {
	switch c.typ {
	case "start":
		if b.w != nil {
			return true
		}
		b.paused = c.paused
		cb, err := openBackend(c.backend)
		if err != nil {
			b.logf("%v", err)
			return true
		}
		if cb.reason != "" {
			b.logf("backend %s: %s", c.backend, cb.reason)
		}
		keepWithin(cb, c.memoryMB)
		b.backend = cb
		b.build(worker.Config{
			Coordinator: c.coordinator, Backend: b.watch(cb), Kind: protocol.KindBrowser, Client: c.client,
			Logf: b.logf, Duty: c.duty, Fetch: fetchBytes, ShardCacheBytes: browserShardCacheBytes,
			VolunteerKey: c.volunteerKey, Name: c.name, Token: c.token,
			Job: c.job, Caps: &protocol.Caps{MemoryMB: c.memoryMB, Data: c.data},
		})
	case "identity":
		// A new name or join token: reconnect with it at once. The
		// hello is the only place the coordinator learns them.
		if b.w == nil {
			return true
		}
		b.stop()
		cfg := b.cfg
		cfg.Name, cfg.Token = c.name, c.token
		b.build(cfg)
	case "job":
		// The volunteer picked a job (or "any"): reconnect pinned to it.
		if b.w == nil {
			return true
		}
		b.stop()
		cfg := b.cfg
		cfg.Job = c.job
		b.build(cfg)
	case "pause":
		b.paused = true
		b.stop()
	case "resume":
		b.paused = false
		b.start()
	case "duty":
		if b.w != nil {
			if err := b.w.SetDuty(c.duty); err != nil {
				b.logf("%v", err)
			}
		}
	case "bench":
		b.bench(c)
	case "gradient":
		b.gradient(c)
	case "stop":
		b.stop()
		b.failed = ""
		return false
	default:
		b.logf("ignoring unknown control %q", c.typ)
	}
	return true
}

// bannedRetry is how long a banned worker waits before asking again.
const bannedRetry = time.Minute

// browserShardCacheBytes is the decoded shards a tab keeps in Go's heap:
// a few, as before; the page's Cache Storage keeps every download, so a
// shard needed again is read from the disk, not the network.
const browserShardCacheBytes = 8 << 20

// build makes the worker from cfg, replacing a stopped one (whose counters
// go on in base), and starts it unless paused.
func (b *bridge) build(cfg worker.Config) {
	if b.w != nil {
		s := b.w.Stats()
		b.base.Examples += s.Examples
		b.base.Computed += s.Computed
		b.base.Accepted += s.Accepted
		b.base.Rejected += s.Rejected
	}
	w, err := worker.New(cfg)
	if err != nil {
		b.failed = err.Error()
		report(map[string]any{"type": "error", "message": err.Error()})
		return
	}
	b.w, b.cfg, b.failed, b.banned, b.retry = w, cfg, "", "", nil
	b.lastComputed = b.base.Computed
	if !b.paused {
		b.start()
	}
}

// bench times training steps (Bench) and reports {type: "bench", ...} or
// an error. It runs on the loop, so the worker must not be training: the
// two would share the one thread and both figures would be wrong.
func (b *bridge) bench(c control) {
	if b.cancel != nil {
		report(map[string]any{"type": "error", "message": "bench: the worker is training; pause it first"})
		return
	}
	cb, err := b.openTool(c.backend)
	if err != nil {
		report(map[string]any{"type": "error", "message": "bench: " + err.Error()})
		return
	}
	r, err := Bench(cb.Backend, c.model, c.batch, c.localSteps, c.rounds, time.Duration(c.seconds*float64(time.Second)), c.x, c.labels)
	if err != nil {
		report(map[string]any{"type": "error", "message": err.Error()})
		return
	}
	rounds := make([]any, len(r.Rounds))
	for i, v := range r.Rounds {
		rounds[i] = v
	}
	report(map[string]any{
		"type": "bench", "model": r.Model, "batch": r.Batch, "kernel": r.Kernel,
		"rounds": rounds, "median": r.Median, "localSteps": r.LocalSteps, "backend": cb.name, "backendReason": cb.reason,
	})
}

// gradient computes one gradient of c.model (parameters from seed 1) on
// the batch c.x, c.labels with the backend c.backend, and reports
// {type: "gradient", backend, lossSum, correct, grad} with grad as
// little-endian float32 bytes: the page's numbers, to be compared with a
// native worker's (web's TestBrowserGradientMatchesNative).
func (b *bridge) gradient(c control) {
	fail := func(err error) { report(map[string]any{"type": "error", "message": "gradient: " + err.Error()}) }
	if b.cancel != nil {
		fail(errors.New("the worker is training; pause it first"))
		return
	}
	var spec nn.ModelSpec
	var err error
	if c.spec != "" {
		err = json.Unmarshal([]byte(c.spec), &spec)
	} else {
		spec, err = nn.Preset(c.model)
	}
	if err != nil {
		fail(err)
		return
	}
	cb, err := b.openTool(c.backend)
	if err != nil {
		fail(err)
		return
	}
	if c.lease != "" {
		b.computeLease(cb, spec, c)
		return
	}
	r, err := Gradient(cb.Backend, spec, c.params, c.x, c.labels)
	if err != nil {
		fail(err)
		return
	}
	m := map[string]any{"type": "gradient", "backend": cb.name, "lossSum": r.LossSum, "correct": r.Correct, "grad": floatsJS(r.Grad)}
	if cb.reason != "" {
		m["backendReason"] = cb.reason
	}
	if r.Output != nil {
		m["output"] = floatsJS(r.Output)
	}
	report(m)
}

// computeLease runs the lease c.lease of spec at c.params on c.x, c.labels
// with cb, as the worker would, and reports {type: "gradient", backend,
// lossSum, correct, grad} with the update as grad.
func (b *bridge) computeLease(cb computeBackend, spec nn.ModelSpec, c control) {
	fail := func(err error) { report(map[string]any{"type": "error", "message": "lease: " + err.Error()}) }
	var l protocol.Lease
	if err := json.Unmarshal([]byte(c.lease), &l); err != nil {
		fail(err)
		return
	}
	model, err := nn.NewModel(spec)
	if err != nil {
		fail(err)
		return
	}
	if len(c.params) != model.NumParams {
		fail(fmt.Errorf("%d parameters, the model has %d", len(c.params), model.NumParams))
		return
	}
	res, err := worker.ComputeLease(cb.Backend, model, l, c.params, c.x, c.labels)
	if err != nil {
		fail(err)
		return
	}
	report(map[string]any{"type": "gradient", "backend": cb.name, "lossSum": res.LossSum, "correct": res.Correct, "grad": floatsJS(res.Update)})
}

// floatsJS is v as little-endian float32 bytes in a Uint8Array.
func floatsJS(v []float32) js.Value {
	buf := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
	}
	a := js.Global().Get("Uint8Array").New(len(buf))
	js.CopyBytesToJS(a, buf)
	return a
}

// watch wraps a GPU backend so that its failure reaches the loop
// (gpuFailed); a CPU backend is used as it is.
func (b *bridge) watch(cb computeBackend) worker.Backend {
	g, ok := cb.Backend.(*webgpu.Backend)
	if !ok {
		b.gpuFailed = nil
		return cb.Backend
	}
	b.gpuFailed = make(chan error, 1)
	return gpuWatch{Backend: g, failed: b.gpuFailed}
}

// toCPU moves the worker off a GPU that failed onto the best CPU backend,
// saying why on the page.
func (b *bridge) toCPU(err error) {
	b.gpuFailed = nil
	if b.w == nil || b.backend.name != BackendWebGPU {
		return
	}
	running := b.cancel != nil
	b.stop()
	closeBackend(b.backend)
	cb, cerr := openCPU(BackendSIMD)
	if cerr != nil {
		b.failed = cerr.Error()
		return
	}
	cb.reason = fmt.Sprintf("the GPU failed while training (%v): training on %s instead", err, cb.name)
	b.logf("%s", cb.reason)
	if b.cfg.Caps != nil {
		keepWithin(cb, b.cfg.Caps.MemoryMB)
	}
	b.backend = cb
	cfg := b.cfg
	cfg.Backend = cb.Backend
	paused := b.paused
	b.paused = paused || !running
	b.build(cfg)
	b.paused = paused
}

// openTool is the backend for the bench and gradient controls: want's,
// with the GPU's kept from one control to the next (compiling its kernels
// takes seconds).
func (b *bridge) openTool(want string) (computeBackend, error) {
	if want == BackendWebGPU && b.toolGPU != nil {
		return computeBackend{Backend: b.toolGPU, name: BackendWebGPU}, nil
	}
	cb, err := openBackend(want)
	if g, ok := cb.Backend.(*webgpu.Backend); ok {
		b.toolGPU = g
	}
	return cb, err
}

// closeBackend frees a GPU backend's memory.
func closeBackend(cb computeBackend) {
	if g, ok := cb.Backend.(*webgpu.Backend); ok {
		g.Close()
	}
}

// start runs the worker loop unless it is running.
func (b *bridge) start() {
	if b.w == nil || b.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.cancel, b.done, b.failed, b.banned, b.retry = cancel, done, "", "", nil
	go func() { done <- b.w.Run(ctx) }()
}

// stop ends the worker loop: it says bye, so the coordinator hands its
// leases to others at once, and waits until it has.
func (b *bridge) stop() {
	if b.cancel == nil {
		return
	}
	b.cancel()
	<-b.done
	b.cancel, b.done = nil, nil
}

func (b *bridge) state(s worker.Stats) string {
	switch {
	case b.w == nil:
		return "loading"
	case b.banned != "":
		return "banned"
	case b.failed != "":
		return "stopped: " + b.failed
	case b.paused:
		return "paused"
	case b.cancel == nil:
		return "stopped"
	case s.Connected && s.Idle:
		return "waiting for work"
	case s.Connected && s.Generating:
		return "generating" // an RL job's rollouts: sampling, not training
	case s.Connected:
		return "training"
	case s.Connects == 0:
		return "connecting"
	default:
		return "reconnecting"
	}
}

func (b *bridge) report() {
	var s worker.Stats
	if b.w != nil {
		s = b.w.Stats()
	}
	s.Examples += b.base.Examples
	s.Computed += b.base.Computed
	s.Accepted += b.base.Accepted
	s.Rejected += b.base.Rejected
	now := time.Now()
	if dt := now.Sub(b.lastAt).Seconds(); dt >= 0.5 {
		inst := float64(s.Computed-b.lastComputed) / dt
		b.rate = 0.6*b.rate + 0.4*inst // smooth the per-task jitter
		b.lastComputed, b.lastAt = s.Computed, now
	}
	if b.paused || b.cancel == nil {
		b.rate = 0
	}
	version := s.Version
	if s.Accepted+s.Rejected == 0 {
		version = -1 // no ack yet: the page shows the job's version instead
	}
	report(map[string]any{
		"type": "stats", "state": b.state(s), "connected": s.Connected,
		"workerId": s.WorkerID, "jobId": s.JobID, "jobName": s.JobName, "version": version,
		"computed": s.Computed, "examples": s.Examples, "accepted": s.Accepted, "rejected": s.Rejected,
		"lastReason": s.LastReason, "rate": b.rate, "banned": b.banned,
		"backend": b.backendName(), "backendReason": b.backend.reason,
	})
}

// backendName is the backend the worker computes on.
func (b *bridge) backendName() string {
	if b.backend.name != "" {
		return b.backend.name
	}
	return "wasm-" + nn.KernelName()
}

func (b *bridge) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	report(map[string]any{"type": "log", "message": msg})
}

// report hands m to worker.js, which adds its cache counters and posts it
// to the page.
func report(m map[string]any) {
	if fn := js.Global().Get("crowdtrainReport"); fn.Type() == js.TypeFunction {
		fn.Invoke(m)
	}
}
