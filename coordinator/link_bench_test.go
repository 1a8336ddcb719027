package coordinator_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testlink"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/worker"
)

// linkConfig is one job of the link benchmark: a mode, its H and an
// update codec. group names the mode and H: its fp32 config is what the
// compressed ones' examples to target are measured against.
type linkConfig struct {
	name, group, codec string
	// model is "" for mnist-mlp (trained to linkTarget accuracy) or
	// "charlm" (trained to linkLossTarget on a prefix of the King James
	// text).
	model string
	// spec is the YAML after name and model (the target, eval_every and
	// the data are added to every config).
	spec string
}

// linkConfigs are the benchmark's jobs; the first is the baseline that
// bytes per example are measured against (async fp32 H = 1, every key
// at its default: today's job). The compressed ones also serve fp16
// snapshots. Sync is rounds of 3 with one backup (the 4 workers all
// busy); diloco is rounds of 4 with inner AdamW, as in bench-modes.
var linkConfigs = func() []linkConfig {
	cs := []linkConfig{{name: "async-fp32-H1", group: "async H=1", codec: "fp32"}}
	codec := func(c string) string {
		if c == "fp32" {
			return ""
		}
		return "update_codec: " + c + "\nsnapshot_codec: fp16\n"
	}
	for _, c := range []string{"fp32", "fp16", "int8", "topk"} {
		cs = append(cs, linkConfig{name: "async-dyn-" + c, group: "async dynamic H", codec: c,
			spec: "dynamic_local_steps: true\n" + codec(c)})
	}
	// With max_local_steps at its default, 16, a worker's H cannot rise
	// far enough to bring fp32's communication on this link under
	// max_comm_fraction; these let it reach 64.
	for _, c := range []string{"fp32", "int8", "topk"} {
		cs = append(cs, linkConfig{name: "async-dyn64-" + c, group: "async dynamic H<=64", codec: c,
			spec: "dynamic_local_steps: true\nmax_local_steps: 64\n" + codec(c)})
	}
	for _, c := range []string{"fp32", "fp16", "int8", "topk"} {
		cs = append(cs, linkConfig{name: "sync-" + c, group: "sync K=3+1", codec: c,
			spec: "mode: sync\nround_size: 3\nbackup_workers: 1\n" + codec(c)})
	}
	for _, h := range []int{16, 32, 64} {
		codecs := []string{"fp32", "int8", "topk"}
		if h == 32 {
			codecs = []string{"fp32", "fp16", "int8", "topk"}
		}
		for _, c := range codecs {
			cs = append(cs, linkConfig{name: fmt.Sprintf("diloco-H%d-%s", h, c), group: fmt.Sprintf("diloco H=%d", h), codec: c,
				spec: fmt.Sprintf("mode: diloco\nlocal_steps: %d\nround_size: 4\ninner_optimizer:\n  type: adamw\n", h) + codec(c)})
		}
	}
	// The transformer: 875,520 parameters (3.5 MB in fp32) and a step of
	// 0.3 to 1 s of one thread (batch 32), so that the link costs less of
	// a task's time than mnist-mlp's 1 to 3 ms steps let it. Its own
	// baseline is async fp32 H = 1 with the charlm job's optimizer; DiLoCo
	// keeps its outer Nesterov momentum and takes the charlm job's AdamW
	// as its inner optimizer.
	cs = append(cs, linkConfig{name: "charlm-async-fp32-H1", group: "charlm async H=1", codec: "fp32", model: "charlm",
		spec: "outer_optimizer: {type: adamw, lr: 0.003, weight_decay: 0.01, clip_norm: 1}\n"})
	for _, c := range []string{"int8", "fp32"} {
		cs = append(cs, linkConfig{name: "charlm-diloco-H16-" + c, group: "charlm diloco H=16", codec: c, model: "charlm",
			spec: "mode: diloco\nlocal_steps: 16\nround_size: 4\ninner_optimizer:\n  type: adamw\n  lr: 0.003\n  weight_decay: 0.01\n  clip_norm: 1\n" + codec(c)})
	}
	return cs
}()

