package jobspec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/nn"
)

// ErrUnknownJob is returned for a --job that is neither a preset nor a file.
var ErrUnknownJob = errors.New("unknown job")

// PresetNames lists the built-in jobs, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// presets are the built-in jobs; each uses the model preset of its name.
// They set only what differs from the defaults (base and modeDefaults).
var presets = map[string]func() (Spec, given){
	"mnist-mlp": func() (Spec, given) {
		s := base()
		s.Name, s.ModelPreset = "mnist-mlp", "mnist-mlp"
		return s, given{}
	},
	"mnist-cnn": func() (Spec, given) {
		s := base()
		s.Name, s.ModelPreset = "mnist-cnn", "mnist-cnn"
		s.OuterOptimizer = nn.OptimizerSpec{Type: nn.OptAdam, LR: 2e-3}
		s.TargetAccuracy = 0.98
		return s, given{"outer_optimizer": true}
	},
	// charlm is the character-level transformer on the King James text
	// (serve --data FILE puts other text in its place).
	"charlm": func() (Spec, given) {
		s := base()
		s.Name, s.ModelPreset, s.Dataset = "charlm", "charlm", dataset.Builtin(dataset.BibleKJV)
		s.OuterOptimizer = nn.OptimizerSpec{Type: nn.OptAdamW, LR: 3e-3, WeightDecay: 0.01, ClipNorm: 1}
		s.BatchSize = 32
		return s, given{"outer_optimizer": true}
	},
	// gpt-small is a GPT-2 style model with tied embeddings for a
	// 4096-token vocabulary, on BPE tokens of the Go standard library's
	// source, its tokenizer trained on the training split when the job is
	// created.
	"gpt-small": func() (Spec, given) {
		s := base()
		s.Name, s.ModelPreset, s.Dataset = "gpt-small", "gpt-small", dataset.Builtin(dataset.GoSource)
		s.Tokenizer = &Tokenizer{Type: TokenizerBPE, Vocab: 4096}
		s.OuterOptimizer = nn.OptimizerSpec{Type: nn.OptAdamW, LR: 1e-3, WeightDecay: 0.01, ClipNorm: 1}
		s.BatchSize = 16
		return s, given{"outer_optimizer": true}
	},
	// gpt-mini is a small transformer over BPE tokens of Go source, its
	// tokenizer trained on the training split when the job is created.
	"gpt-mini": func() (Spec, given) {
		s := base()
		s.Name, s.ModelPreset, s.Dataset = "gpt-mini", "gpt-mini", dataset.Builtin(dataset.GoSource)
		s.Tokenizer = &Tokenizer{Type: TokenizerBPE, Vocab: nn.GPTMiniVocab}
		s.OuterOptimizer = nn.OptimizerSpec{Type: nn.OptAdamW, LR: 3e-3, WeightDecay: 0.01, ClipNorm: 1}
		s.BatchSize = 32
		return s, given{"outer_optimizer": true}
	},
	"fashion-cnn": func() (Spec, given) {
		s := base()
		s.Name, s.ModelPreset, s.Dataset = "fashion-cnn", "fashion-cnn", dataset.Builtin(dataset.FashionMNIST)
		s.OuterOptimizer = nn.OptimizerSpec{Type: nn.OptAdam, LR: 2e-3}
		s.TargetAccuracy = 0.90
		return s, given{"outer_optimizer": true}
	},
}

// base holds the value of every key a spec file leaves out whose default
// does not depend on the mode (modeDefaults fills the others).
func base() Spec {
	return Spec{
		Dataset:         dataset.Builtin(dataset.MNIST),
		Mode:            ModeAsync,
		BatchSize:       64,
		MaxStaleness:    8,
		StalenessLR:     StalenessLRNone,
		TargetAccuracy:  0.97,
		MaxEpochs:       10,
		Seed:            1,
		EvalEvery:       250,
		CheckpointEvery: 1000,
		// Far above any legitimate jump between consecutive gradients,
		// far below what a broken or hostile worker's garbage looks like.
		MaxUpdateNormRatio: 20,
		LeaseTimeout:       Duration{60 * time.Second},
		RelayWindow:        Duration{DefaultRelayWindow},
		SpotCheck:          engine.DefaultSpotCheckRate,
		SpotCheckStrikes:   engine.DefaultSpotCheckStrikes,
		SpotCheckTolerance: engine.DefaultSpotCheckTolerance,
		UpdateCodec:        CodecFP32,
		TopKFraction:       DefaultTopKFraction,
		SnapshotCodec:      CodecFP32,
		MaxCommFraction:    DefaultMaxCommFraction,
		Weight:             1,
	}
}

// given records which keys a spec (or a change to one) set explicitly, by
// their top-level name; "inner_optimizer.lr" is recorded too, so that
// inner_lr can tell whether it duplicates it.
type given map[string]bool

