package web_test

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
)

// BenchmarkBrowserMemoryGPTSmall measures what a tab needs to train
// gpt-small (12.3M parameters, context 256): one tab in headless
// Chromium computes one task of the preset's batch (GPTSMALL_BATCH to
// change it) on a tree of this repository's Go source, tokenized by a
// 4,096-token BPE, and the page's wasm memory high-water mark is read
// once its first result is answered. GPTSMALL_MEMORY_MB gives the tab
// that memory share (the page's ?memory_mb=), within which it computes
// the batch in micro-batches. The figure goes in docs/BROWSER.md.
// It is a benchmark, not a test: one task of gpt-small in wasm takes
// minutes on a 2-core machine.
func BenchmarkBrowserMemoryGPTSmall(b *testing.B) {
	batch, err := strconv.Atoi(cmp.Or(os.Getenv("GPTSMALL_BATCH"), "16"))
	if err != nil || batch < 1 {
		b.Fatalf("GPTSMALL_BATCH=%q: want a positive batch size", os.Getenv("GPTSMALL_BATCH"))
	}
	page := "/"
	if v := os.Getenv("GPTSMALL_MEMORY_MB"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("GPTSMALL_MEMORY_MB=%q: want a positive number of MB", v)
		}
		page = "/?memory_mb=" + v
	}
	tree := testenv.GoSourceTree(b, "..", "coordinator", "engine", "nn", "worker", "tokenizer", "dataset", "jobspec", "protocol", "store")
	spec, err := jobspec.Parse([]byte(fmt.Sprintf(`name: tab-gpt-small
model: gpt-small
dataset: {type: text, path: %q, glob: "**/*.go", val_fraction: 0.05}
tokenizer: {type: bpe, vocab: 4096}
batch_size: %d
eval_every: 1000000
`, tree, batch)))
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		s := newSiteWith(b, spec, func(cfg *coordinator.Config) { cfg.LoadData = dataset.Load })
		ctx := testbrowser.New(b)
		start := time.Now()
		do(b, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+page), chromedp.WaitVisible("#contribute"), chromedp.Click("#contribute"))
		s.waitFor("the tab's first result", 30*time.Minute, func() bool {
			v := s.view()
			return v.UpdatesApplied > 0 || len(v.Rejections) > 0 && sumRejections(v) > 0
		})
		took := time.Since(start)
		time.Sleep(1500 * time.Millisecond) // a fresh report
		shown := text(b, ctx, "#memory")
		mb, err := strconv.ParseFloat(strings.TrimSuffix(shown, " MB"), 64)
		if err != nil {
			b.Fatalf("#memory shows %q", shown)
		}
		v := s.view()
		b.ReportMetric(mb, "wasm-MB")
		b.ReportMetric(took.Seconds(), "s-first-result")
		b.Logf("gpt-small in a tab (%s), batch %d: wasm memory %.0f MB after its first result (%.0f s from the page's load; applied %d, refused %v)",
			page, batch, mb, took.Seconds(), v.UpdatesApplied, v.Rejections)
	}
}

func sumRejections(v coordinator.JobView) (n int64) {
	for _, c := range v.Rejections {
		n += c
	}
	return n
}
