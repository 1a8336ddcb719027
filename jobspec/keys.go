package jobspec

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/rltask"
)

// Error names the key of a job spec that is wrong and why.
type Error struct {
	Key     string
	Problem string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return "job spec: " + e.Problem
	}
	return fmt.Sprintf("job spec: %s: %s", e.Key, e.Problem)
}

// Errorf returns an *Error for key.
func Errorf(key, format string, args ...any) error {
	return &Error{Key: key, Problem: fmt.Sprintf(format, args...)}
}

// key is one top-level key of a spec: the one place that defines it.
type key struct {
	name string
	// decode sets the key's field(s) of s from val and records in g what
	// was given; nil decodes a scalar through Spec's yaml tag.
	decode func(val *yaml.Node, s *Spec, g given) error
	// live keys may change on a running job (PATCH /api/v1/jobs/{id}).
	live bool
	// alias names the key this one is a deprecated spelling of.
	alias string
}

// keys are every key a spec may contain, in documentation order.
var keys = []key{
	{name: "name"},
	{name: "model", decode: decodeModel},
	{name: "dataset", decode: decodeDataset},
	{name: "tokenizer", decode: decodeTokenizer},
	{name: "init", decode: decodeInit},
	{name: "mode", live: true},
	{name: "outer_optimizer", decode: decodeOuter, live: true},
	{name: "optimizer", decode: decodeOuter, live: true, alias: "outer_optimizer"},
	{name: "inner_optimizer", decode: decodeInner, live: true},
	{name: "inner_lr", decode: decodeInnerLR, live: true, alias: "inner_optimizer.lr"},
	{name: "batch_size"},
	{name: "local_steps", live: true},
	{name: "round_size", live: true},
	{name: "backup_workers", live: true},
	{name: "round_timeout", decode: durationKey(func(s *Spec) *Duration { return &s.RoundTimeout }), live: true},
	{name: "async_diloco", live: true},
	{name: "dynamic_local_steps", live: true},
	{name: "min_local_steps", live: true},
	{name: "max_local_steps", live: true},
	{name: "snapshot", live: true},
	{name: "max_staleness", live: true},
	{name: "staleness_lr", live: true},
	{name: "shard_size"},
	{name: "target_accuracy"},
	{name: "target_loss"},
	{name: "max_epochs"},
	{name: "seed"},
	{name: "eval_every"},
	{name: "lease_timeout", decode: durationKey(func(s *Spec) *Duration { return &s.LeaseTimeout })},
	{name: "relay_window", decode: durationKey(func(s *Spec) *Duration { return &s.RelayWindow }), live: true},
	{name: "max_update_norm_ratio"},
	{name: "checkpoint_every"},
	{name: "robust", decode: decodeRobust},
	{name: "spot_check"},
	{name: "spot_check_strikes"},
	{name: "spot_check_tolerance"},
	{name: "update_codec"},
	{name: "topk_fraction"},
	{name: "sparse_k"},
	{name: "sparse_chunk"},
	{name: "snapshot_codec"},
	{name: "max_comm_fraction", live: true},
	{name: "weight", decode: decodeWeight, live: true},
	{name: "priority", decode: decodePriority, live: true},
	{name: "requires", decode: decodeRequires},
	{name: "sweep", decode: decodeSweep},
	{name: "kind", decode: decodeKind},
	{name: "policy", decode: decodePolicy},
	{name: "task", decode: decodeTask},
	{name: "algorithm", decode: rlScalar(func(r *RL) any { return &r.Algorithm })},
	{name: "group_size", decode: rlScalar(func(r *RL) any { return &r.GroupSize })},
	{name: "max_new_tokens", decode: rlScalar(func(r *RL) any { return &r.MaxNewTokens })},
	{name: "temperature", decode: rlScalar(func(r *RL) any { return &r.Temperature })},
	{name: "clip", decode: rlScalar(func(r *RL) any { return &r.Clip })},
	{name: "kl_coef", decode: rlScalar(func(r *RL) any { return &r.KLCoef })},
	{name: "max_rollout_staleness", decode: rlScalar(func(r *RL) any { return &r.MaxRolloutStaleness })},
}

