package web_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/web"
)

// EnvTFJS names the environment variable with a node_modules folder that
// holds @tensorflow/tfjs, @tensorflow/tfjs-backend-wasm and
// @tensorflow/tfjs-backend-webgpu 4.22 (`make bench-compare` installs them
// with npm into a temporary folder).
const EnvTFJS = "CROWDTRAIN_TFJS_DIR"

// benchReport is what both engines' Web Workers answer a {type: "bench"}
// control with.
type benchReport struct {
	Model       string    `json:"model"`
	Batch       int       `json:"batch"`
	Kernel      string    `json:"kernel"`
	Rounds      []float64 `json:"rounds"`
	Median      float64   `json:"median"`
	SIMD        bool      `json:"simd"`
	Multithread bool      `json:"multithread"`
	Threads     int       `json:"threads"`
	Unsupported string    `json:"unsupported"` // why the engine cannot train this model

	// Backend is the backend that ran: TF.js's tf.getBackend(); for ours,
	// the worker's backend (wasm-go, wasm-simd, webgpu), with why it was
	// chosen in BackendReason. Adapter names the WebGPU adapter TF.js ran
	// on.
	Backend       string `json:"backend"`
	BackendReason string `json:"backendReason"`
	Adapter       string `json:"adapter"`
}

// BenchmarkBrowserVsTFJS times one training step (forward, backward, SGD
// update; batch 64, on random inputs and on MNIST's images) of crowdtrain's browser worker and of
// TensorFlow.js's wasm backend, each in its own Web Worker in the same
// headless Chromium, one after the other: 5 rounds of 1 s after a 1 s
// warm-up each, medians compared. TF.js runs on one thread with SIMD when
// the browser has it (it does in Chromium); Go's wasm is one thread
// without SIMD. Where TF.js's wasm backend cannot train a model (it has no
// conv2d filter gradient), only ours is reported and the log says why.
//
// Then both engines' WebGPU backends, on the same models and batches:
// TF.js's webgpu backend (the same model definition and SGD step as its
// wasm rows) and our worker's webgpu backend (the {type: "bench"} control
// with backend "webgpu"). In headless Chromium the adapter is SwiftShader,
// a GPU emulated on the CPU (on threads of its own), so these figures say
// how the two engines compare on the same adapter, nothing about a real
// GPU. Each timed WebGPU step waits for the GPU to finish it (TF.js reads
// the loss back every step), and the rounds are gpuRounds of gpuSeconds: a
// training step on SwiftShader is slow (3 rounds of a second or of one
// step, not 5). Where a WebGPU backend cannot run (no adapter, or ours
// answering with another backend, as a worker without one does), its row
// is left out and the log says why.
//
// A run takes minutes (more than go test's default 10 min limit at -count
// 5), hence -timeout 0:
//
//	CROWDTRAIN_TFJS_DIR=.../node_modules go test -timeout 0 -run '^$' -bench BrowserVsTFJS -benchtime 1x -count 5 ./web/
func BenchmarkBrowserVsTFJS(b *testing.B) {
	mods := os.Getenv(EnvTFJS)
	if mods == "" {
		b.Skipf("$%s is not set: it names a node_modules folder with @tensorflow/tfjs, @tensorflow/tfjs-backend-wasm and @tensorflow/tfjs-backend-webgpu (make bench-compare sets it up)", EnvTFJS)
	}
	for _, f := range []string{"@tensorflow/tfjs/dist/tf.min.js", "@tensorflow/tfjs-backend-wasm/dist/tf-backend-wasm.min.js", "@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm-simd.wasm",
		"@tensorflow/tfjs-backend-webgpu/dist/tf-backend-webgpu.min.js"} {
		if _, err := os.Stat(filepath.Join(mods, f)); err != nil {
			b.Fatalf("$%s=%s lacks %s: %v", EnvTFJS, mods, f, err)
		}
	}
	// The real-data batch: MNIST's first training images, as float32 bytes.
	const batch, rounds, seconds = 64, 5, 1.0
	// The WebGPU rows' rounds: SwiftShader is slow (on a 2-vCPU machine
	// TF.js's webgpu step took about 0.5 s for mnist-mlp and 8 s for
	// mnist-cnn), so 3 rounds instead of 5, each of 1 s or one step,
	// whichever is longer, after a warm-up of as long and at least 3 steps
	// (which compiles the shaders): about a minute for TF.js's mnist-cnn.
	const gpuRounds, gpuSeconds = 3, 1.0
	train, _ := loadMNIST(b)
	xs := make([]float32, batch*train.ExampleSize())
	ys := make([]int32, batch)
	train.Fill(xs, ys, 0, batch)
	mnistX := make([]byte, 4*len(xs))
	for i, v := range xs {
		binary.LittleEndian.PutUint32(mnistX[4*i:], math.Float32bits(v))
	}
	mnistY := make([]byte, batch)
	for i, y := range ys {
		mnistY[i] = byte(y)
	}

	ctx := testbrowser.New(b)
	pages, err := web.NewHandler(web.Options{Dist: os.DirFS(buildWorker(b)), Logf: b.Logf})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/static/", pages)
	mux.Handle("/tfjs/", http.StripPrefix("/tfjs/", http.FileServer(http.Dir(mods))))
	mux.HandleFunc("/kbench/", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/kbench/":
			http.ServeFile(w, r, filepath.Join("testdata", "kbench.html"))
		case "/kbench/tfjs-worker.js":
			http.ServeFile(w, r, filepath.Join("testdata", "tfjs-worker.js"))
		case "/kbench/mnist-x.bin":
			w.Write(mnistX)
		case "/kbench/mnist-y.bin":
			w.Write(mnistY)
		default:
			http.NotFound(w, r)
		}
	})
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	do(b, ctx, 30*time.Second, chromedp.Navigate(srv.URL+"/kbench/"))

	run := func(b *testing.B, fn, model, data, backend string, localSteps int) benchReport {
		rounds, seconds := rounds, seconds
		if backend == "webgpu" {
			rounds, seconds = gpuRounds, gpuSeconds
		}
		expr := fmt.Sprintf(`%s({model: %q, batch: %d, localSteps: %d, rounds: %d, seconds: %g, data: %q, backend: %q})`,
			fn, model, batch, max(localSteps, 1), rounds, seconds, data, backend)
		tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		out, err := chromedp.Run(tctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			b.Fatalf("%s: %v", expr, err)
		}
		var r benchReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			b.Fatalf("%s answered %.300q: %v", fn, out, err)
		}
		if r.Unsupported != "" && r.Model == model {
			return r
		}
		if r.Model != model || r.Batch != batch || len(r.Rounds) != rounds || !(r.Median > 0) {
			b.Fatalf("%s answered %+v", fn, r)
		}
		return r
	}
	// Both engines time the same batch: random inputs in [0, 1) (dense, as
	// the baselines' scripts use), and MNIST's own images, the workload
	// (81% zeros, which our kernels skip and TF.js's do not).
	for _, model := range []string{"mnist-mlp", "mnist-cnn"} {
		for _, data := range []string{"random", "mnist"} {
			b.Run(model+"/"+data, func(b *testing.B) {
				for range b.N {
					// Our two CPU backends, and TF.js, back to back.
					scalar := run(b, "runOurs", model, data, "wasm-go", 1)
					ours := run(b, "runOurs", model, data, "wasm-simd", 1)
					tfjs := run(b, "runTFJS", model, data, "", 1)
					if ours.Kernel != "simd" || scalar.Kernel != "go" {
						b.Fatalf("the backends ran kernels %q and %q, want simd and go", ours.Kernel, scalar.Kernel)
					}
					b.ReportMetric(ours.Median, "crowdtrain-examples/s")
					b.ReportMetric(scalar.Median, "crowdtrain-go-examples/s")
					b.ReportMetric(ours.Median/scalar.Median, "simd/go")
					if tfjs.Unsupported != "" {
						b.Logf("%s on %s inputs: crowdtrain wasm-simd %.0f examples/s (rounds %.0f), wasm-go %.0f; TF.js cannot train it: %s",
							model, data, ours.Median, ours.Rounds, scalar.Median, tfjs.Unsupported)
						continue
					}
					if !tfjs.SIMD || tfjs.Threads != 1 {
						b.Logf("note: TF.js ran with simd=%v on %d threads", tfjs.SIMD, tfjs.Threads)
					}
					b.Logf("%s on %s inputs: crowdtrain wasm-simd %.0f examples/s (rounds %.0f), wasm-go %.0f; %s %.0f examples/s, rounds %.0f",
						model, data, ours.Median, ours.Rounds, scalar.Median, tfjs.Kernel, tfjs.Median, tfjs.Rounds)
					b.ReportMetric(tfjs.Median, "tfjs-examples/s")
					b.ReportMetric(ours.Median/tfjs.Median, "crowdtrain/tfjs")
					b.ReportMetric(scalar.Median/tfjs.Median, "crowdtrain-go/tfjs")
				}
				// The WebGPU backends, after the CPU ones so that those
				// figures are as before.
				for range b.N {
					gpuRows(b, run, model, data)
				}
			})
		}
	}
}

