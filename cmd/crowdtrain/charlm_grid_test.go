package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/web"
)

// CharLMTokensVar sets the training budget of TestCharLMGridMatchesPyTorch
// in tokens (examples x 128). `make bench-charlm` sets it to 2,000,000.
const CharLMTokensVar = "CROWDTRAIN_CHARLM_TOKENS"

// charlmTestTokens is the budget `make test` trains (128 rounds), the
// model charlm itself, not a smaller one.
const charlmTestTokens = 524288

// The charlm job end to end, with real processes: `crowdtrain serve` on
// the King James text (a prefix of what `bible` prints, cut so that one
// epoch of its training split is the budget), two `crowdtrain work`
// processes and one browser tab in headless Chromium, all training the
// built-in charlm model with the charlm job's optimizer. Its validation
// loss after the budget is within 5% of the same model trained
// single-process in PyTorch (scripts/torch_reference.py train) from the
// same initial weights (version 0: charlm's Init at the job's seed) on the
// same text for the same number of tokens, scored on the same 64
// validation windows. Its samples, from `crowdtrain sample` and on the
// admin page, contain common words of the corpus.
//
// The mode makes the comparison fair: PyTorch takes one AdamW step (lr
// 3e-3, weight decay 0.01, clip_norm 1.0) per batch of 32 windows on the
// mean gradient. The grid runs sync rounds of round_size 2 results of
// batch_size 16 with one backup worker: each round averages two workers'
// mean gradients of 16 windows, which is the mean gradient of 32, and the
// coordinator clips it and takes the same AdamW step on it, from the one
// version every result of the round computed from. The third task of a
// round (the backup) is rejected as late and its windows trained later in
// the epoch, so the epoch is every window once, as PyTorch's permutation.
// Shards of 1024 windows (not the default 1000) cut into whole tasks of 16,
// so no round averages a shard's short last task with a full one.
// Asynchronous modes would apply stale gradients and diloco local AdamW
// steps: a different optimizer from the baseline.
func TestCharLMGridMatchesPyTorch(t *testing.T) {
	testenv.Long(t, "trains charlm on the grid and in PyTorch (minutes)")
	tokens := int64(charlmTestTokens)
	if s := os.Getenv(CharLMTokensVar); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 4096 {
			t.Fatalf("%s=%q: want a number of tokens >= 4096", CharLMTokensVar, s)
		}
		tokens = n
	}
	const ctxLen, batch = 128, 32
	// Whole PyTorch batches of 32 windows; the grid's epoch is the same
	// windows.
	examples := tokens / ctxLen / batch * batch
	tokens = examples * ctxLen

	py := torchPython(t)
	testbrowser.Chromium(t)
	kjv := kingJamesText(t)
	dir := t.TempDir()
	corpus := filepath.Join(dir, "kjv.txt")
	kjvPrefix := textWithTrainWindows(t, kjv, examples, ctxLen, dataset.DefaultValFraction)
	if err := os.WriteFile(corpus, kjvPrefix, 0o644); err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir() // serve --web-dist: the binary the tests build embeds no browser worker
	if err := testbrowser.BuildWorker(dist); err != nil {
		t.Fatal(err)
	}

	// Version 0 as the coordinator makes it, exported for PyTorch.
	ms, m := presetModel(t, "charlm")
	const seed = 1
	params := make([]float32, m.NumParams)
	m.Init(params, seed)
	opt := nn.OptimizerSpec{Type: nn.OptAdamW, LR: 3e-3, WeightDecay: 0.01, ClipNorm: 1}
	initFile := exportSpec(t, dir, jobspec.Spec{Name: "charlm", Model: ms, BatchSize: batch, OuterOptimizer: opt}, params)

	// PyTorch trains while the grid does, so the test takes the longer of
	// the two, not their sum (on 2 cores both run slower for it).
	type torchRun struct {
		out  []byte
		err  error
		wall time.Duration
	}
	torchDone := make(chan torchRun, 1)
	torchCtx, stopTorch := context.WithCancel(context.Background())
	t.Cleanup(stopTorch) // a test that fails first leaves no PyTorch behind
	go func() {
		start := time.Now()
		out, err := exec.CommandContext(torchCtx, py, torchReference, "train", "--model", initFile, "--data", corpus,
			"--tokens", strconv.FormatInt(tokens, 10), "--batch", strconv.Itoa(batch), "--threads", "1",
			"--seed", "1").CombinedOutput()
		torchDone <- torchRun{out, err, time.Since(start)}
	}()

	// The grid. The spec is the built-in charlm job (its model, optimizer
	// and seed) on the corpus file, in the mode above, for one epoch.
	spec := filepath.Join(dir, "charlm.yaml")
	os.WriteFile(spec, []byte(fmt.Sprintf(`name: charlm
model: charlm
dataset: {type: text, path: kjv.txt}
outer_optimizer: {type: adamw, lr: 0.003, weight_decay: 0.01, clip_norm: 1.0}
mode: sync
round_size: 2
backup_workers: 1
batch_size: 16
shard_size: 1024
max_epochs: 1
seed: %d
`, seed)), 0o644)
	checkLikeBuiltin(t, spec)
	addr := freeAddr(t)
	gridStart := time.Now()
	srv := startProc(t, "serve", "--addr", addr, "--db", "", "--job", spec, "--web-dist", dist,
		"--admin-token", modesAdminToken, "--progress", "15s")
	srv.waitLine("coordinator listening", time.Minute)
	browser := testbrowser.New(t)
	do := func(ctx context.Context, timeout time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		tctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := chromedp.Do(tctx, steps...); err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	do(browser, time.Minute, "contribute", chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible("#contribute"), chromedp.Click("#contribute"))
	for range 2 {
		startProc(t, "work", "--coordinator", "ws://"+addr+"/ws", "--threads", "1")
	}

	// Each worker's counters, kept while it is connected.
	var mu sync.Mutex
	workers := map[string]coordinator.WorkerView{}
	pollWorkers := func() {
		var views []coordinator.WorkerView
		if adminCall(t, http.MethodGet, "http://"+addr+"/api/v1/workers", nil, &views) != http.StatusOK {
			return
		}
		mu.Lock()
		for _, w := range views {
			workers[w.ID] = w
		}
		mu.Unlock()
	}
	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(2 * time.Second):
				pollWorkers()
			}
		}
	}()
	// A generous bound: 300 tokens/s, a fraction of what the grid does on
	// 2 cores even when other work shares them.
	limit := max(10*time.Minute, time.Duration(tokens/300)*time.Second)
	v := waitJob(t, addr, limit, "charlm to finish its epoch", ended)
	gridWall := time.Since(gridStart)
	pollWorkers()
	close(stopPoll)
	<-polled
	if v.State != coordinator.StateDone || v.Eval == nil {
		t.Fatalf("charlm ended %s (%s) with eval %+v; log:\n%s", v.State, v.Reason, v.Eval, srv.logText())
	}
	gridLoss := v.Eval.Loss
	tr := <-torchDone
	if tr.err != nil {
		t.Fatalf("torch_reference.py train: %v\n%s", tr.err, tr.out)
	}
	torchWall := tr.wall
	torchLoss := torchFigure(t, tr.out, "val_loss")
	t.Logf("PyTorch: %s", strings.TrimSpace(string(tr.out)))
	for _, l := range strings.Split(srv.logText(), "\n") {
		if strings.Contains(l, "epoch") || strings.Contains(l, "done") {
			t.Logf("serve: %s", l)
		}
	}

	// Tokens per second of each worker kind: windows computed (accepted
	// or not) times 128, over the grid's wall time, per worker.
	kinds := map[string][]string{}
	var browserComputed, browserAccepted int64
	mu.Lock()
	ids := make([]string, 0, len(workers))
	for id := range workers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		w := workers[id]
		rate := float64(w.Examples*ctxLen) / gridWall.Seconds()
		kinds[w.Kind] = append(kinds[w.Kind], fmt.Sprintf("%.0f", rate))
		t.Logf("worker %s (%s/%s): %d windows computed, %d results accepted, %d rejected, %.0f tokens/s",
			id, w.Kind, w.Backend, w.Examples, w.Accepted, w.Rejected, rate)
		if w.Kind == protocol.KindBrowser {
			browserComputed += w.Examples
			browserAccepted += w.Accepted
		}
	}
	mu.Unlock()

	ratio := gridLoss / torchLoss
	t.Logf("charlm figures: %d tokens (%d windows of 128); grid validation loss %.4f (version %d, %s), PyTorch %.4f (%s), ratio %.4f; tokens/s per worker: native %s, browser %s",
		tokens, examples, gridLoss, v.Eval.Version, gridWall.Round(time.Second), torchLoss, torchWall.Round(time.Second), ratio,
		strings.Join(kinds[protocol.KindNative], ", "), strings.Join(kinds[protocol.KindBrowser], ", "))
	if len(kinds[protocol.KindNative]) != 2 || len(kinds[protocol.KindBrowser]) != 1 {
		t.Errorf("workers seen: %v; want 2 native and 1 browser", kinds)
	}
	if browserComputed == 0 {
		t.Errorf("the browser tab computed no windows: it took no part in training")
	}
	t.Logf("the browser tab: %d windows computed, %d results accepted", browserComputed, browserAccepted)
	// A result the validation refused and its recomputation vindicated
	// is credited, not applied: its windows count outside examples_seen.
	if seen := v.ExamplesSeen + v.Rechecks.VindicatedExamples; seen != examples {
		t.Errorf("the grid trained %d windows (%d of them vindicated, not applied), want the budget of %d", seen, v.Rechecks.VindicatedExamples, examples)
	}
	if !(ratio >= 0.95 && ratio <= 1.05) {
		t.Errorf("grid validation loss %.4f vs PyTorch's %.4f: ratio %.4f, want within 5%%", gridLoss, torchLoss, ratio)
	}

	// Samples: `crowdtrain sample`, and the one the admin page shows. After
	// 2M tokens (loss near 1.95) a sample is mostly words of the corpus,
	// LORD, shall and unto among them; after the half million of `make
	// test` (loss near 2.33, PyTorch's too) fewer come out whole, and of
	// the prompt's words only "the" reliably (a run whose loss matched
	// PyTorch's to 0.04% wrote "the" but not "and").
	common := commonWords(kjvPrefix)
	wantWords, wantNamed := 4, 1
	if tokens >= 1_000_000 {
		wantWords, wantNamed = 12, 4
	}
	// The final evaluation may still be generating its own sample: one at
	// a time per job, so a request meanwhile is told to try again.
	var code int
	var sample, stderr string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		code, sample, stderr = runCmd(t, context.Background(), "sample", "--coordinator", "http://"+addr, "--token", modesAdminToken,
			"--job", v.ID, "--prompt", "And the LORD said unto Moses, ", "--tokens", "1000", "--temperature", "0.5", "--seed", "7")
		if code == 0 || !strings.Contains(stderr, "try again") || time.Now().After(deadline) {
			break
		}
	}
	if code != 0 {
		t.Fatalf("crowdtrain sample: exit %d: %s", code, stderr)
	}
	t.Logf("crowdtrain sample: %q", sample)
	checkSampleWords(t, "crowdtrain sample", sample, common, wantWords, wantNamed)

	admin := testbrowser.NewTab(t, browser)
	do(admin, time.Minute, "admin page", chromedp.Navigate("http://"+addr+"/admin"), chromedp.WaitVisible("#token"))
	if _, err := chromedp.Run(admin, chromedp.Evaluate[bool](fmt.Sprintf(
		`(() => { const e = document.querySelector('#token'); e.value = %q; e.dispatchEvent(new Event('input', {bubbles: true})); return true })()`, modesAdminToken))); err != nil {
		t.Fatalf("browser: %v", err)
	}
	do(admin, 10*time.Second, "sign in", chromedp.Click("#signin"), chromedp.WaitVisible("#job-sample"))
	// The final evaluation's sample is generated after its loss is
	// recorded, off the job's loop; the page shows it once it refreshes.
	v = waitJob(t, addr, 2*time.Minute, "the final evaluation's sample", func(v coordinator.JobView) bool {
		return v.Eval != nil && v.Eval.Sample != ""
	})
	var shown string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		var err error
		if shown, err = chromedp.Run(admin, chromedp.TextContent("#job-sample")); err != nil {
			t.Fatalf("browser: reading the admin page's sample: %v", err)
		}
		if shown == v.Eval.Sample || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("admin page sample (version %d): %q", v.Eval.Version, shown)
	if shown != v.Eval.Sample {
		t.Errorf("the admin page shows %q, the job's final evaluation has %q", shown, v.Eval.Sample)
	}
	// The page's sample is short (160 bytes) and hot (temperature 0.8), so
	// it holds few words: half the common words, and after 2M tokens one
	// of kjvWords (after make test's half million one run had none). The
	// 1,000-byte sample above carries the real-words check.
	pageNamed := 0
	if tokens >= 1_000_000 {
		pageNamed = 1
	}
	checkSampleWords(t, "the admin page's sample", shown, common, wantWords/2, pageNamed)
}

