package spotbench_test

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/internal/spotbench"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
	"github.com/crowdtrain/crowdtrain/worker/cpu/native"
)

// TasksVar sets how many checked tasks the test runs (default 300, and 40
// under -short; `make bench-spotcheck` runs 10,000).
const TasksVar = "CROWDTRAIN_SPOTBENCH_TASKS"

const wasmClass = "browser/wasm-go"

// pairStat is what one pair of backends' results came to.
type pairStat struct {
	tasks, identical int
	worst, sum       float64
	worstMode        string
	worstTask        uint64
	worstNorm        float64 // the norm of the primary's update at the worst task
	// worstRef is the largest difference as the comparator measures it:
	// against the larger of the norms and the running mean norm.
	worstRef float64
}

// Honest volunteers of mixed backends (every CPU kernel of this machine,
// OpenBLAS when the host has it, and the browser's wasm under Node)
// compute the same tasks of mnist-mlp (async leases, and every 50th a
// diloco lease of its local steps), and a few of charlm-tiny with dropout
// (every 10th a diloco lease),
// from snapshots along a training run;
// each task's pair of results goes through the spot check comparator at
// the default tolerance, with the running mean norm of the results as
// its reference, as the coordinator's: no check may fail, so no honest
// volunteer is struck. The largest difference the comparator measures
// must stay 10x under the tolerance: the margin the default was fitted
// with.
func TestHonestBackendsAgree(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 40 // every backend pair and both models, on fewer snapshots
	}
	if v := os.Getenv(TasksVar); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number of tasks", TasksVar, v)
		}
	}
	data, err := dataset.FindMNIST("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := native.UseKernel(nn.KernelOpenBLAS); err != nil {
		t.Logf("no OpenBLAS kernel: %v", err)
	}
	var classes []string
	for _, k := range nn.Kernels() {
		classes = append(classes, "native/cpu-"+k)
	}
	node := testenv.NeedNode(t, "the browser's wasm build outside a browser")
	classes = append(classes, wasmClass)
	var pairs [][2]string
	for i, a := range classes {
		for _, b := range classes[i+1:] {
			pairs = append(pairs, [2]string{a, b})
		}
	}
	if len(pairs) == 0 {
		t.Fatalf("one backend only (%v): nothing to compare", classes)
	}

	// charlm-tiny with dropout after each GELU: a copy must draw the
	// primary's masks on every backend (protocol.Lease.CopyOf).
	charlm := max(20, n/50)
	for _, c := range []struct {
		model   string
		dropout float64
		tasks   int
	}{{"mnist-mlp", 0, n}, {"charlm-tiny", 0.1, charlm}} {
		t.Run(c.model, func(t *testing.T) { runPlan(t, c.model, c.dropout, c.tasks, data, node, classes, pairs) })
	}
}

