package jobspec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
)

func TestJobPresets(t *testing.T) {
	for _, name := range PresetNames() {
		s, err := Load(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Name != name || s.ModelPreset != name || len(s.Model.Layers) == 0 {
			t.Errorf("%s: %+v", name, s)
		}
	}
	_, err := Load("mnist-transformer")
	if !errors.Is(err, ErrUnknownJob) || !strings.Contains(err.Error(), "mnist-cnn, mnist-mlp") {
		t.Fatalf("unknown preset: %v; want ErrUnknownJob listing the presets", err)
	}
}

const fullSpec = `
name: my-mlp
model:
  - {type: dense, units: 32}
  - {type: relu}
  - {type: dense, units: 10}
dataset: mnist
optimizer: {type: momentum, lr: 0.05, momentum: 0.9, nesterov: true}
batch_size: 32
local_steps: 4
inner_lr: 0.1
max_staleness: 3
staleness_lr: none
shard_size: 500
target_accuracy: 0.9
max_epochs: 2
seed: 7
eval_every: 100
lease_timeout: 15s
`

func TestParseFullSpec(t *testing.T) {
	s, err := Parse([]byte(fullSpec))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "my-mlp" || len(s.Model.Layers) != 3 || s.Model.Layers[0].Units != 32 || s.Model.Input[0] != 1 ||
		s.OuterOptimizer.Type != "momentum" || !s.OuterOptimizer.Nesterov || s.BatchSize != 32 || s.LocalSteps != 4 ||
		s.InnerOptimizer.LR != 0.1 || s.MaxStaleness != 3 || s.StalenessLR != "none" || s.ShardSize != 500 ||
		s.TargetAccuracy != 0.9 || s.MaxEpochs != 2 || s.Seed != 7 || s.EvalEvery != 100 ||
		s.LeaseTimeout.Duration != 15*time.Second {
		t.Fatalf("parsed %+v", s)
	}
	// JSON is accepted too, and a preset model name.
	j := `{"name": "j", "model": "mnist-cnn", "optimizer": {"type": "adam", "lr": 0.001}, "batch_size": 16}`
	s, err = Parse([]byte(j))
	if err != nil {
		t.Fatal(err)
	}
	if s.ModelPreset != "mnist-cnn" || s.BatchSize != 16 || s.OuterOptimizer.Beta2 != 0.999 || s.MaxStaleness != base().MaxStaleness {
		t.Fatalf("parsed %+v", s)
	}
}

// adamw takes weight_decay 0.01 unless the spec gives one (0 included);
// clip_norm goes to either optimizer; target_loss is read.
func TestAdamWClipNormAndTargetLoss(t *testing.T) {
	s, err := Parse([]byte("name: a\nmodel: mnist-mlp\nouter_optimizer: {type: adamw, lr: 0.003, clip_norm: 1}\ntarget_loss: 1.5\ntarget_accuracy: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := s.OuterOptimizer
	if o.Type != nn.OptAdamW || o.WeightDecay != 0.01 || o.ClipNorm != 1 || o.Beta2 != 0.999 || s.TargetLoss != 1.5 || s.TargetAccuracy != 0 {
		t.Fatalf("parsed %+v, target_loss %v, target_accuracy %v", o, s.TargetLoss, s.TargetAccuracy)
	}
	s, err = Parse([]byte("name: a\nmodel: mnist-mlp\nouter_optimizer: {type: adamw, lr: 0.003, weight_decay: 0}\n" +
		"mode: diloco\ninner_optimizer: {type: adamw, clip_norm: 0.5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.OuterOptimizer.WeightDecay != 0 || s.InnerOptimizer.ClipNorm != 0.5 || s.InnerOptimizer.WeightDecay != 0.01 {
		t.Fatalf("parsed %+v and %+v", s.OuterOptimizer, s.InnerOptimizer)
	}
	// The stored spec reads back the same.
	b, _ := json.Marshal(s)
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil || back.InnerOptimizer != s.InnerOptimizer || back.OuterOptimizer != s.OuterOptimizer || back.TargetLoss != s.TargetLoss {
		t.Fatalf("round trip: %v, %+v", err, back)
	}
}

func TestSpecErrorsNameTheKey(t *testing.T) {
	cases := []struct{ spec, key, words string }{
		{"name: a\nbatchsize: 3\n", "batchsize", "unknown key"},
		{"name: a\nmodel: mnist-mlp\nbatch_size: 0\n", "batch_size", "1..4096"},
		{"name: a\nmodel: mnist-mlp\nbatch_size: many\n", "batch_size", "cannot unmarshal"},
		{"name: a\nmodel: resnet\n", "model", "mnist-cnn, mnist-mlp"},
		{"name: a\nmodel: mnist-mlp\ndataset: cifar10\n", "dataset", "mnist, fashion-mnist"},
		{"name: a\nmodel: [{type: dense, unit: 3}]\n", "model[0].unit", "unknown key"},
		{"name: a\nmodel: [{type: dense, units: 10}, {type: softmax}]\n", "model", "softmax"},
		{"name: a\nmodel: mnist-mlp\noptimizer: {type: adagrad, lr: 1}\n", "optimizer.type", "adagrad"},
		{"name: a\nmodel: mnist-mlp\noptimizer: {type: sgd, lr: -1}\n", "optimizer.lr", "> 0"},
		{"name: a\nmodel: mnist-mlp\noptimizer: {type: sgd, rate: 1}\n", "optimizer.rate", "unknown key"},
		{"name: a\nmodel: mnist-mlp\nstaleness_lr: sqrt\n", "staleness_lr", "none or inverse"},
		{"name: a\nmodel: mnist-mlp\nmax_staleness: -1\n", "max_staleness", ">= 0"},
		{"name: a\nmodel: mnist-mlp\ntarget_accuracy: 97\n", "target_accuracy", "[0, 1]"},
		{"name: a\nmodel: mnist-mlp\ntarget_loss: -1\n", "target_loss", "nats >= 0"},
		{"name: a\nmodel: mnist-mlp\ntarget_loss: .inf\n", "target_loss", "finite"},
		{"name: a\nmodel: mnist-mlp\nouter_optimizer: {type: adamw, lr: 0.001, weight_decay: -1}\n", "outer_optimizer.weight_decay", ">= 0"},
		{"name: a\nmodel: mnist-mlp\nouter_optimizer: {type: adam, lr: 0.001, weight_decay: 0.1}\n", "outer_optimizer.weight_decay", "applies to type adamw"},
		{"name: a\nmodel: mnist-mlp\nouter_optimizer: {type: sgd, lr: 0.1, clip_norm: -2}\n", "outer_optimizer.clip_norm", "0 turns clipping off"},
		{"name: a\nmodel: mnist-mlp\ninner_optimizer: {type: sgd, lr: 0.1, clip_norm: -2}\n", "inner_optimizer.clip_norm", "0 turns clipping off"},
		{"name: a\nmodel: mnist-mlp\nouter_optimizer: {type: adamw, lr: 0.001, decay: 0.1}\n", "outer_optimizer.decay", "unknown key"},
		{"name: a\nmodel: mnist-mlp\nlease_timeout: soon\n", "lease_timeout", "duration"},
		{"name: a\nmodel: mnist-mlp\nbatch_size: 64\nlocal_steps: 100\nshard_size: 1000\n", "batch_size", "shard_size"},
		{"name: a\nname: b\n", "name", "twice"},
		{"batch_size: 3\nmodel: mnist-mlp\n", "name", "required"},
		{"name: a\n", "model", "required"},
		{"- just\n- a list\n", "", "mapping"},
		{"name: [unclosed\n", "", "YAML"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.spec))
		var se *Error
		if !errors.As(err, &se) {
			t.Errorf("%q: got %v, want a *Error", c.spec, err)
			continue
		}
		if !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%q: error %q should name %q and say %q", c.spec, err, c.key, c.words)
		}
	}
}

func TestLoadJobSpecFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(p, []byte(fullSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := Load(p); err != nil || s.Name != "my-mlp" {
		t.Fatalf("%+v %v", s, err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"name": "x", "epochs": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	if !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), "epochs") {
		t.Fatalf("error %v should name the file and the key", err)
	}
}

func FuzzParseJobSpec(f *testing.F) {
	f.Add([]byte(fullSpec))
	f.Add([]byte(`{"name": "j", "model": "mnist-cnn", "optimizer": {"type": "adam", "lr": 0.001}}`))
	f.Add([]byte("name: a\nmodel: {input: [1, 28, 28], layers: [{type: conv2d, filters: 2, kernel: 3}, {type: dense, units: 10}]}\n"))
	f.Add([]byte("name: a\nmodel: [{type: dense, units: 0}]\n"))
	f.Add([]byte("&a [*a]"))
	f.Add([]byte("name: a\nlease_timeout: -5s\nmodel: mnist-mlp\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("error is not a *Error: %T %v", err, err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed spec fails validation: %v", err)
		}
	})
}

// The dataset key names a built-in data set; each gets the 28x28 grey
// input, and the fashion-cnn preset trains on Fashion-MNIST to 90%.
func TestDatasetNamesABuiltin(t *testing.T) {
	for _, name := range []string{"mnist", "fashion-mnist"} {
		s, err := Parse([]byte("name: a\ndataset: " + name + "\nmodel: [{type: dense, units: 10}]\n"))
		if err != nil {
			t.Fatalf("dataset %s: %v", name, err)
		}
		if s.Dataset.Name != name || !slices.Equal(s.Model.Input, []int{1, 28, 28}) {
			t.Fatalf("dataset %s: parsed dataset %q, input %v", name, s.Dataset, s.Model.Input)
		}
	}
	s, err := Load("fashion-cnn")
	if err != nil {
		t.Fatal(err)
	}
	if s.Dataset.Name != "fashion-mnist" || s.ModelPreset != "fashion-cnn" || s.TargetAccuracy != 0.90 {
		t.Fatalf("fashion-cnn: dataset %q, model %q, target %v", s.Dataset, s.ModelPreset, s.TargetAccuracy)
	}
	if m, _ := Load("mnist-cnn"); m.Dataset.Name != "mnist" {
		t.Fatalf("mnist-cnn trains on %q, want mnist", m.Dataset)
	}
}