// Keys lists every key a spec file may contain, in documentation order.
func Keys() []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.name
	}
	return out
}

// LiveKeys lists the keys a running job's PATCH may change, plus `lr`
// (the outer optimizer's rate).
func LiveKeys() []string {
	out := []string{"lr"}
	for _, k := range keys {
		if k.live {
			out = append(out, k.name)
		}
	}
	return out
}

func lookup(name string) *key {
	for i := range keys {
		if keys[i].name == name {
			return &keys[i]
		}
	}
	return nil
}

var (
	outerKeys  = []string{"type", "lr", "momentum", "nesterov", "beta1", "beta2", "epsilon", "weight_decay", "clip_norm"}
	innerKeys  = []string{"type", "lr", "weight_decay", "beta1", "beta2", "epsilon", "clip_norm"}
	robustKeys = []string{"method", "tau", "iterations", "bucket", "trim"}
	layerKeys  = nn.LayerSpecKeys()
	modelKeys  = []string{"input", "layers"}
	reqKeys    = []string{"kind", "min_memory_mb"}
)

// Parse parses a YAML or JSON spec (JSON is YAML), fills defaults and
// validates. Unknown keys are errors, not silently ignored: a typo such as
// `batchsize` would otherwise train with the default.
func Parse(data []byte) (Spec, error) {
	m, err := mapping(data, "must be a mapping of keys (name, model, mode, ...)")
	if err != nil {
		return Spec{}, err
	}
	if err := checkKeys("", m, Keys()); err != nil {
		return Spec{}, err
	}
	s, g := base(), given{}
	if err := decodeAll(m, &s, g); err != nil {
		return Spec{}, err
	}
	if s.Sweep != nil {
		if err := s.Sweep.checkPaths(); err != nil {
			return Spec{}, err
		}
		base := &yaml.Node{Kind: yaml.MappingNode, Content: slices.Clone(m.Content)}
		removeKey(base, "sweep")
		b, err := yaml.Marshal(base)
		if err != nil {
			return Spec{}, err
		}
		s.Sweep.Base = string(b)
	}
	if s.Name == "" {
		return Spec{}, Errorf("name", "is required")
	}
	if s.ModelPreset == "" && len(s.Model.Layers) == 0 {
		return Spec{}, Errorf("model", "is required: a preset name (%s) or a list of layers", strings.Join(nn.PresetNames(), ", "))
	}
	if err := finishRL(&s, g); err != nil {
		return Spec{}, err
	}
	return finish(s, g)
}

func mapping(data []byte, want string) (*yaml.Node, error) {
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root); err != nil {
		return nil, &Error{Problem: "not valid YAML or JSON: " + err.Error()}
	}
	if len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, &Error{Problem: want}
	}
	return root.Content[0], nil
}

// decodeAll applies every key of mapping m to s, in order.
func decodeAll(m *yaml.Node, s *Spec, g given) error {
	for i := 0; i < len(m.Content); i += 2 {
		name, val := m.Content[i].Value, m.Content[i+1]
		k := lookup(name)
		if name == "optimizer" && g["outer_optimizer"] || name == "outer_optimizer" && g["optimizer"] {
			return Errorf(name, "optimizer and outer_optimizer are the same setting (optimizer is the deprecated name); give only outer_optimizer")
		}
		var err error
		if k.decode != nil {
			err = k.decode(val, s, g)
		} else {
			err = decodeField(name, val, s)
		}
		if err != nil {
			var se *Error
			if errors.As(err, &se) {
				return err
			}
			return Errorf(name, "%v", cleanYAMLError(err))
		}
		g[name] = true
		if name == "optimizer" {
			g["outer_optimizer"] = true
		}
	}
	return nil
}

