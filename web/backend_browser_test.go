package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// The contribute page trains on the backend ?backend= asks for, falls back
// as it would without the parameter when that one is not available, and
// says which it uses and why; without the parameter it picks the best and
// remembers it. Each case trains until the coordinator accepts results
// from the tab, and the coordinator's worker list names the same backend.
func TestBrowserBackends(t *testing.T) {
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
		// No WebGPU backend in this version: the best CPU one, saying so.
		{"?backend=webgpu", "wasm-simd", []string{"no WebGPU backend"}},
		{"?backend=webgpu&simd=off", "wasm-go", []string{"no WebGPU backend", "scalar Go kernel"}},
		{"?backend=nonsense", "wasm-simd", []string{"names no backend"}},
		// Without the parameter: the best there is, remembered below.
		{"", "wasm-simd", []string{"chosen automatically"}},
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
}