// linkLossTarget is the validation loss (nats per byte) the charlm
// configs train to, and linkCharLMBytes the prefix of the King James
// text they train on (an epoch of about 7,600 windows of 128, so that
// the loss target, not the epochs, ends a run; 2% held out, about 160
// windows, so that an evaluation costs well under a second).
const (
	linkLossTarget  = 2.6
	linkCharLMBytes = 1 << 20
)

// isBaseline says whether c is the config that bytes per example of its
// model are measured against: the model's first.
func (c linkConfig) isBaseline() bool {
	for _, x := range linkConfigs {
		if x.model == c.model {
			return x.name == c.name
		}
	}
	return false
}

// target is the config's goal in words.
func (c linkConfig) target() string {
	if c.model == "charlm" {
		return fmt.Sprintf("loss %.2f", linkLossTarget)
	}
	return fmt.Sprintf("%.0f%%", 100*linkTarget)
}

// linkJobView is the part of the job's JSON the benchmark reads. The
// byte counters are the coordinator's own (bytes_in: result frames
// received; bytes_out: snapshots and deltas served; shard_bytes_out:
// shards served); a coordinator without them reads 0.
type linkJobView struct {
	State           string                  `json:"state"`
	Reason          string                  `json:"reason"`
	Epoch           int                     `json:"epoch"`
	Version         int64                   `json:"version"`
	ExamplesSeen    int64                   `json:"examples_seen"`
	UpdatesApplied  int64                   `json:"updates_applied"`
	UpdatesRejected int64                   `json:"updates_rejected"`
	Rejections      map[string]int64        `json:"rejections"`
	Eval            *coordinator.EvalResult `json:"eval"`
	DoneAt          *time.Time              `json:"done_at"`
	BytesIn         int64                   `json:"bytes_in"`
	BytesOut        int64                   `json:"bytes_out"`
	ShardBytesOut   int64                   `json:"shard_bytes_out"`
	Compression     float64                 `json:"compression"`
}

// linkWorkerView is the part of a worker's JSON the benchmark reads (0
// where the coordinator does not report it).
type linkWorkerView struct {
	LocalSteps   int     `json:"local_steps"`
	CommFraction float64 `json:"comm_fraction"`
}

// linkOutcome is one run: a config over one network.
type linkOutcome struct {
	cfg     linkConfig
	net     string // "loopback" or "link"
	view    linkJobView
	elapsed time.Duration
	reached bool
	// capped is set when the run hit LINK_TIMEOUT.
	capped bool
	// tcpDown and tcpUp are every byte that crossed TCP between the
	// workers and the coordinator (websocket, snapshots, shards), counted
	// by the harness in front of the coordinator.
	tcpDown, tcpUp int64
	// workers is the last worker list seen while the job ran.
	workers []linkWorkerView
}

func (o linkOutcome) accuracy() float64 {
	if o.view.Eval == nil {
		return 0
	}
	return o.view.Eval.Accuracy
}

// metric is the last evaluation's score in words: the accuracy, or a
// charlm run's loss.
func (o linkOutcome) metric() string {
	if o.cfg.model == "charlm" {
		if o.view.Eval == nil {
			return "no evaluation"
		}
		return fmt.Sprintf("loss %.4f", o.view.Eval.Loss)
	}
	return fmt.Sprintf("%.4f", o.accuracy())
}

// atTarget says whether the last evaluation met the config's target.
func (o linkOutcome) atTarget() bool {
	if o.cfg.model == "charlm" {
		return o.view.Eval != nil && o.view.Eval.Loss <= linkLossTarget
	}
	return o.accuracy() >= linkTarget
}

// bytesPerExample is (bytes_in+bytes_out)/examples_seen, 0 when either
// is unknown.
func (o linkOutcome) bytesPerExample() float64 {
	if o.view.ExamplesSeen == 0 {
		return 0
	}
	return float64(o.view.BytesIn+o.view.BytesOut) / float64(o.view.ExamplesSeen)
}

