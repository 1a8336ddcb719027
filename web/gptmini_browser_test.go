package web_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// A browser tab trains gpt-mini, the tokenized transformer, beside a
// native worker: the job's text is a tree of this repository's own Go
// source, tokenized by a 1,024-token BPE trained when the job is created;
// the tab's results (uint16 token shards, the tied output layer, wasm)
// are accepted, and the held-out loss falls well below a uniform guess.
func TestBrowserTrainsGPTMiniBesideANativeWorker(t *testing.T) {
	testenv.Long(t, "trains gpt-mini in Chromium beside a native worker")
	tree := testenv.GoSourceTree(t, "..", "tokenizer", "dataset", "jobspec")
	spec, err := jobspec.Parse([]byte(fmt.Sprintf(`name: tab-gpt-mini
model: gpt-mini
dataset: {type: text, path: %q, glob: "**/*.go", val_fraction: 0.1}
tokenizer: {type: bpe, vocab: 1024}
outer_optimizer: {type: adamw, lr: 0.003, weight_decay: 0.01, clip_norm: 1}
batch_size: 16
eval_every: 10
max_epochs: 50
`, tree)))
	if err != nil {
		t.Fatal(err)
	}
	uniform := math.Log(1024)
	spec.TargetLoss = uniform - 1.5 // well below a uniform guess (6.93 nats)
	s := newSiteWith(t, spec, func(cfg *coordinator.Config) { cfg.LoadData = dataset.Load })
	ctx := testbrowser.New(t)
	s.contribute(t, ctx)
	s.waitFor("the browser worker to connect", time.Minute, func() bool {
		n, _, _ := s.browserWorkers()
		return n == 1
	})
	stop := startNativeWorker(t, s.wsURL(), 1)
	defer stop()
	var accepted, rejected int64
	s.waitFor("the held-out loss to fall 1.5 nats below a uniform guess", 6*time.Minute, func() bool {
		for _, w := range s.srv.WorkerViews() {
			if w.Kind == protocol.KindBrowser {
				accepted, rejected = max(accepted, w.Accepted), max(rejected, w.Rejected)
			}
		}
		return s.view().State != coordinator.StateRunning
	})
	v := s.view()
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Loss > spec.TargetLoss {
		t.Fatalf("job ended %s (%s) with eval %+v; want done with the loss below %.2f", v.State, v.Reason, v.Eval, spec.TargetLoss)
	}
	t.Logf("done at version %d: loss %.3f nats/token; the tab: %d accepted, %d rejected; job rejections %v",
		v.Version, v.Eval.Loss, accepted, rejected, v.Rejections)
	if accepted == 0 || accepted <= rejected {
		t.Errorf("the tab had %d results accepted and %d rejected; want over half accepted", accepted, rejected)
	}
}