// modeDefaults fills every key the spec left out whose default depends on
// the mode (or on other keys), so the result records what was chosen.
func modeDefaults(s *Spec, g given) {
	diloco := s.Mode == ModeDiLoCo
	if !g["outer_optimizer"] {
		if diloco {
			s.OuterOptimizer = nn.OptimizerSpec{Type: nn.OptMomentum, LR: 0.7, Momentum: 0.9, Nesterov: true}
			if s.UpdateCodec == CodecSparse {
				// Error feedback already carries what a round did not
				// send into later rounds, a momentum of its own
				// (SparseLoCo drops the outer one for it): on top of
				// 0.9, async DiLoCo overshot and diverged on mnist-mlp
				// in 7 runs of 9; at 0.7 every run of both DiLoCos
				// reached 90%, as fast (docs/TRAINING.md).
				s.OuterOptimizer.Momentum = SparseOuterMomentum
			}
		} else {
			s.OuterOptimizer = nn.OptimizerSpec{Type: nn.OptAdam, LR: 1e-3}
		}
	}
	s.OuterOptimizer = s.OuterOptimizer.WithDefaults()
	s.Robust = s.Robust.WithDefaults()
	in := &s.InnerOptimizer
	if !g["inner_optimizer.type"] {
		in.Type = InnerSGD
		if diloco {
			in.Type = InnerAdamW
		}
	}
	if !g["inner_optimizer.lr"] {
		in.LR = 0.05
		if in.Type == InnerAdamW {
			in.LR = 4e-4 // DiLoCo's inner rate (Douillard et al. 2023)
		}
	}
	if in.Type == InnerSGD {
		// Settings left from an adamw before a mode change are not sgd's.
		for k, f := range map[string]*float64{"weight_decay": &in.WeightDecay, "beta1": &in.Beta1, "beta2": &in.Beta2, "epsilon": &in.Epsilon} {
			if !g["inner_optimizer."+k] {
				*f = 0
			}
		}
	}
	if in.Type == InnerAdamW {
		if !g["inner_optimizer.weight_decay"] {
			in.WeightDecay = 0.01
		}
		if in.Beta1 == 0 {
			in.Beta1 = 0.9
		}
		if in.Beta2 == 0 {
			in.Beta2 = 0.999
		}
		if in.Epsilon == 0 {
			in.Epsilon = 1e-8
		}
	}
	if !g["local_steps"] {
		s.LocalSteps = 1
		if diloco {
			s.LocalSteps = 16
		}
	}
	if !g["round_size"] {
		switch {
		case s.Mode == ModeAsync:
			s.RoundSize = 1
		default:
			s.RoundSize = 4
		}
	}
	if !g["backup_workers"] {
		s.BackupWorkers = 0
		if s.Mode == ModeSync {
			s.BackupWorkers = 1
		}
	}
	if !g["round_timeout"] {
		s.RoundTimeout = s.LeaseTimeout
	}
	if !g["snapshot"] {
		s.Snapshot = SnapshotGranted
		if s.Mode == ModeAsync || (diloco && s.AsyncDiLoCo) {
			s.Snapshot = DefaultAsyncSnapshot
		}
	}
	if !g["min_local_steps"] {
		s.MinLocalSteps = 1
	}
	if !g["max_local_steps"] {
		s.MaxLocalSteps = s.LocalSteps
		if s.DynamicLocalSteps {
			s.MaxLocalSteps = max(16, s.LocalSteps)
		}
	}
	if (s.UpdateCodec == CodecTopK || s.UpdateCodec == CodecSparse) && !g["spot_check"] {
		// A topk or sparse update carries the worker's error-feedback
		// residual, which no copy can reproduce: spot checks cannot judge
		// it.
		s.SpotCheck = 0
	}
	s.sparseDefaults(g)
	if !g["shard_size"] {
		s.ShardSize = max(1000, s.BatchSize*s.TaskSteps())
	}
}

// sparseDefaults fills sparse_k and sparse_chunk of a sparse spec that
// left them out; other codecs have neither.
func (s *Spec) sparseDefaults(g given) {
	if s.UpdateCodec != CodecSparse {
		return
	}
	if !g["sparse_k"] && s.SparseK == 0 {
		s.SparseK = DefaultSparseK
	}
	if !g["sparse_chunk"] && s.SparseChunk == 0 {
		s.SparseChunk = DefaultSparseChunk
	}
}

// Load resolves --job: a preset name, or the path of a YAML or JSON spec
// file. Errors are *Error for a bad file and wrap ErrUnknownJob for a name
// that is neither.
func Load(nameOrFile string) (Spec, error) {
	if mk, ok := presets[nameOrFile]; ok {
		s, g := mk()
		return finish(s, g)
	}
	data, err := os.ReadFile(nameOrFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Spec{}, fmt.Errorf("%w %q: not a preset (presets: %s) and no such file",
				ErrUnknownJob, nameOrFile, strings.Join(PresetNames(), ", "))
		}
		return Spec{}, fmt.Errorf("failed to read job spec: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return Spec{}, fmt.Errorf("%s: %w", nameOrFile, err)
	}
	// The data files a spec file names are relative to it.
	dir, err := filepath.Abs(filepath.Dir(nameOrFile))
	if err != nil {
		return Spec{}, fmt.Errorf("%s: %w", nameOrFile, err)
	}
	s.Dataset.Resolve(dir)
	if t := s.Tokenizer; t != nil && t.File != "" && !filepath.IsAbs(t.File) {
		t.File = filepath.Join(dir, t.File)
	}
	if in := s.Init; in != nil && in.File != "" && !filepath.IsAbs(in.File) {
		in.File = filepath.Join(dir, in.File)
	}
	if p := s.Policy; p != nil && p.File != "" && !filepath.IsAbs(p.File) {
		p.File = filepath.Join(dir, p.File)
	}
	if r := s.RL; r != nil && r.Task.Path != "" && !filepath.IsAbs(r.Task.Path) {
		r.Task.Path = filepath.Join(dir, r.Task.Path)
	}
	return s, nil
}

// Preset returns a built-in job with every default filled in, or false.
func Preset(name string) (Spec, bool) {
	mk, ok := presets[name]
	if !ok {
		return Spec{}, false
	}
	s, g := mk()
	s, err := finish(s, g)
	return s, err == nil
}
