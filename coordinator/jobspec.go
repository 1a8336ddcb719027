package coordinator

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/crowdtrain/crowdtrain/nn"
)

// JobSpec is what an operator submits: a model, the data, and how to train.
// Every key is documented in docs/JOBS.md.
type JobSpec struct {
	Name string `json:"name" yaml:"name"`
	// ModelPreset is set when `model` names a preset; Model is always the
	// resolved architecture.
	ModelPreset    string           `json:"model_preset,omitempty" yaml:"-"`
	Model          nn.ModelSpec     `json:"model" yaml:"-"`
	Dataset        string           `json:"dataset" yaml:"dataset"`
	Optimizer      nn.OptimizerSpec `json:"optimizer" yaml:"optimizer"`
	BatchSize      int              `json:"batch_size" yaml:"batch_size"`
	LocalSteps     int              `json:"local_steps" yaml:"local_steps"`
	InnerLR        float64          `json:"inner_lr" yaml:"inner_lr"`
	MaxStaleness   int              `json:"max_staleness" yaml:"max_staleness"`
	StalenessLR    string           `json:"staleness_lr" yaml:"staleness_lr"`
	ShardSize      int              `json:"shard_size" yaml:"shard_size"`
	TargetAccuracy float64          `json:"target_accuracy" yaml:"target_accuracy"`
	MaxEpochs      int              `json:"max_epochs" yaml:"max_epochs"`
	Seed           int64            `json:"seed" yaml:"seed"`
	EvalEvery      int              `json:"eval_every" yaml:"eval_every"`
	// CheckpointEvery is the most updates between checkpoints (the
	// coordinator's --checkpoint-interval bounds the time too).
	CheckpointEvery int `json:"checkpoint_every" yaml:"checkpoint_every"`
	// MaxUpdateNormRatio rejects an update whose L2 norm exceeds this many
	// times the running mean of accepted ones (0 turns the check off).
	MaxUpdateNormRatio float64  `json:"max_update_norm_ratio" yaml:"max_update_norm_ratio"`
	LeaseTimeout       Duration `json:"lease_timeout" yaml:"lease_timeout"`
}

// Step-size rules for stale results.
const (
	StalenessLRNone    = "none"    // apply every accepted result at the full rate
	StalenessLRInverse = "inverse" // scale the step by 1/(1+staleness)
)

// Duration is a time.Duration written as "30s" in spec files and JSON.
type Duration struct{ time.Duration }

func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

func (d *Duration) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return fmt.Errorf("duration must be a string such as \"30s\": %w", err)
	}
	d.Duration, err = time.ParseDuration(s)
	return err
}

// specKeys are the keys a spec file may contain, in documentation order.
var specKeys = []string{
	"name", "model", "dataset", "optimizer", "batch_size", "local_steps", "inner_lr",
	"max_staleness", "staleness_lr", "shard_size", "target_accuracy", "max_epochs",
	"seed", "eval_every", "lease_timeout", "max_update_norm_ratio", "checkpoint_every",
}

var (
	optimizerKeys = []string{"type", "lr", "momentum", "nesterov", "beta1", "beta2", "epsilon"}
	layerKeys     = []string{"type", "units", "filters", "kernel", "stride", "padding"}
	modelKeys     = []string{"input", "layers"}
)

// SpecError names the key of a job spec that is wrong and why.
type SpecError struct {
	Key     string
	Problem string
}

func (e *SpecError) Error() string {
	if e.Key == "" {
		return "job spec: " + e.Problem
	}
	return fmt.Sprintf("job spec: %s: %s", e.Key, e.Problem)
}

func specErr(key, format string, args ...any) error {
	return &SpecError{Key: key, Problem: fmt.Sprintf(format, args...)}
}

// ErrUnknownJob is returned for a --job that is neither a preset nor a file.
var ErrUnknownJob = errors.New("unknown job")

