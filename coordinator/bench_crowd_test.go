package coordinator_test

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// crowdCell is one cell of the crowd benchmark: a preset in a mode, with
// its runs for each crowd size.
type crowdCell struct {
	preset, mode string
	runs         map[int]crowdRun // by workers
}

// crowdRun is one training to the preset's target.
type crowdRun struct {
	reached  bool
	elapsed  time.Duration
	examples int64
	versions int64
	state    string
	// refused and results: honest results refused for a reason other
	// than late, stale or not_running, of all results answered.
	refused, results int64
}

// crowdTargets are the targets of the benchmark: each preset's own,
// 3.0 bits per character (2.08 nats) for charlm, and a validation loss
// of 5.0 nats per token for gpt-small (from ln 4096 = 8.3 at random).
var crowdTargets = map[string]string{
	"mnist-mlp":   "target_accuracy: 0.97\n",
	"mnist-cnn":   "target_accuracy: 0.98\n",
	"fashion-cnn": "target_accuracy: 0.88\n",
	"charlm":      "target_loss: 2.08\n",
	"gpt-small":   "target_loss: 5.0\n",
}

// crowdSpec is preset in mode, sized for n workers: a round holds one
// result of each (sync, diloco), each run stops at the target or after
// a few epochs.
func crowdSpec(tb testing.TB, preset, mode string, n int) (jobspec.Spec, func(*coordinator.Config)) {
	tb.Helper()
	y := fmt.Sprintf("name: crowd-%s-%s\nmodel: %s\neval_every: 50\nmax_epochs: 5\n%s", preset, mode, preset, crowdTargets[preset])
	if rate := os.Getenv("CROWD_SPOT"); rate != "" {
		y += "spot_check: " + rate + "\n"
	}
	switch mode {
	case "async":
	case "sync", "diloco":
		y += fmt.Sprintf("mode: %s\nround_size: %d\nround_timeout: 60s\n", mode, n)
	default:
		tb.Fatalf("unknown mode %q", mode)
	}
	// The preset's outer optimizer where it steps on gradients (async,
	// sync); DiLoCo's outer Nesterov on the deltas otherwise.
	outer := map[string]string{
		"mnist-cnn": "{type: adam, lr: 0.002}", "fashion-cnn": "{type: adam, lr: 0.002}",
		"charlm":    "{type: adamw, lr: 0.003, weight_decay: 0.01, clip_norm: 1}",
		"gpt-small": "{type: adamw, lr: 0.001, weight_decay: 0.01, clip_norm: 1}",
	}[preset]
	if outer != "" && mode != "diloco" {
		y += "outer_optimizer: " + outer + "\n"
	}
	var edit func(*coordinator.Config)
	switch preset {
	case "fashion-cnn":
		y += "dataset: fashion-mnist\n"
		edit = func(cfg *coordinator.Config) { cfg.LoadData = dataset.Load }
	case "charlm":
		text, err := dataset.BibleText()
		if err != nil {
			tb.Skipf("charlm trains on the King James text: %v; %s", err, dataset.BibleFix)
		}
		path := filepath.Join(tb.TempDir(), "kjv.txt")
		if err := os.WriteFile(path, text, 0o644); err != nil {
			tb.Fatal(err)
		}
		// The preset's batch, evaluated every 25 versions, on one epoch of
		// the text at most.
		y = strings.Replace(y, "eval_every: 50\nmax_epochs: 5\n", "eval_every: 25\nmax_epochs: 1\n", 1)
		y += fmt.Sprintf("dataset: {type: text, path: %q, val_fraction: 0.02}\nbatch_size: 32\n", path)
		edit = func(cfg *coordinator.Config) { cfg.LoadData = dataset.Load }
	case "gpt-small":
		// The preset's tokenizer, batch and optimizer on a tree of Go
		// source (CROWD_GO_DATA, default the toolchain's src/net: about
		// 4 MB, where the preset's go-source is 88 MB), evaluated every 25
		// versions.
		dir := cmp.Or(os.Getenv("CROWD_GO_DATA"), filepath.Join(runtime.GOROOT(), "src", "net"))
		y = strings.Replace(y, "eval_every: 50\n", "eval_every: 25\n", 1)
		y += fmt.Sprintf("dataset: {type: text, path: %q, glob: \"**/*.go\", val_fraction: 0.02}\ntokenizer: {type: bpe, vocab: 4096}\nbatch_size: 16\n", dir)
		edit = func(cfg *coordinator.Config) { cfg.LoadData = dataset.Load }
	}
	s, err := jobspec.Parse([]byte(y))
	if err != nil {
		tb.Fatalf("%s/%s: %v\n%s", preset, mode, err, y)
	}
	return s, edit
}

