package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// The contribute page trains on the backend ?backend= asks for, falls back
// as it would without the parameter when that one is not available, and
// says which it uses and why; without the parameter it picks the best and
// remembers it. Each case trains until the coordinator accepts results
// from the tab, and the coordinator's worker list names the same backend.
func TestBrowserBackends(t *testing.T) {
	testenv.Long(t, "trains in Chromium on every browser backend")
	s := newSite(t, longSpec(t, "mnist-mlp"))
	ctx := testbrowser.New(t)
	for _, c := range []struct {
		query       string
		want        string
		reasonWords []string // words #backend-reason must hold
	}{
		{"?backend=wasm-go", "wasm-go", []string{"?backend=wasm-go", "scalar Go kernel"}},
		{"?backend=wasm-simd", "wasm-simd", []string{"?backend=wasm-simd", "SIMD"}},
		// A browser without WebAssembly SIMD (stood in for by ?simd=off)
		// trains on the scalar kernel, saying why.
		{"?backend=wasm-simd&simd=off", "wasm-go", []string{"wasm-simd is not available", "turned off"}},
		// WebGPU on SwiftShader's adapter, which the page names as a
		// software one.
		{"?backend=webgpu", "webgpu", []string{"?backend=webgpu", "WebGPU", "software adapter"}},
		// A browser without WebGPU (stood in for by ?webgpu=off): the best
		// CPU backend, saying why.
		{"?backend=webgpu&webgpu=off", "wasm-simd", []string{"WebGPU is not available", "no WebGPU", "SIMD"}},
		{"?backend=webgpu&webgpu=off&simd=off", "wasm-go", []string{"WebGPU is not available", "scalar Go kernel"}},
		// A GPU whose device is lost at once (?webgpu=lost): Go's self-test
		// finds it, and the tab trains on wasm-simd, saying why.
		{"?backend=webgpu&webgpu=lost", "wasm-simd", []string{"the GPU failed", "wasm-simd"}},
		{"?backend=nonsense", "wasm-simd", []string{"names no backend"}},
		// Without the parameter: the best there is, remembered below. The
		// only GPU here is a software one, slower than the CPU's SIMD.
		{"", "wasm-simd", []string{"chosen automatically", "software one"}},
	} {
		t.Run(c.query, func(t *testing.T) {
			do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/"+c.query), chromedp.WaitVisible("#contribute"),
				chromedp.Click("#contribute"))
			waitPage(t, ctx, "#backend to name a backend", func() bool { return text(t, ctx, "#backend") != "–" })
			if got := text(t, ctx, "#backend"); got != c.want {
				t.Errorf("#backend %q, want %q", got, c.want)
			}
			reason := text(t, ctx, "#backend-reason")
			for _, w := range c.reasonWords {
				if !strings.Contains(reason, w) {
					t.Errorf("#backend-reason %q lacks %q", reason, w)
				}
			}
			waitPage(t, ctx, "accepted updates", func() bool { return number(t, ctx, "#accepted") >= 3 })
			var backends []string
			for _, w := range s.srv.WorkerViews() {
				if w.Kind == protocol.KindBrowser {
					backends = append(backends, w.Backend)
				}
			}
			if len(backends) != 1 || backends[0] != c.want {
				t.Errorf("the coordinator lists browser workers with backends %v, want one on %s", backends, c.want)
			}
			do(t, ctx, 10*time.Second, chromedp.Click("#stop"))
			s.waitFor("the tab's worker to leave", 30*time.Second, func() bool {
				n, _, _ := s.browserWorkers()
				return n == 0
			})
		})
	}
	// The automatic choice is remembered: a later visit asks for it.
	stored := get(t, ctx, chromedp.Evaluate[string](`JSON.parse(localStorage.getItem('crowdtrain.settings.v1')).backend`))
	if stored != "wasm-simd" {
		t.Errorf("remembered backend %q, want wasm-simd", stored)
	}
	do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/"), chromedp.WaitVisible("#contribute"), chromedp.Click("#contribute"))
	waitPage(t, ctx, "#backend", func() bool { return text(t, ctx, "#backend") != "–" })
	if got, reason := text(t, ctx, "#backend"), text(t, ctx, "#backend-reason"); got != "wasm-simd" || !strings.Contains(reason, "remembered") {
		t.Errorf("a later visit: #backend %q (%q), want wasm-simd, remembered", got, reason)
	}
	// "Use my GPU" turned off: the workers start again without the GPU,
	// saying so, and the choice is remembered.
	do(t, ctx, 10*time.Second, chromedp.Click("#use-gpu"))
	waitPage(t, ctx, "#backend-reason to say the GPU is off", func() bool {
		return strings.Contains(text(t, ctx, "#backend-reason"), `"use my GPU" is off`)
	})
	if got := text(t, ctx, "#backend"); got != "wasm-simd" {
		t.Errorf("with the GPU off: #backend %q, want wasm-simd", got)
	}
	do(t, ctx, 10*time.Second, chromedp.Click("#stop"))
	do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/"), chromedp.WaitVisible("#contribute"))
	if on := get(t, ctx, chromedp.Evaluate[bool](`document.getElementById('use-gpu').checked`)); on {
		t.Error(`"use my GPU" is checked again after a reload; it was turned off`)
	}
}