// JobPresetNames lists the built-in jobs, sorted.
func JobPresetNames() []string {
	names := make([]string, 0, len(jobPresets))
	for n := range jobPresets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// jobPresets are the built-in jobs; each uses the model preset of its name.
var jobPresets = map[string]func() JobSpec{
	"mnist-mlp": func() JobSpec {
		s := defaultSpec()
		s.Name = "mnist-mlp"
		s.ModelPreset = "mnist-mlp"
		return s
	},
	"mnist-cnn": func() JobSpec {
		s := defaultSpec()
		s.Name = "mnist-cnn"
		s.ModelPreset = "mnist-cnn"
		s.Optimizer.LR = 2e-3
		s.TargetAccuracy = 0.98
		return s
	},
}

// defaultSpec holds the value of every key a spec file leaves out.
func defaultSpec() JobSpec {
	return JobSpec{
		Dataset:         "mnist",
		Optimizer:       nn.OptimizerSpec{Type: "adam", LR: 1e-3},
		BatchSize:       64,
		LocalSteps:      1,
		InnerLR:         0.05,
		MaxStaleness:    8,
		StalenessLR:     StalenessLRNone,
		ShardSize:       1000,
		TargetAccuracy:  0.97,
		MaxEpochs:       10,
		Seed:            1,
		EvalEvery:       250,
		CheckpointEvery: 1000,
		// Far above any legitimate jump between consecutive gradients,
		// far below what a broken or hostile worker's garbage looks like.
		MaxUpdateNormRatio: 20,
		LeaseTimeout:       Duration{60 * time.Second},
	}
}

// LoadJobSpec resolves --job: a preset name, or the path of a YAML or JSON
// spec file. Errors are *SpecError for a bad file and wrap ErrUnknownJob for
// a name that is neither.
func LoadJobSpec(nameOrFile string) (JobSpec, error) {
	if mk, ok := jobPresets[nameOrFile]; ok {
		return finishSpec(mk())
	}
	data, err := os.ReadFile(nameOrFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return JobSpec{}, fmt.Errorf("%w %q: not a preset (presets: %s) and no such file",
				ErrUnknownJob, nameOrFile, strings.Join(JobPresetNames(), ", "))
		}
		return JobSpec{}, fmt.Errorf("failed to read job spec: %w", err)
	}
	s, err := ParseJobSpec(data)
	if err != nil {
		return JobSpec{}, fmt.Errorf("%s: %w", nameOrFile, err)
	}
	return s, nil
}

// ParseJobSpec parses a YAML or JSON spec (JSON is YAML), fills defaults and
// validates. Unknown keys are errors, not silently ignored: a typo such as
// `batchsize` would otherwise train with the default.
func ParseJobSpec(data []byte) (JobSpec, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		return JobSpec{}, &SpecError{Problem: "not valid YAML or JSON: " + err.Error()}
	}
	if len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return JobSpec{}, &SpecError{Problem: "must be a mapping of keys (name, model, optimizer, ...)"}
	}
	m := root.Content[0]
	if err := checkKeys("", m, specKeys); err != nil {
		return JobSpec{}, err
	}
	s := defaultSpec()
	for i := 0; i < len(m.Content); i += 2 {
		key, val := m.Content[i].Value, m.Content[i+1]
		var err error
		switch key {
		case "model":
			err = decodeModel(val, &s)
		case "optimizer":
			if err = checkKeys("optimizer.", val, optimizerKeys); err == nil {
				opt := nn.OptimizerSpec{}
				err = val.Decode(&opt)
				s.Optimizer = opt
			}
		case "lease_timeout":
			var d time.Duration
			if d, err = time.ParseDuration(val.Value); err == nil {
				s.LeaseTimeout = Duration{d}
			}
		default:
			err = decodeField(key, val, &s)
		}
		if err != nil {
			var se *SpecError
			if errors.As(err, &se) {
				return JobSpec{}, err
			}
			return JobSpec{}, specErr(key, "%v", cleanYAMLError(err))
		}
	}
	if s.Name == "" {
		return JobSpec{}, specErr("name", "is required")
	}
	if s.ModelPreset == "" && len(s.Model.Layers) == 0 {
		return JobSpec{}, specErr("model", "is required: a preset name (%s) or a list of layers", strings.Join(nn.PresetNames(), ", "))
	}
	return finishSpec(s)
}

// decodeField decodes one top-level scalar key into its field of s.
func decodeField(key string, val *yaml.Node, s *JobSpec) error {
	if val.Kind != yaml.ScalarNode {
		return specErr(key, "must be a single value, not a list or mapping")
	}
	// Decoding a one-key mapping reuses the yaml tags of JobSpec.
	wrap := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: key}, val}}
	return wrap.Decode(s)
}

func decodeModel(val *yaml.Node, s *JobSpec) error {
	switch val.Kind {
	case yaml.ScalarNode:
		spec, err := nn.Preset(val.Value)
		if err != nil {
			return specErr("model", "%v", err)
		}
		s.ModelPreset, s.Model = val.Value, spec
		return nil
	case yaml.SequenceNode:
		s.ModelPreset = ""
		s.Model = nn.ModelSpec{}
		return decodeLayers("model", val, &s.Model)
	case yaml.MappingNode:
		if err := checkKeys("model.", val, modelKeys); err != nil {
			return err
		}
		s.ModelPreset = ""
		s.Model = nn.ModelSpec{}
		for i := 0; i < len(val.Content); i += 2 {
			k, v := val.Content[i].Value, val.Content[i+1]
			if k == "layers" {
				if err := decodeLayers("model.layers", v, &s.Model); err != nil {
					return err
				}
			} else if err := v.Decode(&s.Model.Input); err != nil {
				return specErr("model.input", "want [channels, height, width]: %v", cleanYAMLError(err))
			}
		}
		return nil
	}
	return specErr("model", "want a preset name (%s) or a list of layers", strings.Join(nn.PresetNames(), ", "))
}