// BenchmarkCrowd measures the crowd's speed-up (make bench-crowd): each
// preset in each mode, with 1, 2 and (where the machine has 4 cores) 4
// native workers of one thread each (each a volunteer of its own), to
// the preset's target; it writes
// time and examples to the target and the speed-up over one worker to
// CROWD_OUT (default test-artifacts/crowd.md), with the share of honest
// results the defences refused (any reason but late, stale and
// not_running). CROWD_PRESETS, CROWD_MODES and CROWD_WORKERS
// (comma-separated) select a subset; CROWD_TIMEOUT is a run's limit
// (default 10m); CROWD_SPOT sets spot_check (default: the job's). Run it
// with -benchtime 1x.
func BenchmarkCrowd(b *testing.B) {
	presets := envList("CROWD_PRESETS", []string{"mnist-mlp", "mnist-cnn", "fashion-cnn", "charlm", "gpt-small"})
	modes := envList("CROWD_MODES", []string{"async", "sync", "diloco"})
	sizes := []int{1, 2}
	if runtime.NumCPU() >= 4 {
		sizes = append(sizes, 4)
	}
	if ws := envList("CROWD_WORKERS", nil); len(ws) > 0 {
		sizes = sizes[:0]
		for _, w := range ws {
			var n int
			if _, err := fmt.Sscan(w, &n); err != nil || n < 1 {
				b.Fatalf("CROWD_WORKERS: %q is not a worker count", w)
			}
			sizes = append(sizes, n)
		}
	}
	timeout := 10 * time.Minute
	if s := os.Getenv("CROWD_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("CROWD_TIMEOUT: %v", err)
		}
		timeout = d
	}
	path := os.Getenv("CROWD_OUT")
	if path == "" {
		path = filepath.Join("..", "test-artifacts", "crowd.md")
	}
	var cells []*crowdCell
	write := func() {
		head := fmt.Sprintf("Crowd speed-up, %s, %d CPUs, native workers of one thread, run limit %v, spot_check %s\n\n",
			time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), timeout, cmp.Or(os.Getenv("CROWD_SPOT"), "default"))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(head+crowdTable(cells, sizes)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		for _, preset := range presets {
			if crowdTargets[preset] == "" {
				b.Fatalf("CROWD_PRESETS: no target for %q (want one of mnist-mlp, mnist-cnn, fashion-cnn, charlm, gpt-small)", preset)
			}
			for _, mode := range modes {
				c := &crowdCell{preset: preset, mode: mode, runs: map[int]crowdRun{}}
				cells = append(cells, c)
				for _, n := range sizes {
					c.runs[n] = runCrowd(b, preset, mode, n, timeout)
					write()
				}
			}
		}
	}
	b.Logf("wrote %s:\n%s", path, crowdTable(cells, sizes))
}

// runCrowd trains preset in mode with n workers to its target.
func runCrowd(b testing.TB, preset, mode string, n int, timeout time.Duration) crowdRun {
	spec, edit := crowdSpec(b, preset, mode, n)
	if os.Getenv("CROWD_VERBOSE") != "" {
		edit0 := edit
		edit = func(cfg *coordinator.Config) {
			if edit0 != nil {
				edit0(cfg)
			}
			cfg.Verbose = true
		}
	}
	g := newTestGridWith(b, spec, edit)
	defer g.close()
	start := time.Now()
	for i := range n {
		// Each a volunteer of its own, as on a real grid: spot checks
		// pair different volunteers.
		g.addWorkerWith(1, nil, func(cfg *worker.Config) {
			cfg.VolunteerKey = fmt.Sprintf("crowd-bench-volunteer-%02d", i)
		})
	}
	var v coordinator.JobView
	for {
		v = g.jobView()
		if v.State != coordinator.StateRunning && v.State != coordinator.StateFinishing || time.Since(start) > timeout {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := crowdRun{elapsed: time.Since(start), examples: v.ExamplesSeen, versions: v.Version, state: v.State}
	r.refused, r.results = honestRefused(v)
	r.reached = v.State == coordinator.StateDone && v.Eval != nil && targetMet(spec, v.Eval)
	if v.Eval != nil {
		r.versions = v.Eval.Version
	}
	// To stderr: a benchmark's log is cut short.
	fmt.Fprintf(os.Stderr, "crowd: %s/%s, %d workers: %s in %.1fs, version %d, %d examples, reached %v (eval %+v); rejections %v\n",
		preset, mode, n, v.State, r.elapsed.Seconds(), r.versions, r.examples, r.reached, v.Eval, v.Rejections)
	return r
}

// crowdTable is the benchmark's markdown: per preset and mode, each crowd
// size's time and examples to the target, and the speed-up (one worker's
// time over n's) and examples ratio (n's over one's).
func crowdTable(cells []*crowdCell, sizes []int) string {
	var sb strings.Builder
	sb.WriteString("| preset | mode | workers | time to target | examples | versions | speed-up | examples vs 1 | honest refused |\n")
	sb.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, c := range cells {
		one, hasOne := c.runs[1]
		for _, n := range sizes {
			r, ok := c.runs[n]
			if !ok {
				continue
			}
			t, speed, ratio := "not reached ("+r.state+")", "—", "—"
			if r.reached {
				t = fmt.Sprintf("%.1f s", r.elapsed.Seconds())
				if hasOne && one.reached && n > 1 {
					speed = fmt.Sprintf("%.2fx", one.elapsed.Seconds()/r.elapsed.Seconds())
					ratio = fmt.Sprintf("%.2fx", float64(r.examples)/float64(one.examples))
				}
			}
			fmt.Fprintf(&sb, "| %s | %s | %d | %s | %d | %d | %s | %s | %d of %d |\n", c.preset, c.mode, n, t, r.examples, r.versions, speed, ratio, r.refused, r.results)
		}
	}
	return sb.String()
}

// honestRefused counts a job's refused results but those late, stale or
// not_running (what a crowd of honest workers loses to the defences), and
// all its results answered.
func honestRefused(v coordinator.JobView) (refused, results int64) {
	for reason, n := range v.Rejections {
		switch reason {
		case protocol.ReasonLate, protocol.ReasonStale, protocol.ReasonNotRunning:
		default:
			refused += n
		}
		results += n
	}
	return refused, results + v.UpdatesApplied
}