func (o linkOutcome) tcpPerExample() float64 {
	if o.view.ExamplesSeen == 0 {
		return 0
	}
	return float64(o.tcpDown+o.tcpUp) / float64(o.view.ExamplesSeen)
}

// linkTarget is the accuracy every run trains to.
const linkTarget = 0.97

// envFloat reads a number > 0 (what it means: what) from the
// environment variable name, or returns def.
func envFloat(b *testing.B, name string, def float64, what string) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f > 1e6 {
		b.Fatalf("%s is %s, a number > 0; got %q", name, what, v)
	}
	return f
}

// linkProfile is testlink.Home with LINK_DOWN_MBPS, LINK_UP_MBPS and
// LINK_RTT_MS applied.
func linkProfile(b *testing.B) testlink.Profile {
	p := testlink.Home
	p.DownBps = envFloat(b, "LINK_DOWN_MBPS", p.DownBps/1e6, "the download bandwidth in Mbit/s") * 1e6
	p.UpBps = envFloat(b, "LINK_UP_MBPS", p.UpBps/1e6, "the upload bandwidth in Mbit/s") * 1e6
	p.RTT = time.Duration(envFloat(b, "LINK_RTT_MS", float64(p.RTT)/1e6, "the round trip in ms") * 1e6)
	return p
}