// decodeField decodes one top-level scalar key into its field of s.
func decodeField(key string, val *yaml.Node, s *Spec) error {
	if val.Kind != yaml.ScalarNode {
		return Errorf(key, "must be a single value, not a list or mapping")
	}
	// Decoding a one-key mapping reuses the yaml tags of Spec.
	wrap := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: key}, val}}
	return wrap.Decode(s)
}

func durationKey(field func(*Spec) *Duration) func(*yaml.Node, *Spec, given) error {
	return func(val *yaml.Node, s *Spec, _ given) error {
		d, err := time.ParseDuration(val.Value)
		if err != nil {
			return err
		}
		*field(s) = Duration{d}
		return nil
	}
}

func decodeOuter(val *yaml.Node, s *Spec, g given) error {
	if err := checkKeys("outer_optimizer.", val, outerKeys); err != nil {
		return err
	}
	for i := 0; i < len(val.Content); i += 2 {
		g["outer_optimizer."+val.Content[i].Value] = true
	}
	opt := nn.OptimizerSpec{}
	if err := val.Decode(&opt); err != nil {
		return Errorf("outer_optimizer", "%v", cleanYAMLError(err))
	}
	if opt.Type == nn.OptAdamW && !g["outer_optimizer.weight_decay"] {
		opt.WeightDecay = nn.DefaultWeightDecay
	}
	s.OuterOptimizer = opt
	return nil
}

func decodeRobust(val *yaml.Node, s *Spec, g given) error {
	if err := checkKeys("robust.", val, robustKeys); err != nil {
		return err
	}
	r := Robust{}
	if err := val.Decode(&r); err != nil {
		return Errorf("robust", "%v", cleanYAMLError(err))
	}
	for i := 0; i < len(val.Content); i += 2 {
		g["robust."+val.Content[i].Value] = true
	}
	s.Robust = r
	return nil
}

func decodeInner(val *yaml.Node, s *Spec, g given) error {
	if err := checkKeys("inner_optimizer.", val, innerKeys); err != nil {
		return err
	}
	for i := 0; i < len(val.Content); i += 2 {
		k := "inner_optimizer." + val.Content[i].Value
		if k == "inner_optimizer.lr" && g["inner_lr"] {
			return Errorf("inner_lr", "and inner_optimizer.lr are the same setting (inner_lr is the deprecated name); give only inner_optimizer.lr")
		}
		g[k] = true
	}
	in := s.InnerOptimizer
	if err := val.Decode(&in); err != nil {
		return Errorf("inner_optimizer", "%v", cleanYAMLError(err))
	}
	if g["inner_optimizer.type"] && in.Type != s.InnerOptimizer.Type {
		// Another optimizer: its own defaults, not the old one's values.
		fresh := InnerOptimizer{Type: in.Type}
		_ = val.Decode(&fresh)
		in = fresh
	}
	s.InnerOptimizer = in
	return nil
}

func decodeInnerLR(val *yaml.Node, s *Spec, g given) error {
	if g["inner_optimizer.lr"] {
		return Errorf("inner_lr", "and inner_optimizer.lr are the same setting (inner_lr is the deprecated name); give only inner_optimizer.lr")
	}
	if err := decodeScalar(val, &s.InnerOptimizer.LR); err != nil {
		return err
	}
	g["inner_optimizer.lr"] = true
	return nil
}

func decodeWeight(val *yaml.Node, s *Spec, _ given) error {
	var w float64
	if err := decodeScalar(val, &w); err != nil {
		return Errorf("weight", "%v", cleanYAMLError(err))
	}
	if !(w > 0) || w > MaxWeight {
		return Errorf("weight", "must be a number above 0 and at most %g, got %v: a job's share of the grid is its weight over the running jobs' sum", float64(MaxWeight), w)
	}
	s.Weight = w
	return nil
}

