package coordinator_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/worker"
)

// uploadConfigs are the ways a crowd can send gpt-mini's training to the
// coordinator that BenchmarkUploadBytes compares: async with a full fp32
// gradient a step, DiLoCo with a full fp32 delta every 64 steps, and
// DiLoCo with SparseLoCo's top 1% at 2 bits.
var uploadConfigs = map[string]string{
	"async-fp32":    "update_codec: fp32\n",
	"diloco-fp32":   "mode: diloco\nlocal_steps: 64\nround_size: 2\nupdate_codec: fp32\n",
	"diloco-sparse": "mode: diloco\nlocal_steps: 64\nround_size: 2\nupdate_codec: sparse\n",
}

// uploadRun is one training of BenchmarkUploadBytes.
type uploadRun struct {
	config    string
	state     string
	elapsed   time.Duration
	tokens    int64 // windows trained x the context
	bytesIn   int64 // result frames' bytes
	results   int64 // results applied
	evalLoss  float64
	evalAt    int64 // the version of the final evaluation
	versions  int64
	evaluated bool
}

// BenchmarkUploadBytes measures what each update codec costs in upload
// bytes per token trained, and what it costs in validation loss at equal
// tokens (make bench-bytes): gpt-mini on a tree of Go source (BYTES_DATA,
// default the toolchain's src/net), its BPE tokenizer trained when the job
// is created, two native workers of one thread each, every configuration
// for the same BYTES_EPOCHS epochs (default 3) of the same windows, spot
// checks off (their copies would add uploads of their own). It writes the
// table to BYTES_OUT (default test-artifacts/bytes.md); BYTES_CONFIGS
// selects a subset of async-fp32, diloco-fp32 and diloco-sparse,
// BYTES_SPARSE_K sets sparse's sparse_k, BYTES_SPARSE_OUTER its
// outer_optimizer (YAML) and BYTES_LOCAL_STEPS both DiLoCos' local_steps
// (64). Run it with -benchtime 1x.
func BenchmarkUploadBytes(b *testing.B) {
	data := os.Getenv("BYTES_DATA")
	if data == "" {
		data = filepath.Join(runtime.GOROOT(), "src", "net")
	}
	if _, err := os.Stat(data); err != nil {
		b.Fatalf("BYTES_DATA: %v (a directory of .go files)", err)
	}
	epochs := 3
	if s := os.Getenv("BYTES_EPOCHS"); s != "" {
		if _, err := fmt.Sscan(s, &epochs); err != nil || epochs < 1 {
			b.Fatalf("BYTES_EPOCHS: %q is not a number of epochs", s)
		}
	}
	configs := envList("BYTES_CONFIGS", []string{"async-fp32", "diloco-fp32", "diloco-sparse"})
	path := os.Getenv("BYTES_OUT")
	if path == "" {
		path = filepath.Join("..", "test-artifacts", "bytes.md")
	}
	var runs []uploadRun
	write := func() {
		head := fmt.Sprintf("Upload bytes per token, %s, %d CPUs, gpt-mini on %s, %d epochs, 2 native workers of one thread\n\n",
			time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), data, epochs)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(head+uploadTable(runs)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		for _, c := range configs {
			extra, ok := uploadConfigs[c]
			if !ok {
				b.Fatalf("BYTES_CONFIGS: unknown %q (want async-fp32, diloco-fp32 or diloco-sparse)", c)
			}
			if k := os.Getenv("BYTES_SPARSE_K"); k != "" && strings.Contains(extra, "sparse") {
				extra += "sparse_k: " + k + "\n"
			}
			if o := os.Getenv("BYTES_SPARSE_OUTER"); o != "" && strings.Contains(extra, "sparse") {
				extra += "outer_optimizer: " + o + "\n"
			}
			if h := os.Getenv("BYTES_LOCAL_STEPS"); h != "" && strings.Contains(extra, "local_steps") {
				extra = strings.Replace(extra, "local_steps: 64", "local_steps: "+h, 1)
			}
			runs = append(runs, runUpload(b, c, extra, data, epochs))
			write()
		}
	}
	b.Logf("wrote %s:\n%s", path, uploadTable(runs))
}

