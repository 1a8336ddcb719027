package arch

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/crowdtrain/crowdtrain"

type pkg struct {
	ImportPath string
	Name       string
	Doc        string
	Deps       []string
	GoFiles    []string
}

// list runs `go list -json -deps=false` (or with deps) for patterns.
func list(t *testing.T, env []string, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestEveryPackageHasADoc(t *testing.T) {
	for _, p := range list(t, nil, module+"/...") {
		if p.Doc == "" {
			t.Errorf("%s has no package doc: add a doc.go saying what it is for and what it must not import", p.ImportPath)
		}
	}
}

// Dependencies point one way (docs/ARCHITECTURE.md, "Import rules"): the
// libraries import nothing of ours but each other, and no worker imports
// the coordinator or storage.
func TestImportDirections(t *testing.T) {
	forbidden := map[string][]string{
		"nn":       {"/coordinator", "/store", "/worker", "/dataset", "/protocol", "/engine", "/jobspec"},
		"store":    {"/coordinator", "/worker", "/nn", "/dataset", "/protocol"},
		"dataset":  {"/coordinator", "/store", "/worker", "/nn", "/protocol"},
		"protocol": {"/coordinator", "/store", "/worker", "/dataset"},
		// The loop knows no worker kind: they plug into it.
		"worker": {"/coordinator", "/store", "/worker/cpu", "/worker/cuda", "/worker/wasm"},
		// The native CPU worker's own parts: its kernel choice, the host's
		// OpenBLAS and its manners on a volunteer's machine.
		"worker/cpu/native":   {"/coordinator", "/store", "/worker/cuda", "/worker/wasm"},
		"worker/cpu/openblas": {"/coordinator", "/store", "/worker/cuda", "/worker/wasm"},
		"worker/cpu/polite":   {"/coordinator", "/store", "/worker/cuda", "/worker/wasm"},
		// The CPU backend is shared by the native and the browser worker:
		// it knows neither, nor anything a browser cannot build.
		"worker/cpu":  {"/coordinator", "/store", "/worker/cpu/native", "/worker/cpu/openblas", "/worker/cpu/polite", "/worker/cuda", "/worker/wasm", "/web"},
		"worker/cuda": {"/coordinator", "/store", "/worker/cpu/native", "/worker/cpu/openblas", "/worker/cpu/polite", "/worker/wasm"},
		"coordinator": {"/worker"},
		"worker/wasm": {"/coordinator", "/store", "/worker/cpu/native", "/worker/cpu/openblas", "/worker/cpu/polite", "/worker/cuda", "/web"},
		// The GPU executor is shared by the CUDA and the WebGPU backend:
		// it knows neither (they implement its Device), nor anything a
		// browser cannot build.
		"worker/gpu": {"/coordinator", "/store", "/worker/cpu", "/worker/cuda", "/worker/wasm", "/web"},
		// The engine and the job spec know no HTTP, protocol or database:
		// they are plain values and flat vectors. The job spec names the
		// built-in data sets, so it may import dataset (a leaf), and it
		// validates the `robust` key against the engine's methods, so it
		// may import engine (never the other way round).
		"engine": {"/coordinator", "/store", "/protocol", "/dataset", "/worker", "/jobspec", "/web"},
		// placement is a pure rule over plain values: it imports nothing
		// of this module.
		// Inside engine, two pure rules over plain values that import
		// nothing of this module: which job a worker computes for
		// (placement), and a sweep's early stopping (asha).
		"engine/placement": {"/coordinator", "/store", "/protocol", "/dataset", "/worker", "/jobspec", "/web", "/nn", "/engine"},
		"engine/asha":      {"/coordinator", "/store", "/protocol", "/dataset", "/worker", "/jobspec", "/web", "/nn", "/engine"},
		"jobspec":          {"/coordinator", "/store", "/protocol", "/worker", "/web"},
		// The tokenizer is a leaf: bytes in, ids out, standard library only.
		"tokenizer": {"/coordinator", "/store", "/protocol", "/dataset", "/worker", "/jobspec", "/web", "/nn", "/engine", "/compute", "/internal"},
		// Verifiable tasks are a leaf like the tokenizer: dataset builds
		// its task data sets on them, and the browser may run them.
		"rltask": {"/coordinator", "/store", "/protocol", "/dataset", "/worker", "/jobspec", "/web", "/nn", "/engine", "/compute", "/internal"},
		// The GRPO loss is math on nn's models: no HTTP, protocol,
		// database or job spec.
		"rl": {"/coordinator", "/store", "/protocol", "/dataset", "/worker", "/jobspec", "/web", "/engine", "/compute"},
		// An RL job's rules (prompts, scoring, buffer, evaluation) are the
		// coordinator's but know nothing of its leases' plumbing, its
		// database or its job spec.
		"rljob": {"/coordinator", "/store", "/dataset", "/worker", "/jobspec", "/web", "/engine", "/compute"},
		// The pinned computation of a lease: what every worker kind runs
		// and what the coordinator recomputes disputes with, so it knows
		// neither; it builds on nn, rl, protocol and dataset only.
		"compute": {"/coordinator", "/store", "/worker", "/web", "/engine", "/jobspec", "/protocol/relay", "/internal", "/cmd"},
		// What a relay and its root say over NATS is plain messages, not
		// even the workers' protocol beside it; the embedded NATS server
		// knows only them.
		"protocol/relay":   {"/coordinator", "/store", "/protocol", "/dataset", "/worker", "/jobspec", "/web", "/nn", "/engine"},
		"internal/natsbox": {"/coordinator", "/store", "/protocol", "/dataset", "/worker", "/jobspec", "/web", "/nn", "/engine"},
		// The pages are served by the coordinator and import nothing of ours.
		"web": {"/coordinator", "/store", "/worker", "/nn", "/dataset", "/protocol"},
		// The shared browser-test helpers drive Chromium and build the
		// browser worker; they know nothing of what a test serves.
		"internal/testnpy":     {"/coordinator", "/store", "/worker", "/web", "/nn", "/dataset", "/protocol", "/engine", "/jobspec"},
		"internal/testbrowser": {"/coordinator", "/store", "/worker", "/nn", "/dataset", "/protocol", "/engine", "/jobspec"},
	}
	// A room inside a forbidden one that a rule lets in all the same: the
	// embedded NATS server knows the relays' messages (protocol/relay),
	// not the workers' protocol around them.
	allowed := map[string][]string{
		"internal/natsbox": {"/protocol/relay"},
	}
	for _, p := range list(t, nil, "-deps=false", module+"/...") {
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		bad, ok := rulesFor(forbidden, rel)
		if !ok {
			continue
		}
		good, _ := rulesFor(allowed, rel)
		for _, d := range list(t, nil, "-deps", p.ImportPath) {
			if d.ImportPath == p.ImportPath || under(d.ImportPath, good) {
				continue // a rule may forbid the room a package is in (engine/asha: the rest of engine), or let in a room inside a forbidden one
			}
			for _, b := range bad {
				if under(d.ImportPath, []string{b}) {
					t.Errorf("%s imports %s", p.ImportPath, d.ImportPath)
				}
			}
		}
	}
}

// under reports whether the import path is one of rooms (module-relative,
// "/protocol") or inside one.
func under(path string, rooms []string) bool {
	for _, r := range rooms {
		if path == module+r || strings.HasPrefix(path, module+r+"/") {
			return true
		}
	}
	return false
}

// rulesFor is the rule of rel, or of the nearest package above it that
// has one: a package's subpackages (worker/wasm/internal/gradprobe) keep
// its rule unless they have their own.
func rulesFor(rules map[string][]string, rel string) ([]string, bool) {
	for p := rel; ; {
		if bad, ok := rules[p]; ok {
			return bad, true
		}
		i := strings.LastIndex(p, "/")
		if i < 0 {
			return nil, false
		}
		p = p[:i]
	}
}

func TestRulesApplyToSubpackages(t *testing.T) {
	rules := map[string][]string{"worker/wasm": {"/a"}, "internal/testnpy": {"/b"}}
	for rel, want := range map[string]string{
		"worker/wasm": "/a", "worker/wasm/internal/gradprobe": "/a",
		"internal/testnpy": "/b", "internal/arch": "", "worker/wasms": "", "worker": "",
	} {
		bad, ok := rulesFor(rules, rel)
		if got := strings.Join(bad, ","); ok != (want != "") || got != want {
			t.Errorf("rulesFor(%q) = %q, %v; want %q", rel, got, ok, want)
		}
	}
}

// What the browser builds must stay free of SQLite, database/sql and
// os/exec, and must build for js/wasm at all.
func TestBrowserPackagesStayLight(t *testing.T) {
	wasm := []string{"GOOS=js", "GOARCH=wasm"}
	for _, rel := range []string{"nn", "dataset", "protocol", "compute", "worker", "worker/gpu", "worker/cpu", "worker/wasm", "cmd/wasmworker"} {
		for _, d := range list(t, wasm, "-deps", module+"/"+rel) {
			switch {
			case d.ImportPath == "database/sql", d.ImportPath == "os/exec",
				strings.HasPrefix(d.ImportPath, "github.com/mattn/go-sqlite3"):
				t.Errorf("%s pulls %s into the browser build", rel, d.ImportPath)
			}
		}
	}
}

// The GPU backend loads the CUDA libraries at run time, so it must build
// without cgo (and without a CUDA toolkit), as must the executor it
// shares with the browser.
func TestGPUWorkerBuildsWithoutCgo(t *testing.T) {
	cmd := exec.Command("go", "build", module+"/worker/cuda/...", module+"/worker/gpu")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./worker/cuda/... ./worker/gpu: %v\n%s", err, out)
	}
}

// The worker build (CGO_ENABLED=0, every release target) links no SQLite:
// neither the store nor the coordinator and the NATS server around it.
// cmd/crowdtrain's serve, relay and export are left out of it by build tags.
func TestWorkerBuildHasNoDatabase(t *testing.T) {
	for _, target := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64", "windows/arm64"} {
		goos, goarch, _ := strings.Cut(target, "/")
		env := []string{"CGO_ENABLED=0", "GOOS=" + goos, "GOARCH=" + goarch}
		for _, d := range list(t, env, "-deps", module+"/cmd/crowdtrain") {
			switch {
			case d.ImportPath == module+"/store", d.ImportPath == module+"/coordinator",
				d.ImportPath == module+"/internal/natsbox", d.ImportPath == "runtime/cgo",
				strings.HasPrefix(d.ImportPath, "github.com/mattn/go-sqlite3"),
				strings.HasPrefix(d.ImportPath, "github.com/nats-io/nats-server"):
				t.Errorf("%s: the worker build of cmd/crowdtrain pulls in %s", target, d.ImportPath)
			}
		}
	}
}
