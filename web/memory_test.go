package web_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// A tab that trains for hours must not run out of memory: Go's js/wasm
// linear memory only grows, so it records the heap's high-water mark. A
// worker that held on to each lease's 940 KB snapshot or update would pass
// 180 MB within 200 leases. Measured here: 29 MB with the worker's reused
// buffers, 42 MB when every fetch allocates a fresh body (the GC keeps up).
func TestBrowserWorkerMemoryLevelsOff(t *testing.T) {
	testenv.Long(t, "trains in Chromium for many leases")
	s := newSite(t, longSpec(t, "mnist-mlp"))
	ctx := testbrowser.New(t)
	s.contribute(t, ctx)
	memory := func() float64 {
		mb, err := strconv.ParseFloat(strings.TrimSuffix(text(t, ctx, "#memory"), " MB"), 64)
		if err != nil {
			t.Fatalf("#memory shows %q", text(t, ctx, "#memory"))
		}
		return mb
	}
	s.waitFor("200 accepted updates from the browser", 3*time.Minute, func() bool { _, acc, _ := s.browserWorkers(); return acc >= 200 })
	time.Sleep(1500 * time.Millisecond) // a fresh report
	mb := memory()
	t.Logf("wasm memory after 200 updates of mnist-mlp: %.0f MB", mb)
	if mb <= 0 || mb > 96 {
		t.Errorf("the browser worker's wasm memory is %.0f MB after 200 updates; want it below 96 MB (buffers must be reused)", mb)
	}
}