// kjvWords are words the prompt names for the King James text's samples.
var kjvWords = []string{"the", "and", "LORD", "shall", "unto"}

// wordRE is a word: a run of letters.
var wordRE = regexp.MustCompile(`[A-Za-z]+`)

// commonWords are the words of 3 letters or more that occur at least 50
// times in text, lower-cased.
func commonWords(text []byte) map[string]bool {
	n := map[string]int{}
	for _, w := range wordRE.FindAll(text, -1) {
		if len(w) >= 3 {
			n[strings.ToLower(string(w))]++
		}
	}
	common := map[string]bool{}
	for w, c := range n {
		if c >= 50 {
			common[w] = true
		}
	}
	return common
}

// checkSampleWords fails t unless text has at least distinct different
// common words of the corpus and at least named of kjvWords, as whole
// words in any case ("And" begins most verses).
func checkSampleWords(t *testing.T, what, text string, common map[string]bool, distinct, named int) {
	t.Helper()
	seen := map[string]bool{}
	for _, w := range wordRE.FindAllString(text, -1) {
		if lw := strings.ToLower(w); common[lw] {
			seen[lw] = true
		}
	}
	words := make([]string, 0, len(seen))
	for w := range seen {
		words = append(words, w)
	}
	sort.Strings(words)
	var found []string
	for _, w := range kjvWords {
		if regexp.MustCompile(`(?i)\b` + w + `\b`).MatchString(text) {
			found = append(found, w)
		}
	}
	t.Logf("%s: %d common words of the corpus %v; of %v: %v", what, len(words), words, kjvWords, found)
	if len(words) < distinct || len(found) < named {
		t.Errorf("%s has %d different common words of the corpus and %d of %v; want at least %d and %d: %q",
			what, len(words), len(found), kjvWords, distinct, named, text)
	}
}

