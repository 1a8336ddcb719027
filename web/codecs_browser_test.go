package web_test

import (
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
)

// A tab trains a job whose updates go int8 and whose snapshots go fp16:
// the browser's results decode and are accepted, and what crosses the
// wire is a fraction of the fp32 bytes (int8 updates, f16 snapshots and
// deltas from the snapshot the tab kept).
func TestBrowserTrainsWithCompressedCodecs(t *testing.T) {
	testenv.Long(t, "trains in Chromium in each update codec")
	spec := longSpec(t, "mnist-mlp")
	spec.UpdateCodec, spec.SnapshotCodec = jobspec.CodecInt8, jobspec.CodecFP16
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	s := newSite(t, spec)
	ctx := testbrowser.New(t)
	s.contribute(t, ctx)
	s.waitFor("the tab's 30 accepted results", 2*time.Minute, func() bool {
		_, accepted, _ := s.browserWorkers()
		return accepted >= 30
	})
	v := s.view()
	if n := v.Rejections["invalid"]; n != 0 {
		t.Fatalf("%d of the tab's int8 results were refused as invalid (rejections %v)", n, v.Rejections)
	}
	full := 4 * float64(v.NumParams)
	results := float64(v.UpdatesApplied + v.UpdatesRejected)
	perResult := float64(v.BytesIn) / results
	t.Logf("%.0f results: %.0f bytes each up (fp32: %.0f), %d bytes of snapshots down, compression %.2f",
		results, perResult, full, v.BytesOut, v.Compression)
	// int8 is 1 byte a value plus 8 a block of 256: about 0.26 of fp32.
	if perResult > 0.3*full {
		t.Errorf("the tab sent %.0f bytes a result, more than int8's %.0f", perResult, 0.3*full)
	}
	// f16 snapshots alone halve the download; the updates quarter the
	// upload.
	if v.Compression < 2.5 {
		t.Errorf("compression %.2f, want over 2.5 with int8 updates and f16 snapshots", v.Compression)
	}
}
