package web_test

import (
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/web"
)

// BenchmarkWorkerThroughput measures end-to-end examples/s of one browser
// worker (one Web Worker in headless Chromium; on wasm-go, then on
// wasm-simd) and, in the same run against
// the same coordinator, one native worker on one thread: accepted examples
// over a fixed window after a warm-up, counted by the coordinator. It also
// reports the size of the browser worker as downloaded, raw and gzipped.
//
//	go test -run '^$' -bench WorkerThroughput -benchtime 1x -count 3 ./web/
func BenchmarkWorkerThroughput(b *testing.B) {
	for _, preset := range []string{"mnist-mlp", "mnist-cnn"} {
		b.Run(preset, func(b *testing.B) {
			s := newSite(b, longSpec(b, preset))
			ctx := testbrowser.New(b)
			const window = 10 * time.Second
			for range b.N {
				// The tab on each backend: the scalar Go kernel (as
				// before wasm SIMD), the SIMD module, and WebGPU on the
				// adapter headless Chromium has (SwiftShader, a GPU
				// emulated on the CPU: a figure about the path, not about
				// a GPU).
				rate := map[string]float64{}
				for _, backend := range []string{"wasm-go", "wasm-simd", "webgpu"} {
					do(b, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/?backend="+backend), chromedp.WaitVisible("#contribute"),
						chromedp.Click("#contribute"))
					rate[backend] = measure(s, window, func() int64 { _, _, ex := s.browserWorkers(); return ex })
					if got := text(b, ctx, "#backend"); got != backend {
						b.Fatalf("the tab trained on %s, asked for %s", got, backend)
					}
					do(b, ctx, 10*time.Second, chromedp.Click("#stop"))
					s.waitFor("the browser worker to leave", 30*time.Second, func() bool { n, _, _ := s.browserWorkers(); return n == 0 })
				}

				stop := startNativeWorker(b, s.wsURL(), 1)
				native := measure(s, window, func() int64 { return s.nativeExamples() })
				stop()
				b.ReportMetric(rate["wasm-simd"], "browser-examples/s")
				b.ReportMetric(rate["wasm-go"], "browser-go-examples/s")
				b.ReportMetric(rate["wasm-simd"]/rate["wasm-go"], "simd/go")
				b.ReportMetric(rate["webgpu"], "browser-webgpu-swiftshader-examples/s")
				b.ReportMetric(native, "native-examples/s")
				b.ReportMetric(rate["wasm-simd"]/native, "browser/native")
			}
			pages, err := web.NewHandler(web.Options{Dist: os.DirFS(buildWorker(b)), Logf: b.Logf})
			if err != nil {
				b.Fatal(err)
			}
			raw, gz, _ := pages.Compressed(web.WasmFile)
			b.ReportMetric(float64(raw)/1e6, "wasm-MB")
			b.ReportMetric(float64(gz)/1e6, "wasm-gzip-MB")
		})
	}
}

// measure waits for the first accepted examples and a 3 s warm-up, then
// returns the examples/s that count() rises by over window.
func measure(s *site, window time.Duration, count func() int64) float64 {
	s.waitFor("a worker's first accepted examples", 2*time.Minute, func() bool { return count() > 0 })
	time.Sleep(3 * time.Second)
	start, t0 := count(), time.Now()
	time.Sleep(window)
	return float64(count()-start) / time.Since(t0).Seconds()
}

func (s *site) nativeExamples() int64 {
	var ex int64
	for _, w := range s.srv.WorkerViews() {
		if w.Kind == protocol.KindNative {
			ex += w.Examples
		}
	}
	return ex
}
