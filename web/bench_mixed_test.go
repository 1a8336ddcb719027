package web_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// The worker kinds of a mixed crowd, as the table names them.
const (
	kindNative  = "native"
	kindBrowser = "browser"
	kindPython  = "python"
)

var mixedKinds = []string{kindNative, kindBrowser, kindPython}

// mixedTargets are the presets' targets, as in the crowd benchmark
// (coordinator/bench_crowd_test.go): each preset's own, and 3.0 bits per
// character (2.08 nats) for charlm.
var mixedTargets = map[string]string{
	"mnist-mlp":   "target_accuracy: 0.97\n",
	"mnist-cnn":   "target_accuracy: 0.98\n",
	"fashion-cnn": "target_accuracy: 0.88\n",
	"charlm":      "target_loss: 2.08\n",
}

// mixedRun is one training of a mixed crowd to the preset's target.
type mixedRun struct {
	preset, mode, spot string
	crowd              []string // the kinds started, in mixedKinds order
	reached            bool
	elapsed            time.Duration
	examples, versions int64
	state              string
	// refused and results: results refused for a reason other than late,
	// stale or not_running, of all results answered (the job's counts).
	refused, results int64
	// lateCredited: copies of backed-up tasks that answered second,
	// agreed with the copy applied and were credited (rounds only).
	lateCredited int64
	// rechecks: what the coordinator's recomputations of the results
	// validation refused decided.
	rechecks coordinator.RecheckView
	kinds    map[string]*kindTally
	absent   map[string]string // kind → why it took no part
}

// kindTally is what one kind of worker's results came to.
type kindTally struct {
	answered int64            // accepted and refused, as the coordinator counted them
	reasons  map[string]int64 // refusals by reason, from the coordinator's log
}

// honestRefusals is the tally's refusals for reasons other than late,
// stale and not_running.
func (k *kindTally) honestRefusals() int64 {
	var n int64
	for reason, c := range k.reasons {
		if !routineReason(reason) {
			n += c
		}
	}
	return n
}

// routineReason says whether reason is one an honest crowd meets in the
// ordinary course (the version moved on, a round closed, the job ended),
// which the benchmark does not count against the defences.
func routineReason(reason string) bool {
	switch reason {
	case protocol.ReasonLate, protocol.ReasonStale, protocol.ReasonNotRunning:
		return true
	}
	return false
}

// BenchmarkMixedCrowd measures the share of honest results the defences
// refuse in a mixed crowd (make bench-mixed): for each preset, mode and
// spot-check rate, one native worker of one thread, one browser tab
// (headless Chromium) and one Python worker (scripts/pyworker.py), all
// honest and each a volunteer of its own, train to the preset's target
// (or the run limit). It writes to MIX_OUT (default
// test-artifacts/mixed.md) a markdown table of time, examples and
// versions to the target, each kind's results answered and refused for
// reasons other than late, stale and not_running (with the reasons,
// counted from the coordinator's REFUSED log lines), and the job's
// honest-refused share. pyworker.py computes the dense and convolutional
// presets (mnist-mlp, mnist-cnn, fashion-cnn), not charlm: there the crowd
// is the native worker and the tab, and the table says so. With MIX_PAIR (default 1) it also trains mnist-mlp
// async with the native worker alone and with a tab beside it.
//
// MIX_PRESETS, MIX_MODES and MIX_SPOT (comma-separated; a rate of
// "default" leaves the job's own) select cells; MIX_TIMEOUT is a run's
// limit (default 10m); MIX_VERBOSE=1 writes the coordinator's every log
// line, DEBUG included, to stderr. Run it with -benchtime 1x.
func BenchmarkMixedCrowd(b *testing.B) {
	presets := envList(b, "MIX_PRESETS", []string{"mnist-mlp", "mnist-cnn", "fashion-cnn", "charlm"})
	modes := envList(b, "MIX_MODES", []string{"async", "sync", "diloco"})
	spots := envList(b, "MIX_SPOT", []string{"default", "0.25"})
	for _, p := range presets {
		if mixedTargets[p] == "" {
			b.Fatalf("MIX_PRESETS: no target for %q (want some of mnist-mlp, mnist-cnn, fashion-cnn, charlm)", p)
		}
	}
	timeout := 10 * time.Minute
	if s := os.Getenv("MIX_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			b.Fatalf("MIX_TIMEOUT: %q is not a duration such as 10m", s)
		}
		timeout = d
	}
	pair := cmp.Or(os.Getenv("MIX_PAIR"), "1") != "0"
	path := cmp.Or(os.Getenv("MIX_OUT"), filepath.Join("..", "test-artifacts", "mixed.md"))
	python := testenv.NeedPython(b, "numpy", "websockets", "msgpack")
	browser := testbrowser.New(b)

	var cells, pairs []*mixedRun
	write := func() {
		head := fmt.Sprintf("Honest results refused in a mixed crowd, %s, %d CPUs, run limit %v\n\n",
			time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), timeout)
		out := head + mixedTable(cells)
		if len(pairs) > 0 {
			out += "\nA browser tab beside a native worker (mnist-mlp async, default spot_check):\n\n" + pairTable(pairs)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		for _, preset := range presets {
			for _, mode := range modes {
				for _, spot := range spots {
					cells = append(cells, runMixed(b, browser, python, preset, mode, spot, mixedKinds, timeout))
					write()
				}
			}
		}
		if pair {
			for _, crowd := range [][]string{{kindNative}, {kindNative, kindBrowser}} {
				pairs = append(pairs, runMixed(b, browser, python, "mnist-mlp", "async", "default", crowd, timeout))
				write()
			}
		}
	}
	out, _ := os.ReadFile(path)
	b.Logf("wrote %s:\n%s", path, out)
}

