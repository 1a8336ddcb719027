package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// CharlmClockVar runs TestCharlmByTheClockBesidePyTorch (make
// bench-charlm-clock), about 20 minutes of a quiet machine;
// CharlmClockMarks changes its marks (default 60,120,300: seconds,
// increasing); CharlmClockOut names the file its table goes to.
const (
	CharlmClockVar   = "CROWDTRAIN_CHARLM_CLOCK"
	CharlmClockMarks = "CHARLM_CLOCK_MARKS"
	CharlmClockOut   = "CHARLM_CLOCK_OUT"
)

// The built-in charlm job at its defaults (`serve --job charlm --data
// kjv.txt`) by the clock: one `crowdtrain work --threads 1`, then two,
// each run scored at 60, 120 and 300 s from the moment its workers are
// connected, beside PyTorch on two cores (train --threads 2 splits them
// between torch and its BLAS as trains faster) training the same model
// from the same version 0 with the same optimizer and batch for as many
// seconds of its own training (scripts/torch_reference.py train --marks).
// Every model, the grid's exports included, is scored by the same
// PyTorch code on the same held-out windows. Goal (docs/BENCHMARKS.md):
// two workers at least as low as PyTorch at each mark.
func TestCharlmByTheClockBesidePyTorch(t *testing.T) {
	if os.Getenv(CharlmClockVar) == "" {
		t.Skipf("a benchmark of about 20 minutes on a quiet machine: make bench-charlm-clock (%s=1)", CharlmClockVar)
	}
	var charlmClockMarks []int
	for _, f := range strings.Split(cmp.Or(os.Getenv(CharlmClockMarks), "60,120,300"), ",") {
		s, err := strconv.Atoi(f)
		if err != nil || s <= 0 || len(charlmClockMarks) > 0 && s <= charlmClockMarks[len(charlmClockMarks)-1] {
			t.Fatalf("%s: %q is not increasing whole seconds above 0", CharlmClockMarks, f)
		}
		charlmClockMarks = append(charlmClockMarks, s)
	}
	py := torchPython(t)
	dir := t.TempDir()
	corpus := filepath.Join(dir, "kjv.txt")
	if err := os.WriteFile(corpus, kingJamesText(t), 0o644); err != nil {
		t.Fatal(err)
	}
	last := charlmClockMarks[len(charlmClockMarks)-1]

	// score is PyTorch's validation loss of an exported model, in bits per
	// character.
	score := func(model string) float64 {
		t.Helper()
		out, err := exec.Command(py, torchReference, "train", "--model", model, "--data", corpus, "--marks", "0", "--threads", "2").CombinedOutput()
		if err != nil {
			t.Fatalf("scoring %s: %v\n%s", model, err, out)
		}
		return parseMarks(t, out)[0].bits
	}

	// One grid run of n workers: its version 0 and its model at each mark.
	grid := func(n int) (v0 string, at []string, versions []int64) {
		addr := freeAddr(t)
		srv := startProc(t, "serve", "--addr", addr, "--db", "", "--job", "charlm", "--data", corpus,
			"--admin-token", modesAdminToken, "--progress", "30s")
		defer srv.kill()
		srv.waitLine("coordinator listening", 2*time.Minute)
		job := waitJob(t, addr, time.Minute, "the charlm job", func(v coordinator.JobView) bool { return v.ID != "" })
		export := func(name string) string {
			t.Helper()
			path := filepath.Join(dir, fmt.Sprintf("grid%d-%s.safetensors", n, name))
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/jobs/"+job.ID+"/export", nil)
			req.Header.Set("Authorization", "Bearer "+modesAdminToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("export at %s: %d %v %.200s", name, resp.StatusCode, err, b)
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return path
		}
		v0 = export("v0")
		workers := make([]*proc, n)
		for i := range workers {
			workers[i] = startProc(t, "work", "--coordinator", "ws://"+addr+"/ws", "--threads", "1")
			defer workers[i].kill()
		}
		waitJob(t, addr, 2*time.Minute, fmt.Sprintf("%d workers on the job", n), func(v coordinator.JobView) bool { return v.Workers >= n })
		start := time.Now()
		for _, s := range charlmClockMarks {
			time.Sleep(time.Until(start.Add(time.Duration(s) * time.Second)))
			at = append(at, export(strconv.Itoa(s)+"s"))
			jobs, err := getJobs(addr)
			if err != nil || len(jobs) != 1 {
				t.Fatalf("the job at %d s: %v", s, err)
			}
			versions = append(versions, jobs[0].Version)
		}
		return v0, at, versions
	}

	type run struct {
		name  string
		bits  []float64
		steps []int64 // versions, or PyTorch's steps
	}
	var runs []run
	var v0 string
	for _, n := range []int{1, 2} {
		first, at, versions := grid(n)
		if v0 == "" {
			v0 = first
		}
		r := run{name: fmt.Sprintf("grid, %d worker", n), steps: versions}
		if n > 1 {
			r.name += "s"
		}
		for _, m := range at {
			r.bits = append(r.bits, score(m))
		}
		runs = append(runs, r)
	}
	marks := make([]string, len(charlmClockMarks))
	for i, s := range charlmClockMarks {
		marks[i] = strconv.Itoa(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(2*last+300)*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, torchReference, "train", "--model", v0, "--data", corpus,
		"--marks", strings.Join(marks, ","), "--threads", "2").CombinedOutput()
	if err != nil {
		t.Fatalf("PyTorch: %v\n%s", err, out)
	}
	torch := run{name: "PyTorch, 2 cores"}
	for _, m := range parseMarks(t, out) {
		torch.bits, torch.steps = append(torch.bits, m.bits), append(torch.steps, m.step)
	}
	runs = append(runs, torch)

	var b strings.Builder
	b.WriteString("| run |")
	for _, s := range marks {
		fmt.Fprintf(&b, " bits/char at %s s (versions, or steps) |", s)
	}
	b.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(marks)) + "\n")
	for _, r := range runs {
		if len(r.bits) != len(marks) {
			t.Fatalf("%s scored %d marks, want %d", r.name, len(r.bits), len(marks))
		}
		cells := make([]string, len(marks))
		for i := range marks {
			cells[i] = fmt.Sprintf("%.3f (%d)", r.bits[i], r.steps[i])
		}
		fmt.Fprintf(&b, "| %s | %s |\n", r.name, strings.Join(cells, " | "))
	}
	two := runs[1]
	for i, s := range marks {
		verdict := "met"
		if two.bits[i] > torch.bits[i] {
			verdict = "missed"
		}
		fmt.Fprintf(&b, "\nAt %s s two workers %.3f, PyTorch %.3f: goal %s.", s, two.bits[i], torch.bits[i], verdict)
	}
	b.WriteString("\n")
	t.Log("\n" + b.String())
	path := cmp.Or(os.Getenv(CharlmClockOut), filepath.Join("..", "..", "test-artifacts", "charlm-clock.md"))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		_ = os.WriteFile(path, []byte(b.String()), 0o644)
	}
	// Each run learned: its last mark is below its first and below the
	// untrained model's 8 bits (a byte-level model starts near ln 256).
	for _, r := range runs {
		if !(r.bits[len(r.bits)-1] < r.bits[0] && r.bits[len(r.bits)-1] < 6) {
			t.Errorf("%s: bits/char %v; want it to fall below 6 by the last mark", r.name, r.bits)
		}
	}
}

// clockMark is one `mark S step N val_loss L bits_per_char B` line of
// torch_reference.py train --marks.
type clockMark struct {
	step int64
	bits float64
}

var markLine = regexp.MustCompile(`(?m)^mark \S+ step (\d+) val_loss \S+ bits_per_char (\S+)$`)

func parseMarks(t *testing.T, out []byte) []clockMark {
	t.Helper()
	var ms []clockMark
	for _, m := range markLine.FindAllSubmatch(out, -1) {
		step, err1 := strconv.ParseInt(string(m[1]), 10, 64)
		bits, err2 := strconv.ParseFloat(string(m[2]), 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("mark line %q", m[0])
		}
		ms = append(ms, clockMark{step, bits})
	}
	if len(ms) == 0 {
		t.Fatalf("no mark line in:\n%s", out)
	}
	return ms
}