// runUpload trains gpt-mini in one configuration for epochs epochs.
func runUpload(b *testing.B, config, extra, data string, epochs int) uploadRun {
	y := fmt.Sprintf(`name: bytes-%s
model: gpt-mini
dataset: {type: text, path: %q, glob: "**/*.go", val_fraction: 0.02}
tokenizer: {type: bpe, vocab: 1024}
outer_optimizer: {type: adamw, lr: 0.003, weight_decay: 0.01, clip_norm: 1}
batch_size: 32
max_epochs: %d
eval_every: 1000000
spot_check: 0
seed: 1
%s`, config, data, epochs, extra)
	if strings.Contains(extra, "diloco") {
		// DiLoCo's outer optimizer is its own (Nesterov on the deltas);
		// the inner steps take the AdamW above.
		y = strings.Replace(y, "outer_optimizer: {type: adamw, lr: 0.003, weight_decay: 0.01, clip_norm: 1}\n", "", 1)
	}
	spec, err := jobspec.Parse([]byte(y))
	if err != nil {
		b.Fatalf("%s: %v\n%s", config, err, y)
	}
	g := newTestGridWith(b, spec, func(cfg *coordinator.Config) { cfg.LoadData = dataset.Load })
	defer g.close()
	start := time.Now()
	for i := range 2 {
		g.addWorkerWith(1, nil, func(cfg *worker.Config) {
			cfg.VolunteerKey = fmt.Sprintf("bytes-bench-volunteer-%02d", i)
		})
	}
	var v coordinator.JobView
	for {
		v = g.jobView()
		if v.State != coordinator.StateRunning && v.State != coordinator.StateFinishing {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := uploadRun{config: config, state: v.State, elapsed: time.Since(start), bytesIn: v.BytesIn,
		results: v.UpdatesApplied, versions: v.Version, tokens: v.ExamplesSeen * int64(spec.Model.Input[0])}
	if v.Eval != nil {
		r.evaluated, r.evalLoss, r.evalAt = true, v.Eval.Loss, v.Eval.Version
	}
	fmt.Fprintf(os.Stderr, "bytes: %s: %s in %.1fs, version %d, %d tokens, %d bytes in, %d results, eval %+v; rejections %v\n",
		config, v.State, r.elapsed.Seconds(), r.versions, r.tokens, r.bytesIn, r.results, v.Eval, v.Rejections)
	return r
}

// uploadTable is the benchmark's markdown: each configuration's upload
// bytes per token and the ratio to async fp32's and to DiLoCo fp32's, and
// the validation loss at the end of the same tokens.
func uploadTable(runs []uploadRun) string {
	per := func(r uploadRun) float64 {
		if r.tokens == 0 {
			return 0
		}
		return float64(r.bytesIn) / float64(r.tokens)
	}
	base := map[string]float64{}
	for _, r := range runs {
		base[r.config] = per(r)
	}
	ratio := func(of string, r uploadRun) string {
		if base[of] == 0 || per(r) == 0 || per(r) > base[of] {
			return "—"
		}
		return fmt.Sprintf("%.1fx", base[of]/per(r))
	}
	var sb strings.Builder
	sb.WriteString("| configuration | state | tokens | results | upload bytes | bytes per token | fewer than async fp32 | fewer than DiLoCo fp32 | validation loss (nats/token) | wall time |\n")
	sb.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range runs {
		loss := "—"
		if r.evaluated {
			loss = fmt.Sprintf("%.4f (version %d)", r.evalLoss, r.evalAt)
		}
		fmt.Fprintf(&sb, "| %s | %s | %d | %d | %d | %.3f | %s | %s | %s | %.0f s |\n",
			r.config, r.state, r.tokens, r.results, r.bytesIn, per(r), ratio("async-fp32", r), ratio("diloco-fp32", r), loss, r.elapsed.Seconds())
	}
	return sb.String()
}