// mixedSpec is preset in mode at the spot-check rate, for a crowd of n:
// a round holds one result of each (sync, diloco); a run stops at the
// target or after a few epochs.
func mixedSpec(tb testing.TB, preset, mode, spot string, n int) (jobspec.Spec, func(*coordinator.Config)) {
	tb.Helper()
	y := fmt.Sprintf("name: mixed-%s-%s\nmodel: %s\neval_every: 50\nmax_epochs: 5\n%s", preset, mode, preset, mixedTargets[preset])
	if spot != "default" {
		y += "spot_check: " + spot + "\n"
	}
	switch mode {
	case "async":
	case "sync", "diloco":
		y += fmt.Sprintf("mode: %s\nround_size: %d\nround_timeout: 60s\n", mode, n)
	default:
		tb.Fatalf("MIX_MODES: unknown mode %q (want async, sync or diloco)", mode)
	}
	outer := map[string]string{
		"mnist-cnn": "{type: adam, lr: 0.002}", "fashion-cnn": "{type: adam, lr: 0.002}",
		"charlm": "{type: adamw, lr: 0.003, weight_decay: 0.01, clip_norm: 1}",
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
		p := filepath.Join(tb.TempDir(), "kjv.txt")
		if err := os.WriteFile(p, text, 0o644); err != nil {
			tb.Fatal(err)
		}
		y = strings.Replace(y, "eval_every: 50\nmax_epochs: 5\n", "eval_every: 25\nmax_epochs: 1\n", 1)
		y += fmt.Sprintf("dataset: {type: text, path: %q, val_fraction: 0.02}\nbatch_size: 32\n", p)
		edit = func(cfg *coordinator.Config) { cfg.LoadData = dataset.Load }
	}
	s, err := jobspec.Parse([]byte(y))
	if err != nil {
		tb.Fatalf("%s/%s: %v\n%s", preset, mode, err, y)
	}
	return s, edit
}

// pythonLayers are the layer types scripts/pyworker.py computes.
var pythonLayers = []string{"dense", "relu", "flatten", "conv2d", "maxpool2d"}

// pythonCannot says why scripts/pyworker.py cannot train preset (a layer
// type it does not compute), or "" when it can.
func pythonCannot(tb testing.TB, preset string) string {
	spec, err := nn.Preset(preset)
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range spec.Layers {
		if !slices.Contains(pythonLayers, l.Type) {
			return fmt.Sprintf("pyworker.py computes %s layers only; %s has %s", strings.Join(pythonLayers, ", "), preset, l.Type)
		}
	}
	return ""
}