// BenchmarkLinkTo97 trains mnist-mlp to 97% in each mode and update
// codec (linkConfigs) with 4 local native workers of one thread each,
// first on loopback and then with each worker behind its own simulated
// home link (internal/testlink: 50 Mbit/s down, 10 up, 40 ms RTT ±5 ms;
// LINK_DOWN_MBPS, LINK_UP_MBPS and LINK_RTT_MS change it), and writes
// the table to LINK_OUT (default test-artifacts/link.md at the
// repository root) after every run. LINK_CONFIGS (comma-separated
// names) selects configs, LINK_NETS (loopback,link) the networks;
// LINK_TIMEOUT caps each run (default 6m; a capped run is "not reached"
// with the accuracy it got) and LINK_EPOCHS each job (default 20). Run
// it with -benchtime 1x (make bench-link). docs/BENCHMARKS.md, "Over a
// home link", says what each column means.
func BenchmarkLinkTo97(b *testing.B) {
	var names []string
	for _, c := range linkConfigs {
		names = append(names, c.name)
	}
	var cfgs []linkConfig
	for _, n := range envList("LINK_CONFIGS", names) {
		i := slices.Index(names, n)
		if i < 0 {
			b.Fatalf("LINK_CONFIGS: unknown config %q; the configs are %s", n, strings.Join(names, ","))
		}
		cfgs = append(cfgs, linkConfigs[i])
	}
	nets := envList("LINK_NETS", []string{"loopback", "link"})
	for _, n := range nets {
		if n != "loopback" && n != "link" {
			b.Fatalf("LINK_NETS: unknown network %q: want loopback or link", n)
		}
	}
	profile := linkProfile(b)
	timeout := 6 * time.Minute
	if v := os.Getenv("LINK_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("LINK_TIMEOUT must be a duration such as 6m, got %q", v)
		}
		timeout = d
	}
	epochs := envInt(b, "LINK_EPOCHS", linkEpochs, 1, "every job's max_epochs")
	path := os.Getenv("LINK_OUT")
	if path == "" {
		path = filepath.Join("..", "test-artifacts", "link.md")
	}
	var outs []linkOutcome
	write := func() {
		head := fmt.Sprintf("Link benchmark, mnist-mlp to %.0f%% and charlm to loss %.2f, 4 native workers x 1 thread, %s; link: %v per worker; run cap %v, max_epochs %d; GOMAXPROCS %d\n\n",
			100*linkTarget, linkLossTarget, time.Now().UTC().Format("2006-01-02 15:04 MST"), profile, timeout, epochs, runtime.GOMAXPROCS(0))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(head+linkTable(outs)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range cfgs {
		for _, n := range nets {
			b.Run(c.name+"/"+n, func(b *testing.B) {
				var o linkOutcome
				for range b.N {
					o = runLinkConfig(b, c, n, profile, timeout, epochs)
				}
				outs = append(outs, o)
				// Written after every run, so that a long run interrupted
				// keeps what it measured.
				write()
				r := linkRatios(outs, o)
				reached := 0.0
				if o.reached {
					reached = 1
					b.ReportMetric(o.elapsed.Seconds(), "s-to-target")
				}
				b.ReportMetric(reached, "reached")
				b.ReportMetric(o.accuracy(), "accuracy")
				if o.view.Eval != nil {
					b.ReportMetric(o.view.Eval.Loss, "loss")
				}
				b.ReportMetric(float64(o.view.ExamplesSeen), "examples")
				b.ReportMetric(float64(o.view.BytesIn), "bytes_in")
				b.ReportMetric(float64(o.view.BytesOut), "bytes_out")
				b.ReportMetric(float64(o.view.ShardBytesOut), "shard_bytes_out")
				b.ReportMetric(o.bytesPerExample(), "B/example")
				b.ReportMetric(o.tcpPerExample(), "tcp-B/example")
				if r.linkVsLoopback > 0 {
					b.ReportMetric(r.linkVsLoopback, "link/loopback")
				}
				if r.bytesVsBaseline > 0 {
					b.ReportMetric(r.bytesVsBaseline, "B/example-vs-baseline")
				}
				if r.examplesVsFP32 > 0 {
					b.ReportMetric(r.examplesVsFP32, "examples-vs-fp32")
				}
			})
		}
	}
	// Printed, not logged: a benchmark's log is cut to its first lines.
	fmt.Printf("link table written to %s:\n%s", path, linkTable(outs))
}

// linkEpochs is every job's max_epochs unless LINK_EPOCHS says: above
// the preset's 10, so that LINK_TIMEOUT is what stops a slow job (async
// with H up to 64 needs about 9 epochs on loopback).
const linkEpochs = 20

// linkSpec is config c's job spec, trained for at most epochs epochs;
// text is the file a charlm config trains on.
func linkSpec(c linkConfig, epochs int, text string) string {
	if c.model == "charlm" {
		// The charlm job's batch, and leases long enough for 16 steps of
		// 32 windows on a worker that shares its core.
		return fmt.Sprintf("name: link-%s\nmodel: charlm\ndataset: {type: text, path: %q, val_fraction: 0.02}\n"+
			"batch_size: 32\nlease_timeout: 3m\n"+
			"target_loss: %v\neval_every: 40\nmax_epochs: %d\n%s",
			c.name, text, linkLossTarget, epochs, c.spec)
	}
	return fmt.Sprintf("name: link-%s\nmodel: mnist-mlp\ntarget_accuracy: %v\neval_every: 100\nmax_epochs: %d\n%s", c.name, linkTarget, epochs, c.spec)
}

// linkCharLMText writes the first linkCharLMBytes of the King James text
// (Debian's bible-kjv) to a file in dir and returns its path; tb skips
// without the program.
func linkCharLMText(tb testing.TB, dir string) string {
	text, err := dataset.BibleText()
	if err != nil {
		tb.Skipf("the charlm configs need the King James text: %v; %s", err, dataset.BibleFix)
	}
	if len(text) > linkCharLMBytes {
		text = text[:linkCharLMBytes]
	}
	path := filepath.Join(dir, "kjv-prefix.txt")
	if err := os.WriteFile(path, text, 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// runLinkConfig runs config c once over network n ("loopback", or each
// worker through its own link of profile p) until the job ends or
// timeout passes, the job trained for at most epochs epochs.
func runLinkConfig(b *testing.B, c linkConfig, n string, p testlink.Profile, timeout time.Duration, epochs int) linkOutcome {
	b.Helper()
	text := ""
	if c.model == "charlm" {
		text = linkCharLMText(b, b.TempDir())
	}
	s, err := jobspec.Parse([]byte(linkSpec(c, epochs, text)))
	if err != nil {
		b.Fatalf("%s: %v", c.name, err)
	}
	g := newTestGridWith(b, s, func(cfg *coordinator.Config) { cfg.LoadData = dataset.Load })
	defer g.close()
	counter := startTCPCounter(b, g.http.Listener.Addr().String())
	out := linkOutcome{cfg: c, net: n}
	start := time.Now()
	for i := range 4 {
		addr := counter.addr()
		if n == "link" {
			addr = testlink.Start(b, addr, p).Addr
		}
		g.addWorkerWith(1, nil, func(cfg *worker.Config) {
			cfg.Coordinator = "ws://" + addr + "/ws"
			// Each worker is a volunteer of its own, as on a real grid.
			cfg.VolunteerKey = fmt.Sprintf("link-bench-volunteer-%02d", i)
		})
	}
	deadline := start.Add(timeout)
	var lastWorkers time.Time
	for {
		var v linkJobView
		if code := g.getJSON("/api/v1/jobs/"+g.job.ID, &v); code != http.StatusOK {
			b.Fatalf("GET job: status %d", code)
		}
		if time.Since(lastWorkers) >= time.Second && v.State == coordinator.StateRunning {
			var ws []linkWorkerView
			if g.getJSON("/api/v1/workers", &ws) == http.StatusOK && len(ws) > 0 {
				out.workers = ws
			}
			lastWorkers = time.Now()
		}
		if v.State != coordinator.StateRunning && v.State != coordinator.StateFinishing {
			out.view, out.elapsed = v, time.Since(start)
			if v.DoneAt != nil && v.DoneAt.After(start) {
				out.elapsed = v.DoneAt.Sub(start)
			}
			break
		}
		if time.Now().After(deadline) {
			out.view, out.elapsed, out.capped = v, time.Since(start), true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	out.reached = !out.capped && out.view.State == coordinator.StateDone && out.atTarget()
	g.close()
	counter.close()
	out.tcpDown, out.tcpUp = counter.down.Load(), counter.up.Load()
	fmt.Printf("%s over %s: %s (%s) %s in %.1fs, epoch %d, version %d, examples %d, applied %d, rejected %d %v; bytes_in %d, bytes_out %d, shard_bytes_out %d; TCP down %d, up %d\n",
		c.name, n, out.view.State, out.view.Reason, out.metric(), out.elapsed.Seconds(), out.view.Epoch, out.view.Version, out.view.ExamplesSeen,
		out.view.UpdatesApplied, out.view.UpdatesRejected, out.view.Rejections, out.view.BytesIn, out.view.BytesOut, out.view.ShardBytesOut, out.tcpDown, out.tcpUp)
	return out
}

// linkRatio holds one outcome's ratios to the others (0: unknown).
type linkRatio struct {
	// linkVsLoopback is the link run's time over its loopback run's, both
	// to target; linkAtLeast is set instead when the link run was capped
	// (its time is then at least linkAtLeast times loopback's).
	linkVsLoopback, linkAtLeast float64
	// bytesVsBaseline is this run's bytes per example over the
	// baseline's (async fp32 H = 1, on loopback where it ran).
	bytesVsBaseline float64
	// examplesVsFP32 is this run's examples to target over those of the
	// fp32 config of its group on the same network, both reached.
	examplesVsFP32 float64
}

func linkRatios(outs []linkOutcome, o linkOutcome) linkRatio {
	var r linkRatio
	find := func(keep func(linkOutcome) bool) (linkOutcome, bool) {
		for _, x := range outs {
			if keep(x) {
				return x, true
			}
		}
		return linkOutcome{}, false
	}
	if o.net == "link" {
		if lo, ok := find(func(x linkOutcome) bool { return x.cfg.name == o.cfg.name && x.net == "loopback" && x.reached }); ok {
			switch {
			case o.reached:
				r.linkVsLoopback = o.elapsed.Seconds() / lo.elapsed.Seconds()
			case o.capped:
				r.linkAtLeast = o.elapsed.Seconds() / lo.elapsed.Seconds()
			}
		}
	}
	isBase := func(x linkOutcome) bool { return x.cfg.model == o.cfg.model && x.cfg.isBaseline() }
	base, ok := find(func(x linkOutcome) bool { return isBase(x) && x.net == "loopback" })
	if !ok {
		base, ok = find(isBase)
	}
	if ok && base.bytesPerExample() > 0 && o.bytesPerExample() > 0 {
		r.bytesVsBaseline = o.bytesPerExample() / base.bytesPerExample()
	}
	if o.reached && o.cfg.codec != "fp32" {
		if f, ok := find(func(x linkOutcome) bool {
			return x.cfg.group == o.cfg.group && x.cfg.codec == "fp32" && x.net == o.net && x.reached
		}); ok && f.view.ExamplesSeen > 0 {
			r.examplesVsFP32 = float64(o.view.ExamplesSeen) / float64(f.view.ExamplesSeen)
		}
	}
	return r
}

// linkTable writes the outcomes as markdown, one row a run.
func linkTable(outs []linkOutcome) string {
	var b strings.Builder
	b.WriteString("| config | mode, H | codec | network | result | time to target | link / loopback | examples | examples vs fp32 | results | bytes_in | bytes_out | shard_bytes_out | B / example | vs the model's async fp32 H=1 | compression | TCP B / example | H (comm share) at the end |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	dash := func(ok bool, format string, a ...any) string {
		if !ok {
			return "—"
		}
		return fmt.Sprintf(format, a...)
	}
	for _, o := range outs {
		r := linkRatios(outs, o)
		result := fmt.Sprintf("reached %s, %s", o.cfg.target(), o.metric())
		switch {
		case o.capped:
			result = fmt.Sprintf("not reached: %s at the %v cap, epoch %d", o.metric(), o.elapsed.Round(time.Second), o.view.Epoch)
		case !o.reached:
			result = fmt.Sprintf("not reached: %s, %s (%s)", o.metric(), o.view.State, o.view.Reason)
		}
		ratio := dash(r.linkVsLoopback > 0, "%.2fx", r.linkVsLoopback)
		if r.linkAtLeast > 0 {
			ratio = fmt.Sprintf("> %.1fx", r.linkAtLeast)
		}
		vsBase := dash(r.bytesVsBaseline > 0, "%.3gx", r.bytesVsBaseline)
		if r.bytesVsBaseline > 0 && r.bytesVsBaseline < 1 {
			vsBase = fmt.Sprintf("%.3gx fewer", 1/r.bytesVsBaseline)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %d | %s | %d | %d | %d | %d | %s | %s | %s | %s | %s |\n",
			o.cfg.name, o.cfg.group, o.cfg.codec, o.net, result,
			dash(o.reached, "%.1f s", o.elapsed.Seconds()), ratio,
			o.view.ExamplesSeen, dash(r.examplesVsFP32 > 0, "%.2fx", r.examplesVsFP32), o.view.UpdatesApplied,
			o.view.BytesIn, o.view.BytesOut, o.view.ShardBytesOut,
			dash(o.bytesPerExample() > 0, "%.0f", o.bytesPerExample()), vsBase,
			dash(o.view.Compression > 0, "%.1fx", o.view.Compression),
			dash(o.tcpPerExample() > 0, "%.0f", o.tcpPerExample()), linkWorkersH(o.workers))
	}
	return b.String()
}

// linkWorkersH describes the workers' H and communication shares: "16
// (0.05..0.08)", "—" where the coordinator does not report them.
func linkWorkersH(ws []linkWorkerView) string {
	var hs []int
	var cf []float64
	for _, w := range ws {
		if w.LocalSteps > 0 {
			hs = append(hs, w.LocalSteps)
		}
		cf = append(cf, w.CommFraction)
	}
	if len(hs) == 0 {
		return "—"
	}
	span := func(lo, hi string) string {
		if lo == hi {
			return lo
		}
		return lo + ".." + hi
	}
	s := span(strconv.Itoa(slices.Min(hs)), strconv.Itoa(slices.Max(hs)))
	if slices.Max(cf) > 0 {
		s += " (" + span(fmt.Sprintf("%.2f", slices.Min(cf)), fmt.Sprintf("%.2f", slices.Max(cf))) + ")"
	}
	return s
}

// tcpCounter forwards TCP connections to an upstream address and counts
// the bytes each way: down (to the client) and up.
type tcpCounter struct {
	ln       net.Listener
	upstream string
	down, up atomic.Int64
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
	once     sync.Once
}

// startTCPCounter listens on 127.0.0.1 and forwards to upstream until tb
// ends.
func startTCPCounter(tb testing.TB, upstream string) *tcpCounter {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c := &tcpCounter{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	c.wg.Add(1)
	go c.serve()
	tb.Cleanup(c.close)
	return c
}

func (c *tcpCounter) addr() string { return c.ln.Addr().String() }

// track adds conn to the open ones, or reports false when the counter
// is closed.
func (c *tcpCounter) track(conns ...net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	for _, x := range conns {
		c.conns[x] = struct{}{}
	}
	return true
}

func (c *tcpCounter) forget(conns ...net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range conns {
		delete(c.conns, x)
		x.Close()
	}
}

func (c *tcpCounter) serve() {
	defer c.wg.Done()
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", c.upstream)
		if err != nil {
			client.Close()
			continue
		}
		if !c.track(client, server) {
			client.Close()
			server.Close()
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			done := make(chan struct{})
			go func() {
				copyCounting(server, client, &c.up)
				close(done)
			}()
			copyCounting(client, server, &c.down)
			// Either side ending ends the connection.
			c.forget(client, server)
			<-done
		}()
	}
}

// copyCounting copies src to dst until either fails, adding the bytes
// written to n; it closes both when done, so that the other direction
// ends too.
func copyCounting(dst, src net.Conn, n *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			w, werr := dst.Write(buf[:k])
			n.Add(int64(w))
			if werr != nil {
				break
			}
		}
		if err != nil {
			// EOF, a reset or a closed connection: all end it.
			break
		}
	}
	dst.Close()
	src.Close()
}

// close ends every connection and waits for the counts to settle.
func (c *tcpCounter) close() {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		for x := range c.conns {
			x.Close()
		}
		c.mu.Unlock()
		c.ln.Close()
		c.wg.Wait()
	})
}

// The counter forwards every byte both ways and counts each direction
// apart.
func TestTCPCounterCounts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const up, down = 300_000, 1_000_000
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, up)
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		_, _ = c.Write(make([]byte, down))
	}()
	counter := startTCPCounter(t, ln.Addr().String())
	c, err := net.Dial("tcp", counter.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(make([]byte, up)); err != nil {
		t.Fatal(err)
	}
	got, err := io.Copy(io.Discard, c)
	if err != nil || got != down {
		t.Fatalf("read %d bytes through the counter (%v), want %d", got, err, down)
	}
	counter.close()
	if u, d := counter.up.Load(), counter.down.Load(); u != up || d != down {
		t.Fatalf("counted %d up and %d down, want %d and %d", u, d, up, down)
	}
}

