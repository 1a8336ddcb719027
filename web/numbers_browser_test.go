package web_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/web"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// The tab's backends compute the native worker's numbers in headless
// Chromium too: one batch of every preset, parameters from seed 1, on
// wasm-go and on wasm-simd, against the native CPU backend on the same
// batch. The relative L2 distance of the gradients must be under 1e-6
// (the kernels sum in other orders: float32 rounding). Under Node the
// same check runs in package worker/wasm.
func TestBrowserGradientMatchesNative(t *testing.T) {
	testenv.Long(t, "computes gradients in Chromium")
	ctx := numbersPage(t)

	train, _ := loadMNIST(t)
	for _, c := range []struct {
		model string
		batch int
	}{{"mnist-mlp", 64}, {"mnist-cnn", 64}, {"charlm-tiny", 16}, {"charlm", 4}, {"gpt-mini", 4}} {
		spec, err := nn.Preset(c.model)
		if err != nil {
			t.Fatal(err)
		}
		model, err := nn.NewModel(spec)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, c.batch*model.InputSize)
		labels := make([]int32, c.batch*model.LabelsPerExample)
		if model.LabelsPerExample > 1 {
			// Windows of a text: each position's label is the next byte
			// (gpt-mini reads them as token ids under 256).
			text := []byte("In the beginning God created the heaven and the earth. And the earth was without form, and void; ")
			for i := range x {
				x[i] = float32(text[i%len(text)])
			}
			for i := range labels {
				labels[i] = int32(text[(i+1)%len(text)])
			}
		} else {
			train.Fill(x, labels, 0, c.batch)
		}
		// The native CPU backend, one thread, on the same batch.
		b, err := cpu.New(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Prepare(model, c.batch); err != nil {
			t.Fatal(err)
		}
		params := make([]float32, model.NumParams)
		model.Init(params, 1)
		want := make([]float32, model.NumParams)
		wantLoss, wantCorrect, err := b.Gradient(params, x, labels, want)
		if err != nil {
			t.Fatal(err)
		}
		xb := floatBytes(x)
		lb := make([]byte, len(labels))
		for i, l := range labels {
			lb[i] = byte(l)
		}
		for _, backend := range []string{"wasm-go", "wasm-simd"} {
			r := pageGradient(t, ctx, gradientAsk{Model: c.model, Backend: backend, X: xb, Labels: lb})
			if r.Backend != backend {
				t.Fatalf("%s: asked for %s, computed on %s (%s)", c.model, backend, r.Backend, r.BackendReason)
			}
			raw := r.Grad
			if len(raw) != 4*len(want) {
				t.Fatalf("%s on %s: %d gradient bytes, want %d", c.model, backend, len(raw), 4*len(want))
			}
			var diff, norm float64
			for i, w := range want {
				d := float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))) - float64(w)
				diff += d * d
				norm += float64(w) * float64(w)
			}
			rel := math.Sqrt(diff / norm)
			t.Logf("%s on %s in Chromium against native %s: relative L2 distance %.2g, loss sum %.6f against %.6f",
				c.model, backend, b.Name(), rel, r.LossSum, wantLoss)
			if !(rel < 1e-6) {
				t.Errorf("%s on %s: gradient %.3g from the native one (relative L2), want under 1e-6", c.model, backend, rel)
			}
			if r.Correct != wantCorrect || math.Abs(r.LossSum-wantLoss) > 1e-5*math.Abs(wantLoss) {
				t.Errorf("%s on %s: loss sum %v and %d correct, native %v and %d", c.model, backend, r.LossSum, r.Correct, wantLoss, wantCorrect)
			}
		}
	}
}

// numbersPage opens testdata/numbers.html, served with the browser
// worker built from the working tree, in headless Chromium.
func numbersPage(t *testing.T) context.Context {
	t.Helper()
	ctx := testbrowser.New(t)
	pages, err := web.NewHandler(web.Options{Dist: os.DirFS(buildWorker(t)), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/static/", pages)
	mux.HandleFunc("/numbers/", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join("testdata", "numbers.html"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	do(t, ctx, 30*time.Second, chromedp.Navigate(srv.URL+"/numbers/"))
	return ctx
}

// gradientAsk is a {type: "gradient"} control: a preset or a spec (JSON),
// the backend, the batch as bytes (float32 LE inputs, a byte per label)
// and the parameters (float32 LE; nil: nn's initialisation from seed 1).
type gradientAsk struct {
	Model, Spec, Backend, WebGPU string
	Lease                        string // a lease in JSON: its update comes back as Grad
	X, Labels, Params            []byte
	Reuse                        bool // keep the page's worker for the next ask with Reuse
}

// pageGradient is a fresh browser worker's answer to ask.
type pageGradientResult struct {
	Backend, BackendReason string
	LossSum                float64
	Correct                int
	Grad, Output           []byte
}

func pageGradient(t *testing.T, ctx context.Context, ask gradientAsk) pageGradientResult {
	t.Helper()
	enc := base64.StdEncoding.EncodeToString
	msg := map[string]any{"reuse": ask.Reuse, "model": ask.Model, "spec": ask.Spec, "backend": ask.Backend, "webgpu": ask.WebGPU, "lease": ask.Lease,
		"x": enc(ask.X), "labels": enc(ask.Labels)}
	if ask.Params != nil {
		msg["params"] = enc(ask.Params)
	}
	js, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	out, err := chromedp.Run(tctx, chromedp.Evaluate[string]("gradient("+string(js)+")", chromedp.EvalAwaitPromise))
	cancel()
	if err != nil {
		t.Fatalf("%s%s on %s: %v", ask.Model, ask.Spec, ask.Backend, err)
	}
	var r struct {
		Backend, BackendReason string
		LossSum                float64
		Correct                int
		Grad, Output           string
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	res := pageGradientResult{Backend: r.Backend, BackendReason: r.BackendReason, LossSum: r.LossSum, Correct: r.Correct}
	if res.Grad, err = base64.StdEncoding.DecodeString(r.Grad); err != nil {
		t.Fatal(err)
	}
	if res.Output, err = base64.StdEncoding.DecodeString(r.Output); err != nil {
		t.Fatal(err)
	}
	return res
}

// floatBytes is v as little-endian float32 bytes; floatsOf the reverse.
func floatBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func floatsOf(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