// kingJamesText is what `bible -f Gen1:1-Rev22:21` prints, the charlm
// job's corpus (Debian's bible-kjv and bible-kjv-text).
func kingJamesText(t *testing.T) []byte {
	t.Helper()
	path, err := exec.LookPath(dataset.BibleCommand)
	if err != nil {
		testenv.Missing(t, "the King James text needs the bible program: apt-get install "+dataset.BiblePackages)
	}
	out, err := exec.Command(path, dataset.BibleArgs...).Output()
	if err != nil || len(out) < 4_000_000 {
		testenv.Missing(t, fmt.Sprintf("`bible %s` printed %d bytes (%v): apt-get install %s", strings.Join(dataset.BibleArgs, " "), len(out), err, dataset.BiblePackages))
	}
	return out
}

// textWithTrainWindows is the shortest prefix of text whose training split
// (all but the last valFraction, as dataset.TextSplits cuts it) holds
// exactly n windows of t+1 bytes.
func textWithTrainWindows(t *testing.T, text []byte, n, ctx int64, valFraction float64) []byte {
	t.Helper()
	for l := int64(float64(n*ctx) / (1 - valFraction)); l <= int64(len(text)); l++ {
		cut := l - int64(float64(l)*valFraction)
		if (cut-1)/ctx < n || !utf8.Valid(text[:l]) {
			continue
		}
		if (cut-1)/ctx > n {
			break
		}
		return text[:l]
	}
	t.Fatalf("no prefix of the %d-byte text has exactly %d training windows of %d: the budget is too large", len(text), n, ctx+1)
	return nil
}