// runPlan computes n tasks of model on every pair of classes and checks
// them through the comparator.
func runPlan(t *testing.T, model string, dropout float64, n int, data, node string, classes []string, pairs [][2]string) {
	dir := t.TempDir()
	plan := makePlan(t, dir, data, model, dropout, n)
	native, err := cpu.New(1)
	if err != nil {
		t.Fatal(err)
	}
	comp, err := spotbench.NewComputer(dir, data, plan, native)
	if err != nil {
		t.Fatal(err)
	}
	wasm := startWasm(t, node, dir, data, plan, pairs, comp.Model.NumParams)

	clock := time.Unix(0, 0)
	p := engine.NewSpotChecks(1, 1, engine.DefaultSpotCheckStrikes, engine.DefaultSpotCheckTolerance, func() time.Time { return clock })
	p.MaxPending = 1
	stats := map[[2]string]*pairStat{}
	var norms []float64
	refNorm, normCount := 0.0, 0
	compute := func(class string, task spotbench.Task) []float32 {
		if class == wasmClass {
			return <-wasm
		}
		if err := nn.UseKernel(strings.TrimPrefix(class, "native/cpu-")); err != nil {
			t.Fatal(err)
		}
		u, err := comp.Compute(task)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	start := time.Now()
	for i, task := range plan.Tasks {
		pair := pairs[i%len(pairs)]
		l, _ := plan.Lease(task)
		ua, ub := compute(pair[0], task), compute(pair[1], task)
		rel, exact := engine.Distance(ua, ub)
		// The coordinator's running mean of accepted update norms, over
		// about the last 50: the comparator's reference norm.
		na := norm(ua)
		normCount++
		refNorm += (na - refNorm) / float64(min(normCount, 50))
		p.RefNorm = refNorm
		relRef, _ := engine.DistanceAtLeast(ua, ub, refNorm)
		s := stats[pair]
		if s == nil {
			s = &pairStat{}
			stats[pair] = s
		}
		s.tasks++
		s.sum += rel
		if exact {
			s.identical++
		}
		if rel > s.worst {
			s.worst, s.worstMode, s.worstTask, s.worstNorm = rel, task.Mode, task.ID, na
		}
		s.worstRef = max(s.worstRef, relRef)
		norms = append(norms, na)
		// Through the comparator: pair[0] computed the primary, pair[1]
		// the copy; a mismatch would ask a third backend.
		p.Open(engine.Lease{ID: task.ID, Base: int64(task.Snapshot), Task: engine.Task{Count: l.Count}},
			engine.SpotResult{Volunteer: pair[0], Hint: pair[0], Update: ua, Examples: l.Count, Applied: true})
		c := p.CopyFor(pair[1], pair[1], nil)
		if c == nil {
			t.Fatalf("task %d: no copy for %s", task.ID, pair[1])
		}
		p.Copied(c, task.ID+1<<40, pair[1], l.Count)
		o, _ := p.Answer(task.ID+1<<40, engine.SpotResult{Volunteer: pair[1], Hint: pair[1], Update: ub, Examples: l.Count})
		if !o.Done {
			third := ""
			for _, k := range classes {
				if k != pair[0] && k != pair[1] && k != wasmClass {
					third = k
				}
			}
			if third == "" {
				t.Fatalf("task %d: %s and %s disagree (%s) and no third backend decides", task.ID, pair[0], pair[1], o.Detail)
			}
			c := p.CopyFor(third, third, nil)
			p.Copied(c, task.ID+2<<40, third, l.Count)
			o, _ = p.Answer(task.ID+2<<40, engine.SpotResult{Volunteer: third, Hint: third, Update: compute(third, task), Examples: l.Count})
			t.Logf("task %d (%s): %s and %s disagreed at %.3g; the third, %s: %s", task.ID, task.Mode, pair[0], pair[1], rel, third, o.Detail)
		}
	}
	elapsed := time.Since(start)

	what := model
	if dropout > 0 {
		what += fmt.Sprintf(" with dropout %g", dropout)
	}
	fmt.Printf("spot check comparator, %d checked tasks of %s (%d diloco H>1), tolerance %g, %.0f s:\n",
		len(plan.Tasks), what, countMode(plan, "diloco"), engine.DefaultSpotCheckTolerance, elapsed.Seconds())
	slices.Sort(norms)
	fmt.Printf("update norms: median %.3g, 1st percentile %.3g, smallest %.3g\n", norms[len(norms)/2], norms[len(norms)/100], norms[0])
	fmt.Printf("| pair | tasks | bit-identical | mean relative difference | largest | at task (mode, update norm) | largest against the running mean norm |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	worst, worstRel := 0.0, 0.0
	for _, pair := range pairs {
		s := stats[pair]
		if s == nil {
			continue
		}
		worst, worstRel = max(worst, s.worstRef), max(worstRel, s.worst)
		at := ""
		if s.worst > 0 {
			at = fmt.Sprintf("%d (%s, %.3g)", s.worstTask, s.worstMode, s.worstNorm)
		}
		fmt.Printf("| %s × %s | %d | %d | %.2g | %.2g | %s | %.2g |\n", pair[0], pair[1], s.tasks, s.identical, s.sum/float64(s.tasks), s.worst, at, s.worstRef)
	}
	fmt.Printf("checks %d, agreed %d, mismatched %d, false strikes %d, class breaks %d; largest honest difference %.3g as the comparator measures it (tolerance/%.0f), %.3g of the larger norm alone\n",
		p.Counters.Checked, p.Counters.Agreed, p.Counters.Mismatched, p.Counters.Strikes, p.Counters.ClassBreaks, worst, engine.DefaultSpotCheckTolerance/worst, worstRel)
	if p.Counters.Strikes != 0 || p.Counters.Mismatched != 0 {
		t.Errorf("honest backends: %d mismatches, %d false strikes", p.Counters.Mismatched, p.Counters.Strikes)
	}
	if worst > engine.DefaultSpotCheckTolerance/10 {
		t.Errorf("the largest honest difference %.3g is within 10x of the default tolerance %g: refit it (docs/SPOTCHECKS.md)", worst, engine.DefaultSpotCheckTolerance)
	}
}

func countMode(p *spotbench.Plan, mode string) int {
	n := 0
	for _, t := range p.Tasks {
		if t.Mode == mode {
			n++
		}
	}
	return n
}

// makePlan trains model a little with the pure-Go kernel to take
// snapshots along the way (for mnist-mlp from the initial weights to
// about 90% accuracy), and plans n tasks over them.
func makePlan(t *testing.T, dir, data, model string, dropout float64, n int) *spotbench.Plan {
	t.Helper()
	const snapshots = 8
	stepsBetween, dilocoEvery := 60, 50
	if model != "mnist-mlp" {
		stepsBetween, dilocoEvery = 4, 10 // a transformer step costs more
	}
	plan := &spotbench.Plan{Model: model, Dropout: dropout, Snapshots: snapshots}
	for i := range n {
		mode := "async"
		if i%dilocoEvery == dilocoEvery-1 {
			mode = "diloco"
		}
		plan.Tasks = append(plan.Tasks, spotbench.Task{ID: uint64(i + 1), Snapshot: i % snapshots, Start: (i * 977) % 50000, Mode: mode})
	}
	spec, err := plan.ModelSpec()
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	params := make([]float32, m.NumParams)
	m.Init(params, 1)
	if err := nn.UseKernel(nn.KernelGo); err != nil {
		t.Fatal(err)
	}
	b, err := cpu.New(1)
	if err != nil {
		t.Fatal(err)
	}
	var train *dataset.Set
	if m.LabelsPerExample == 1 {
		if train, _, err = dataset.LoadMNIST(data); err != nil {
			t.Fatal(err)
		}
	}
	step := spotbench.Task{Mode: "async"}
	l, err := plan.Lease(step)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, l.Count*m.InputSize)
	labels := make([]int32, l.Count*m.LabelsPerExample)
	for s := range snapshots {
		if err := os.WriteFile(spotbench.SnapshotPath(dir, s), protocol.EncodeFloats(params), 0o644); err != nil {
			t.Fatal(err)
		}
		for k := range stepsBetween {
			l.ID = uint64(s*stepsBetween + k + 1)
			if train != nil {
				train.Fill(x, labels, (int(l.ID)*l.Count)%(train.N-l.Count), l.Count)
			} else {
				spotbench.TextWindows(x, labels, m.InputSize, int(l.ID)*97)
			}
			res, err := worker.ComputeLease(b, m, l, params, x, labels)
			if err != nil {
				t.Fatal(err)
			}
			for i, g := range res.Update {
				params[i] -= l.Inner.LR * g
			}
		}
	}
	if err := plan.Save(dir); err != nil {
		t.Fatal(err)
	}
	return plan
}

// startWasm runs the probe's wasm build under Node on the tasks whose
// pair has the browser in it, and returns their updates in order.
func startWasm(t *testing.T, node, dir, data string, plan *spotbench.Plan, pairs [][2]string, numParams int) <-chan []float32 {
	t.Helper()
	out := make(chan []float32, 8)
	if node == "" {
		return out
	}
	var ids []string
	for i, task := range plan.Tasks {
		if p := pairs[i%len(pairs)]; slices.Contains(p[:], wasmClass) {
			ids = append(ids, strconv.FormatUint(task.ID, 10))
		}
	}
	only := filepath.Join(dir, "wasm-tasks")
	if err := os.WriteFile(only, []byte(strings.Join(ids, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	wasmBin := filepath.Join(dir, "probe.wasm")
	build := exec.Command("go", "build", "-o", wasmBin, "github.com/crowdtrain/crowdtrain/internal/spotbench/probe")
	build.Env = append(os.Environ(), "GOOS=js", "GOARCH=wasm")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the wasm probe: %v\n%s", err, b)
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join(strings.TrimSpace(string(goroot)), "lib", "wasm", "wasm_exec_node.js"), wasmBin,
		"-dir", dir, "-data", data, "-only", only)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		defer close(out)
		r := bufio.NewReaderSize(stdout, 1<<20)
		for range ids {
			u := make([]float32, numParams)
			if err := spotbench.ReadUpdate(r, u); err != nil {
				if err != io.EOF {
					fmt.Fprintln(os.Stderr, "reading the wasm probe:", err)
				}
				return
			}
			out <- u
		}
	}()
	return out
}

func norm(u []float32) float64 {
	var s float64
	for _, v := range u {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s)
}