// The ratios pair each run with the right reference: its own loopback
// run, the loopback baseline, the fp32 config of its group on the same
// network; a capped link run gets a lower bound.
func TestLinkRatios(t *testing.T) {
	cfg := func(name string) linkConfig {
		i := slices.IndexFunc(linkConfigs, func(c linkConfig) bool { return c.name == name })
		if i < 0 {
			t.Fatalf("no config %q", name)
		}
		return linkConfigs[i]
	}
	run := func(name, net string, secs float64, examples, bytes int64, reached bool) linkOutcome {
		return linkOutcome{cfg: cfg(name), net: net, elapsed: time.Duration(secs * float64(time.Second)), reached: reached, capped: !reached,
			view: linkJobView{ExamplesSeen: examples, BytesIn: bytes / 2, BytesOut: bytes - bytes/2}}
	}
	outs := []linkOutcome{
		run("async-fp32-H1", "loopback", 10, 100_000, 3_000_000_000, true),
		run("async-fp32-H1", "link", 360, 50_000, 1_500_000_000, false),
		run("diloco-H16-fp32", "loopback", 20, 200_000, 400_000_000, true),
		run("diloco-H16-fp32", "link", 30, 220_000, 440_000_000, true),
		run("diloco-H16-int8", "link", 33, 242_000, 121_000_000, true),
		// charlm's bytes are measured against charlm's own baseline.
		run("charlm-async-fp32-H1", "loopback", 100, 10_000, 2_000_000_000, true),
		run("charlm-diloco-H16-int8", "link", 200, 10_000, 70_000_000, true),
	}
	for _, c := range []struct {
		i    int
		want linkRatio
	}{
		{0, linkRatio{bytesVsBaseline: 1}},
		{1, linkRatio{linkAtLeast: 36, bytesVsBaseline: 1}},
		{3, linkRatio{linkVsLoopback: 1.5, bytesVsBaseline: 2000.0 / 30000}},
		{4, linkRatio{bytesVsBaseline: 500.0 / 30000, examplesVsFP32: 1.1}},
		{5, linkRatio{bytesVsBaseline: 1}},
		{6, linkRatio{bytesVsBaseline: 7000.0 / 200000}},
	} {
		got := linkRatios(outs, outs[c.i])
		near := func(a, b float64) bool { return a == b || (a-b)/b < 1e-9 && (b-a)/b < 1e-9 }
		if !near(got.linkVsLoopback, c.want.linkVsLoopback) || !near(got.linkAtLeast, c.want.linkAtLeast) ||
			!near(got.bytesVsBaseline, c.want.bytesVsBaseline) || !near(got.examplesVsFP32, c.want.examplesVsFP32) {
			t.Errorf("%s over %s: ratios %+v, want %+v", outs[c.i].cfg.name, outs[c.i].net, got, c.want)
		}
	}
	table := linkTable(outs)
	for _, want := range []string{"> 36.0x", "1.50x", "1.10x", "60x fewer", "not reached", "28.6x fewer", "reached loss 2.60"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
}

// Every config of the link benchmark is a valid job with the codec its
// name says, and names are unique.
func TestLinkConfigsParse(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range linkConfigs {
		if seen[c.name] {
			t.Errorf("config %q twice", c.name)
		}
		seen[c.name] = true
		s, err := jobspec.Parse([]byte(linkSpec(c, linkEpochs, "kjv-prefix.txt")))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if s.UpdateCodec != c.codec || !strings.HasSuffix(c.name, "-"+c.codec) && !strings.Contains(c.name, "-"+c.codec+"-") {
			t.Errorf("%s: update_codec %q, config codec %q", c.name, s.UpdateCodec, c.codec)
		}
		if c.model == "charlm" {
			if s.ModelPreset != "charlm" || s.TargetLoss != linkLossTarget || s.MaxEpochs != linkEpochs || !strings.HasPrefix(c.name, "charlm-") {
				t.Errorf("%s: model %q, target_loss %v, max_epochs %d; want charlm, %v and %d", c.name, s.ModelPreset, s.TargetLoss, s.MaxEpochs, linkLossTarget, linkEpochs)
			}
			continue
		}
		if s.TargetAccuracy != linkTarget || s.MaxEpochs != linkEpochs {
			t.Errorf("%s: target_accuracy %v, max_epochs %d; want %v and %d", c.name, s.TargetAccuracy, s.MaxEpochs, linkTarget, linkEpochs)
		}
	}
	if linkConfigs[0].name != "async-fp32-H1" || linkConfigs[0].spec != "" {
		t.Errorf("the first config, the baseline, is %+v; want today's default job", linkConfigs[0])
	}
}