func decodePriority(val *yaml.Node, s *Spec, _ given) error {
	var p int
	if err := decodeScalar(val, &p); err != nil {
		return Errorf("priority", "%v", cleanYAMLError(err))
	}
	if p < -MaxPriority || p > MaxPriority {
		return Errorf("priority", "must be a whole number in -%d..%d, got %d", MaxPriority, MaxPriority, p)
	}
	s.Priority = p
	return nil
}

// Worker kinds `requires.kind` may name.
var workerKinds = []string{"native", "browser", "gpu"}

func decodeRequires(val *yaml.Node, s *Spec, _ given) error {
	if err := checkKeys("requires.", val, reqKeys); err != nil {
		return err
	}
	var r Requires
	for i := 0; i < len(val.Content); i += 2 {
		k, v := val.Content[i].Value, val.Content[i+1]
		switch k {
		case "kind":
			var kinds []string
			if v.Kind == yaml.ScalarNode {
				kinds = []string{v.Value}
			} else if err := v.Decode(&kinds); err != nil {
				return Errorf("requires.kind", "want a list of worker kinds (%s)", strings.Join(workerKinds, ", "))
			}
			if len(kinds) == 0 {
				return Errorf("requires.kind", "is empty: name the worker kinds that may run the job (%s), or leave the key out", strings.Join(workerKinds, ", "))
			}
			for _, kind := range kinds {
				if !slices.Contains(workerKinds, kind) {
					return Errorf("requires.kind", "%q is not a worker kind (want %s)", kind, strings.Join(workerKinds, ", "))
				}
			}
			r.Kind = kinds
		case "min_memory_mb":
			if err := decodeScalar(v, &r.MinMemoryMB); err != nil || r.MinMemoryMB < 0 || r.MinMemoryMB > 1<<30 {
				return Errorf("requires.min_memory_mb", "want a whole number of megabytes >= 0, got %q", v.Value)
			}
		}
	}
	s.Requires = r
	return nil
}

func decodeScalar(val *yaml.Node, dst any) error {
	if val.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be a single value, not a list or mapping")
	}
	return val.Decode(dst)
}

// decodeDataset reads a built-in name or a {type: ..., ...} object; a
// text set's val_fraction defaults to dataset.DefaultValFraction.
func decodeDataset(val *yaml.Node, s *Spec, _ given) error {
	switch val.Kind {
	case yaml.ScalarNode:
		s.Dataset = dataset.Builtin(val.Value)
		return nil
	case yaml.MappingNode:
	default:
		return Errorf("dataset", "want a built-in name (%s) or a mapping with a type (%s)",
			strings.Join(dataset.Builtins, ", "), strings.Join(dataset.Types, ", "))
	}
	typ := ""
	for i := 0; i < len(val.Content); i += 2 {
		if val.Content[i].Value == "type" {
			typ = val.Content[i+1].Value
		}
	}
	keys, ok := dataset.SpecKeys[typ]
	if !ok {
		return Errorf("dataset.type", "%q is not a data set type (want %s); a built-in data set is given by its name alone (dataset: mnist)",
			typ, strings.Join(dataset.Types, ", "))
	}
	if err := checkKeys("dataset.", val, append([]string{"type"}, keys...)); err != nil {
		return err
	}
	var d dataset.Spec
	for i := 0; i < len(val.Content); i += 2 {
		k, v := val.Content[i].Value, val.Content[i+1]
		if k == "type" {
			d.Type = v.Value
			continue
		}
		if k == "val_fraction" {
			if err := decodeScalar(v, &d.ValFraction); err != nil {
				return Errorf("dataset.val_fraction", "%v", cleanYAMLError(err))
			}
			if d.ValFraction == 0 {
				return Errorf("dataset.val_fraction", "must be in (0, 0.5], got 0")
			}
			continue
		}
		if done, err := decodeTaskKey(k, v, &d); done || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		if k == "glob" {
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				return Errorf("dataset.glob", "want a pattern of the files under path, such as \"**/*.go\" (quoted: YAML reads a bare * as an alias)")
			}
			d.Glob = v.Value
			continue
		}
		for _, f := range d.Files() {
			if f.Key == k {
				if v.Kind != yaml.ScalarNode || v.Value == "" {
					return Errorf("dataset."+k, "want the path of a file (relative to the spec file)")
				}
				*f.Path = v.Value
			}
		}
	}
	if (d.Type == dataset.TypeText || d.Type == dataset.TypeTask) && d.ValFraction == 0 {
		d.ValFraction = dataset.DefaultValFraction
	}
	if d.Type == dataset.TypeTask && d.Examples == 0 && d.Task != rltask.JSONL {
		d.Examples = dataset.DefaultTaskExamples
	}
	s.Dataset = d
	return nil
}

