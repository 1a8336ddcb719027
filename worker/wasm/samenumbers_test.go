package wasm_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/protocol"
)

type probeOutput struct {
	Backend string  `json:"backend"`
	LossSum float64 `json:"loss_sum"`
	Correct int     `json:"correct"`
	Grad    []byte  `json:"grad"`
}

// The browser worker computes the same numbers as the native one: one fixed
// batch through ./internal/gradprobe built for GOOS=js GOARCH=wasm (run by
// Node with Go's own wasm_exec_node.js) and built natively. The two builds
// use different GEMM kernels (natively an assembly one where the CPU has
// it, the pure-Go one in wasm), so sums are ordered differently; float32
// rounding allows ~1e-6.
func TestBrowserGradientMatchesNative(t *testing.T) {
	node := testenv.NeedNode(t, "the wasm build outside a browser")
	dir, err := dataset.FindMNIST("")
	if err != nil {
		t.Fatal(err)
	}
	goroot := strings.TrimSpace(run(t, nil, "go", "env", "GOROOT"))
	bin := t.TempDir()
	const probe = "github.com/crowdtrain/crowdtrain/worker/wasm/internal/gradprobe"
	run(t, nil, "go", "build", "-o", filepath.Join(bin, "probe"), probe)
	run(t, []string{"GOOS=js", "GOARCH=wasm"}, "go", "build", "-o", filepath.Join(bin, "probe.wasm"), probe)

	// One gradient of each preset, then whole leases through the worker's
	// compute path: inner AdamW and SGD, both update kinds. Four AdamW
	// steps amplify rounding a little (each step divides by sqrt(v)).
	//
	// The transformer's batch must agree closer still: the gradients within
	// a relative distance of 1e-6 and the mean loss within 1e-6 (its
	// elementwise math is written so that no GOARCH fuses multiply-adds).
	for _, tc := range []struct {
		name, model string
		args        []string
		examples    int // label positions
		tol         float64
		lossTol     float64 // on the mean loss, absolute; 0: tol/10 relative to the sum
	}{
		{"mnist-mlp", "mnist-mlp", nil, 64, 1e-6, 0},
		{"mnist-cnn", "mnist-cnn", nil, 64, 1e-6, 0},
		{"charlm-tiny", "charlm-tiny", []string{"-batch", "32"}, 32 * 32, 1e-6, 1e-6},
		{"charlm-tiny tied", "charlm-tiny-tied", []string{"-batch", "32"}, 32 * 32, 1e-6, 1e-6},
		{"charlm", "charlm", []string{"-batch", "4"}, 4 * 128, 1e-6, 1e-6},
		{"mnist-mlp adamw delta 4 steps", "mnist-mlp", []string{"-inner", "adamw", "-steps", "4", "-update", "delta"}, 256, 1e-4, 0},
		{"mnist-mlp sgd gradient 4 steps", "mnist-mlp", []string{"-inner", "sgd", "-steps", "4", "-update", "gradient"}, 256, 1e-4, 0},
	} {
		args := append([]string{"-data", dir, "-model", tc.model}, tc.args...)
		native := decode(t, run(t, nil, filepath.Join(bin, "probe"), args...))
		if !strings.HasPrefix(native.backend, "cpu-") {
			t.Fatalf("native backend %q, want cpu-<kernel>", native.backend)
		}
		// The browser's two CPU backends: the pure-Go kernel, and the
		// SIMD module loaded beside the Go module as worker.js loads it.
		for _, backend := range []string{"wasm-go", "wasm-simd"} {
			t.Run(tc.name+"/"+backend, func(t *testing.T) {
				model := tc.name + " " + backend
				var wasm probeResult
				if backend == "wasm-go" {
					wasm = decode(t, run(t, nil, node, append([]string{filepath.Join(goroot, "lib", "wasm", "wasm_exec_node.js"),
						filepath.Join(bin, "probe.wasm")}, args...)...))
				} else {
					wasm = decode(t, run(t, nil, node, append([]string{"testdata/run_simd_node.js", filepath.Join(goroot, "lib", "wasm"),
						"../../web/static/simd.wasm", filepath.Join(bin, "probe.wasm"), "-kernel", "simd"}, args...)...))
				}
				if wasm.backend != backend {
					t.Fatalf("wasm backend %q, want %s", wasm.backend, backend)
				}
				if native.correct != wasm.correct {
					t.Errorf("correct predictions: native %d, wasm %d", native.correct, wasm.correct)
				}
				if tc.lossTol > 0 {
					if d := math.Abs(native.loss-wasm.loss) / float64(tc.examples); d > tc.lossTol {
						t.Errorf("mean loss: native %v, wasm %v (difference %.2g)", native.loss/float64(tc.examples), wasm.loss/float64(tc.examples), d)
					}
				} else if d := math.Abs(native.loss-wasm.loss) / native.loss; d > tc.tol/10 {
					t.Errorf("loss sum: native %v, wasm %v (relative difference %.2g)", native.loss, wasm.loss, d)
				}
				var diff, norm, worst float64
				for i, g := range native.grad {
					d := float64(wasm.grad[i] - g)
					diff += d * d
					norm += float64(g) * float64(g)
					worst = max(worst, math.Abs(d))
				}
				rel := math.Sqrt(diff / norm)
				t.Logf("%s: %d parameters, mean loss %.6f (wasm %+.2g), update relative difference %.2g, largest %.2g", model, len(native.grad),
					native.loss/float64(tc.examples), (wasm.loss-native.loss)/float64(tc.examples), rel, worst)
				if norm == 0 || rel > tc.tol {
					t.Errorf("updates differ: ‖wasm−native‖/‖native‖ = %.3g (norm %.3g), want ≤ %g", rel, math.Sqrt(norm), tc.tol)
				}
			})
		}
	}
}

type probeResult struct {
	backend string
	loss    float64
	correct int
	grad    []float32
}

func decode(t *testing.T, out string) probeResult {
	t.Helper()
	var o probeOutput
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("gradprobe printed %.200q: %v", out, err)
	}
	g := make([]float32, len(o.Grad)/4)
	if err := protocol.DecodeFloatsInto(g, o.Grad); err != nil {
		t.Fatal(err)
	}
	return probeResult{o.Backend, o.LossSum, o.Correct, g}
}

func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