func decodeLayers(key string, val *yaml.Node, m *nn.ModelSpec) error {
	if val.Kind != yaml.SequenceNode || len(val.Content) == 0 {
		return specErr(key, "want a non-empty list of layers")
	}
	for i, l := range val.Content {
		lk := fmt.Sprintf("%s[%d].", key, i)
		if err := checkKeys(lk, l, layerKeys); err != nil {
			return err
		}
		var ls nn.LayerSpec
		if err := l.Decode(&ls); err != nil {
			return specErr(strings.TrimSuffix(lk, "."), "%v", cleanYAMLError(err))
		}
		m.Layers = append(m.Layers, ls)
	}
	return nil
}

// checkKeys reports the first key of mapping n that is not in known.
func checkKeys(prefix string, n *yaml.Node, known []string) error {
	if n.Kind != yaml.MappingNode {
		return specErr(strings.TrimSuffix(prefix, "."), "must be a mapping with keys %s", strings.Join(known, ", "))
	}
	seen := map[string]bool{}
	for i := 0; i < len(n.Content); i += 2 {
		k := n.Content[i].Value
		if !slices.Contains(known, k) {
			return specErr(prefix+k, "unknown key (line %d); known keys: %s", n.Content[i].Line, strings.Join(known, ", "))
		}
		if seen[k] {
			return specErr(prefix+k, "given twice (line %d)", n.Content[i].Line)
		}
		seen[k] = true
	}
	return nil
}

// cleanYAMLError turns yaml.v3's "yaml: unmarshal errors:\n  line 3: cannot
// unmarshal !!str `abc` into int" into its last line.
func cleanYAMLError(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "\n"); i >= 0 {
		msg = strings.TrimSpace(msg[i+1:])
	}
	return strings.TrimPrefix(msg, "yaml: ")
}

// finishSpec resolves the model preset and validates every key.
func finishSpec(s JobSpec) (JobSpec, error) {
	if s.ModelPreset != "" {
		spec, err := nn.Preset(s.ModelPreset)
		if err != nil {
			return JobSpec{}, specErr("model", "%v", err)
		}
		s.Model = spec
	}
	if len(s.Model.Input) == 0 && s.Dataset == "mnist" {
		s.Model.Input = []int{1, 28, 28}
	}
	s.Optimizer = s.Optimizer.WithDefaults()
	return s, s.Validate()
}

// Validate checks every key and says which one is wrong.
func (s JobSpec) Validate() error {
	if len(s.Name) > 128 {
		return specErr("name", "at most 128 characters")
	}
	if s.Dataset != "mnist" {
		return specErr("dataset", "%q is not supported (want mnist; other data through --data DIR of IDX files)", s.Dataset)
	}
	if _, err := nn.NewModel(s.Model); err != nil {
		return specErr("model", "%v", err)
	}
	if err := s.Optimizer.Validate(); err != nil {
		return &SpecError{Problem: err.Error()}
	}
	switch {
	case s.BatchSize < 1 || s.BatchSize > 4096:
		return specErr("batch_size", "must be in 1..4096, got %d", s.BatchSize)
	case s.LocalSteps < 1 || s.LocalSteps > 1000:
		return specErr("local_steps", "must be in 1..1000, got %d", s.LocalSteps)
	case !(s.InnerLR > 0) || math.IsInf(s.InnerLR, 0):
		return specErr("inner_lr", "must be a finite number > 0, got %v", s.InnerLR)
	case s.MaxStaleness < 0:
		return specErr("max_staleness", "must be >= 0, got %d", s.MaxStaleness)
	case s.StalenessLR != StalenessLRNone && s.StalenessLR != StalenessLRInverse:
		return specErr("staleness_lr", "%q is not a rule (want none or inverse)", s.StalenessLR)
	case s.ShardSize < 1 || s.ShardSize > 100000:
		return specErr("shard_size", "must be in 1..100000, got %d", s.ShardSize)
	case s.BatchSize*s.LocalSteps > s.ShardSize:
		return specErr("batch_size", "batch_size*local_steps (%d) exceeds shard_size (%d): a task must fit in one shard", s.BatchSize*s.LocalSteps, s.ShardSize)
	case !(s.TargetAccuracy > 0 && s.TargetAccuracy <= 1):
		return specErr("target_accuracy", "must be in (0, 1], got %v", s.TargetAccuracy)
	case s.MaxEpochs < 1:
		return specErr("max_epochs", "must be >= 1, got %d", s.MaxEpochs)
	case s.MaxUpdateNormRatio < 0 || math.IsNaN(s.MaxUpdateNormRatio) || math.IsInf(s.MaxUpdateNormRatio, 0):
		return specErr("max_update_norm_ratio", "must be a finite number >= 0 (0 turns the check off), got %v", s.MaxUpdateNormRatio)
	case s.CheckpointEvery < 1:
		return specErr("checkpoint_every", "must be >= 1 update, got %d", s.CheckpointEvery)
	case s.EvalEvery < 1:
		return specErr("eval_every", "must be >= 1 update, got %d", s.EvalEvery)
	case s.LeaseTimeout.Duration < 100*time.Millisecond:
		return specErr("lease_timeout", "must be at least 100ms, got %v", s.LeaseTimeout.Duration)
	}
	return nil
}