// runMixed trains preset in mode at the spot rate with the crowd's kinds
// to its target, and tallies each kind's results.
func runMixed(b *testing.B, browser context.Context, python, preset, mode, spot string, crowd []string, timeout time.Duration) *mixedRun {
	r := &mixedRun{preset: preset, mode: mode, spot: spot, kinds: map[string]*kindTally{}, absent: map[string]string{}}
	for _, k := range crowd {
		if k == kindPython {
			if why := pythonCannot(b, preset); why != "" {
				r.absent[k] = why
				continue
			}
		}
		r.crowd = append(r.crowd, k)
	}
	spec, edit := mixedSpec(b, preset, mode, spot, len(r.crowd))
	refusals := newRefusalLog(os.Stderr, fmt.Sprintf("mixed %s/%s/%s: ", preset, mode, spot))
	refusals.all = os.Getenv("MIX_VERBOSE") != ""
	s := newSiteWith(b, spec, func(cfg *coordinator.Config) {
		if edit != nil {
			edit(cfg)
		}
		cfg.Logger = refusals.logger()
	})
	defer s.srv.Close()

	start := time.Now()
	var stops []func()
	for _, k := range r.crowd {
		switch k {
		case kindNative:
			stops = append(stops, startVolunteerWorker(b, s.wsURL(), "mixed-bench-native-volunteer-01"))
		case kindBrowser:
			s.contribute(b, browser)
			stops = append(stops, func() {
				do(b, browser, 30*time.Second, chromedp.Navigate("about:blank"))
			})
		case kindPython:
			stops = append(stops, startPyworker(b, python, s.wsURL(), timeout+time.Minute, r))
		}
	}
	kindOf := map[string]string{}
	views := map[string]coordinator.WorkerView{}
	var v coordinator.JobView
	for {
		for _, w := range s.srv.WorkerViews() {
			kindOf[w.ID] = workerKind(w)
			views[w.ID] = w
		}
		v = s.view()
		if v.State != coordinator.StateRunning && v.State != coordinator.StateFinishing || time.Since(start) > timeout {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.elapsed = time.Since(start)
	for _, stop := range slices.Backward(stops) {
		stop()
	}
	r.examples, r.versions, r.state = v.ExamplesSeen, v.Version, v.State
	r.lateCredited = v.Abuse.LateCopiesCredited
	r.rechecks = v.Rechecks
	if v.Eval != nil {
		r.versions = v.Eval.Version
	}
	r.reached = v.State == coordinator.StateDone && v.Eval != nil && mixedTargetMet(spec, v.Eval)
	for reason, n := range v.Rejections {
		if !routineReason(reason) {
			r.refused += n
		}
		r.results += n
	}
	r.results += v.UpdatesApplied
	for _, k := range r.crowd {
		r.kinds[k] = &kindTally{reasons: map[string]int64{}}
	}
	for id, w := range views {
		if t := r.kinds[kindOf[id]]; t != nil {
			t.answered += w.Accepted + w.Rejected
		}
	}
	for id, reasons := range refusals.byWorker() {
		t := r.kinds[kindOf[id]]
		if t == nil {
			t = &kindTally{reasons: map[string]int64{}}
			r.kinds["unknown worker "+id] = t
		}
		for reason, n := range reasons {
			t.reasons[reason] += n
		}
	}
	fmt.Fprintf(os.Stderr, "mixed: %s/%s spot %s, %s: %s in %.1fs, version %d, %d examples, reached %v (eval %+v); rejections %v; by kind %s\n",
		preset, mode, spot, strings.Join(r.crowd, "+"), v.State, r.elapsed.Seconds(), r.versions, r.examples, r.reached, v.Eval, v.Rejections, r.kindSummary())
	return r
}

func mixedTargetMet(spec jobspec.Spec, e *coordinator.EvalResult) bool {
	if spec.TargetLoss > 0 {
		return e.Loss <= spec.TargetLoss
	}
	return e.Accuracy >= spec.TargetAccuracy
}

// workerKind names a connected worker's kind: pyworker.py says it is a
// native worker on the numpy backend.
func workerKind(w coordinator.WorkerView) string {
	switch {
	case w.Kind == protocol.KindBrowser:
		return kindBrowser
	case w.Backend == "numpy":
		return kindPython
	}
	return kindNative
}

// startVolunteerWorker runs a native worker of one thread, the volunteer
// key's, in this process until stop.
func startVolunteerWorker(tb testing.TB, wsURL, key string) (stop func()) {
	tb.Helper()
	be, err := cpu.New(1)
	if err != nil {
		tb.Fatal(err)
	}
	w, err := worker.New(worker.Config{Coordinator: wsURL, Backend: be, Logf: tb.Logf, VolunteerKey: key})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			tb.Errorf("native worker: %v", err)
		}
	}
}

// startPyworker runs scripts/pyworker.py against wsURL for at most
// limit; stop ends it. Should it exit before stop, r records why beside
// the Python worker's tally.
func startPyworker(tb testing.TB, python, wsURL string, limit time.Duration, r *mixedRun) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, python, filepath.Join("..", "scripts", "pyworker.py"),
		"--coordinator", wsURL, "--seconds", fmt.Sprint(int(limit.Seconds())))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("pyworker.py: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return func() {
		select {
		case err := <-done:
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			r.absent[kindPython] = fmt.Sprintf("exited early (%v): %s", err, lines[len(lines)-1])
		default:
			cancel()
			<-done
		}
	}
}