// decodeTaskKey reads the keys of a task data set (type task): name,
// digits, length, examples and seed. It reports whether k was one of them.
func decodeTaskKey(k string, v *yaml.Node, d *dataset.Spec) (bool, error) {
	var err error
	switch k {
	case "name":
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			return true, Errorf("dataset.name", "want the name of a task (add, reverse, sort, or jsonl with path)")
		}
		d.Task = v.Value
	case "digits":
		err = decodeScalar(v, &d.Digits)
	case "length":
		err = decodeScalar(v, &d.Length)
	case "examples":
		err = decodeScalar(v, &d.Examples)
		if err == nil && d.Examples == 0 {
			return true, Errorf("dataset.examples", "must be at least 2 (leave it out for %d)", dataset.DefaultTaskExamples)
		}
	case "seed":
		err = decodeScalar(v, &d.TaskSeed)
	default:
		return false, nil
	}
	if err != nil {
		return true, Errorf("dataset."+k, "%v", cleanYAMLError(err))
	}
	return true, nil
}

func decodeModel(val *yaml.Node, s *Spec, _ given) error {
	switch val.Kind {
	case yaml.ScalarNode:
		spec, err := nn.Preset(val.Value)
		if err != nil {
			return Errorf("model", "%v", err)
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
				return Errorf("model.input", "want [channels, height, width] or [t]: %v", cleanYAMLError(err))
			}
		}
		return nil
	}
	return Errorf("model", "want a preset name (%s) or a list of layers", strings.Join(nn.PresetNames(), ", "))
}

func decodeLayers(key string, val *yaml.Node, m *nn.ModelSpec) error {
	if val.Kind != yaml.SequenceNode || len(val.Content) == 0 {
		return Errorf(key, "want a non-empty list of layers")
	}
	for i, l := range val.Content {
		lk := fmt.Sprintf("%s[%d].", key, i)
		if err := checkKeys(lk, l, layerKeys); err != nil {
			return err
		}
		for j := 0; j+1 < len(l.Content); j += 2 {
			if l.Content[j].Value == "layers" { // a residual block's body
				var body nn.ModelSpec
				if err := decodeLayers(lk+"layers", l.Content[j+1], &body); err != nil {
					return err
				}
			}
		}
		var ls nn.LayerSpec
		if err := l.Decode(&ls); err != nil {
			return Errorf(strings.TrimSuffix(lk, "."), "%v", cleanYAMLError(err))
		}
		m.Layers = append(m.Layers, ls)
	}
	return nil
}

// checkKeys reports the first key of mapping n that is not in known.
func checkKeys(prefix string, n *yaml.Node, known []string) error {
	if n.Kind != yaml.MappingNode {
		return Errorf(strings.TrimSuffix(prefix, "."), "must be a mapping with keys %s", strings.Join(known, ", "))
	}
	seen := map[string]bool{}
	for i := 0; i < len(n.Content); i += 2 {
		k := n.Content[i].Value
		if !slices.Contains(known, k) {
			return Errorf(prefix+k, "unknown key (line %d); known keys: %s", n.Content[i].Line, strings.Join(known, ", "))
		}
		if seen[k] {
			return Errorf(prefix+k, "given twice (line %d)", n.Content[i].Line)
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