// gpuRows times TF.js's webgpu backend and ours on model and data, on the
// adapter Chromium gives (SwiftShader when headless), and reports what ran;
// a backend that cannot run is logged and left out, never reported under
// another backend's name.
func gpuRows(b *testing.B, run func(b *testing.B, fn, model, data, backend string, localSteps int) benchReport, model, data string) {
	const where = "webgpu (SwiftShader, a GPU emulated on the CPU; relative figures only)"
	tfjs := run(b, "runTFJS", model, data, "webgpu", 1)
	switch {
	case tfjs.Unsupported != "":
		b.Logf("%s on %s inputs, %s: TF.js webgpu cannot run: %s", model, data, where, tfjs.Unsupported)
	case tfjs.Backend != "webgpu":
		b.Fatalf("TF.js asked for webgpu ran on %q (%s)", tfjs.Backend, tfjs.Kernel)
	default:
		b.Logf("%s on %s inputs, %s: TF.js webgpu %.1f examples/s (rounds %.1f; %s)",
			model, data, where, tfjs.Median, tfjs.Rounds, tfjs.Kernel)
		if !strings.Contains(strings.ToLower(tfjs.Adapter), "swiftshader") {
			b.Logf("note: TF.js's WebGPU adapter is %q, not SwiftShader", tfjs.Adapter)
		}
		b.ReportMetric(tfjs.Median, "tfjs-webgpu-examples/s")
	}
	// Ours as the worker runs a lease of one step (the whole update comes
	// back after it), then of gpuLeaseSteps steps on the same batch (the
	// download shared: per step, what TF.js's step is, which reads back
	// only its loss).
	ours := run(b, "runOurs", model, data, "webgpu", 1)
	if ours.Unsupported != "" || ours.Backend != "webgpu" {
		why := ours.Unsupported
		if why == "" {
			why = ours.BackendReason
		}
		b.Logf("%s on %s inputs, %s: our webgpu backend is not available (reply's backend %q, kernel %q: %s)",
			model, data, where, ours.Backend, ours.Kernel, why)
		return
	}
	b.Logf("%s on %s inputs, %s: crowdtrain webgpu %.1f examples/s (rounds %.1f; kernel %s)",
		model, data, where, ours.Median, ours.Rounds, ours.Kernel)
	b.ReportMetric(ours.Median, "crowdtrain-webgpu-examples/s")
	long := run(b, "runOurs", model, data, "webgpu", gpuLeaseSteps)
	b.Logf("%s on %s inputs, %s: crowdtrain webgpu, leases of %d steps: %.1f examples/s (rounds %.1f)",
		model, data, where, gpuLeaseSteps, long.Median, long.Rounds)
	b.ReportMetric(long.Median, "crowdtrain-webgpu-lease-examples/s")
	if tfjs.Unsupported == "" {
		b.ReportMetric(ours.Median/tfjs.Median, "crowdtrain-webgpu/tfjs-webgpu")
		b.ReportMetric(long.Median/tfjs.Median, "crowdtrain-webgpu-lease/tfjs-webgpu")
	}
}

// gpuLeaseSteps is the longer lease our webgpu backend is timed on.
const gpuLeaseSteps = 4