// kindSummary is each kind's tally on one line, for the run's log.
func (r *mixedRun) kindSummary() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.kinds)) {
		t := r.kinds[k]
		parts = append(parts, fmt.Sprintf("%s: %d answered, refusals %v", k, t.answered, t.reasons))
	}
	for k, why := range r.absent {
		parts = append(parts, k+": "+why)
	}
	return strings.Join(parts, "; ")
}

// kindCell is a kind's column in the table: results answered / refused
// for reasons other than late, stale and not_running, then the reasons
// (the routine ones too, for the record).
func (r *mixedRun) kindCell(kind string) string {
	if why, ok := r.absent[kind]; ok {
		return "not in the crowd: " + why
	}
	t, ok := r.kinds[kind]
	if !ok {
		return "—"
	}
	cell := fmt.Sprintf("%d / %d", t.answered, t.honestRefusals())
	if len(t.reasons) > 0 {
		var rs []string
		for _, reason := range slices.Sorted(maps.Keys(t.reasons)) {
			rs = append(rs, fmt.Sprintf("%s %d", reason, t.reasons[reason]))
		}
		cell += " (" + strings.Join(rs, ", ") + ")"
	}
	return cell
}

func (r *mixedRun) timeCell() string {
	if !r.reached {
		return fmt.Sprintf("not reached (%s after %.0f s)", r.state, r.elapsed.Seconds())
	}
	return fmt.Sprintf("%.1f s", r.elapsed.Seconds())
}

func (r *mixedRun) shareCell() string {
	if r.results == 0 {
		return "no results"
	}
	s := fmt.Sprintf("%.2f%% (%d of %d)", 100*float64(r.refused)/float64(r.results), r.refused, r.results)
	if r.lateCredited > 0 {
		s += fmt.Sprintf("; %d late copies credited", r.lateCredited)
	}
	if c := r.rechecks; c.Rechecked+c.Skipped > 0 {
		s += fmt.Sprintf("; validation refused %d: %d recomputed and credited, %d refuted, %d not recomputed", c.Rechecked+c.Skipped, c.Vindicated, c.Refuted, c.Skipped)
	}
	return s
}

// mixedTable is the benchmark's markdown, a row per cell.
func mixedTable(runs []*mixedRun) string {
	var sb strings.Builder
	sb.WriteString("| preset | mode | spot_check | time to target | examples | versions | native: answered / refused | browser: answered / refused | python: answered / refused | honest refused |\n")
	sb.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range runs {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %d | %d | %s | %s | %s | %s |\n", r.preset, r.mode, r.spot, r.timeCell(), r.examples, r.versions,
			r.kindCell(kindNative), r.kindCell(kindBrowser), r.kindCell(kindPython), r.shareCell())
	}
	return sb.String()
}

// pairTable compares the native worker alone with the native worker and
// a tab: time and examples to the target, and the ratios to alone's.
func pairTable(runs []*mixedRun) string {
	var sb strings.Builder
	sb.WriteString("| crowd | time to target | examples | versions | time vs native alone | examples vs native alone | native: answered / refused | browser: answered / refused | honest refused |\n")
	sb.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	alone := runs[0]
	for _, r := range runs {
		timeRatio, exRatio := "—", "—"
		if r != alone && r.reached && alone.reached {
			timeRatio = fmt.Sprintf("%.2fx", r.elapsed.Seconds()/alone.elapsed.Seconds())
			exRatio = fmt.Sprintf("%.2fx", float64(r.examples)/float64(alone.examples))
		}
		fmt.Fprintf(&sb, "| %s | %s | %d | %d | %s | %s | %s | %s | %s |\n", strings.Join(r.crowd, " + "), r.timeCell(), r.examples, r.versions,
			timeRatio, exRatio, r.kindCell(kindNative), r.kindCell(kindBrowser), r.shareCell())
	}
	return sb.String()
}

// envList is the comma-separated list in the environment variable, or
// def when it is unset.
func envList(tb testing.TB, name string, def []string) []string {
	s := strings.TrimSpace(os.Getenv(name))
	if s == "" {
		return def
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		tb.Fatalf("%s: %q names nothing", name, s)
	}
	return out
}