// checkLikeBuiltin fails t unless the spec file trains the built-in charlm
// job's model with its optimizer and seed.
func checkLikeBuiltin(t *testing.T, path string) {
	t.Helper()
	b, err := jobspec.Load("charlm")
	if err != nil {
		t.Fatalf("the built-in charlm job: %v", err)
	}
	f, err := jobspec.Load(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if f.ModelPreset != b.ModelPreset || f.OuterOptimizer != b.OuterOptimizer || f.Seed != b.Seed {
		t.Fatalf("%s trains model %q with %+v at seed %d; the built-in charlm job %q with %+v at seed %d",
			path, f.ModelPreset, f.OuterOptimizer, f.Seed, b.ModelPreset, b.OuterOptimizer, b.Seed)
	}
}

// serve --web-dist names a folder that must hold the browser worker: one
// without it is a usage error (exit 2) naming the folder and the fix.
func TestServeWebDistWithoutWorkerExits2(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := runCmd(t, context.Background(), "serve", "--addr", "127.0.0.1:0", "--db", "", "--web-dist", dir)
	if code != 2 || !strings.Contains(stderr, dir) || !strings.Contains(stderr, web.WasmFile) || !strings.Contains(stderr, "make wasm") {
		t.Fatalf("exit %d, want 2 naming %s, %s and make wasm; stderr:\n%s", code, dir, web.WasmFile, stderr)
	}
}
