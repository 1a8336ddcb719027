package jobspec

import (
	"errors"
	"math"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/rltask"
)

// KindRL is the job kind of reinforcement learning from a verifiable
// task: workers sample completions of the task's prompts from the policy
// (rollout leases), the coordinator scores them with the task's checker,
// and workers compute the GRPO gradient of scored groups (learn leases),
// which the job applies as any asynchronous job applies a gradient.
const KindRL = "rl"

// AlgorithmGRPO is the only RL algorithm: group-relative policy
// optimisation (package rl).
const AlgorithmGRPO = "grpo"

// Defaults and bounds of an RL job's keys.
const (
	DefaultGroupSize           = 8
	DefaultMaxNewTokens        = 16
	DefaultRLTemperature       = 1.0
	DefaultClip                = 0.2
	DefaultMaxRolloutStaleness = 2
	MaxGroupSize               = 256
	MaxMaxNewTokens            = 1024
	MaxRLTemperature           = 10
	MaxMaxRolloutStaleness     = 64
)

// RL holds the keys of a kind: rl job. Its starting parameters are
// Spec.Policy, read as `init` reads them.
type RL struct {
	// Task is the verifiable task whose prompts are rolled out and whose
	// checker scores the completions.
	Task      rltask.Spec `json:"task"`
	Algorithm string      `json:"algorithm"`
	// GroupSize is how many completions each prompt gets; GRPO's
	// advantages are relative to the group.
	GroupSize    int     `json:"group_size"`
	MaxNewTokens int     `json:"max_new_tokens"`
	Temperature  float64 `json:"temperature"`
	// Clip is the ratio clip ε of the surrogate objective.
	Clip float64 `json:"clip"`
	// KLCoef weighs the KL penalty against the initial policy (0: none).
	KLCoef float64 `json:"kl_coef"`
	// MaxRolloutStaleness is how many versions older than the current
	// one a scored group may be and still feed a learn lease.
	MaxRolloutStaleness int `json:"max_rollout_staleness"`
}

// rlKeys are the top-level keys only a kind: rl job takes (policy and
// kind are decoded apart).
var rlKeys = []string{"task", "algorithm", "group_size", "max_new_tokens", "temperature", "clip", "kl_coef", "max_rollout_staleness"}

// taskKeys are the keys of the `task` mapping.
var taskKeys = []string{"type", "digits", "length", "path", "sha256"}

func defaultRL() *RL {
	return &RL{
		Algorithm:           AlgorithmGRPO,
		GroupSize:           DefaultGroupSize,
		MaxNewTokens:        DefaultMaxNewTokens,
		Temperature:         DefaultRLTemperature,
		Clip:                DefaultClip,
		MaxRolloutStaleness: DefaultMaxRolloutStaleness,
	}
}

// rlOf returns s.RL, creating it with its defaults.
func rlOf(s *Spec) *RL {
	if s.RL == nil {
		s.RL = defaultRL()
	}
	return s.RL
}

func decodeKind(val *yaml.Node, s *Spec, _ given) error {
	if val.Kind != yaml.ScalarNode || val.Value != KindRL {
		return Errorf("kind", "%q is not a job kind: the only kind is rl (reinforcement learning); a supervised job gives no kind", val.Value)
	}
	s.Kind = KindRL
	rlOf(s)
	return nil
}

func decodePolicy(val *yaml.Node, s *Spec, g given) error {
	// The same forms as init: a safetensors file, {file, sha256} or
	// {job: ID}; errors name policy instead of init.
	saved := s.Init
	err := decodeInit(val, s, g)
	s.Policy, s.Init = s.Init, saved
	var se *Error
	if errors.As(err, &se) {
		se.Key = "policy" + strings.TrimPrefix(se.Key, "init")
		se.Problem = strings.ReplaceAll(se.Problem, "init", "policy")
	}
	return err
}

func decodeTask(val *yaml.Node, s *Spec, _ given) error {
	if err := checkKeys("task.", val, taskKeys); err != nil {
		return err
	}
	var t rltask.Spec
	for i := 0; i < len(val.Content); i += 2 {
		k, v := val.Content[i].Value, val.Content[i+1]
		var err error
		switch k {
		case "type":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				return Errorf("task.type", "want a task: %s", strings.Join(rltask.Names, ", "))
			}
			t.Name = v.Value
		case "digits":
			err = decodeScalar(v, &t.Digits)
		case "length":
			err = decodeScalar(v, &t.Length)
		case "path":
			err = decodeScalar(v, &t.Path)
		case "sha256":
			err = decodeScalar(v, &t.SHA256)
		}
		if err != nil {
			return Errorf("task."+k, "%v", cleanYAMLError(err))
		}
	}
	if err := t.Validate(); err != nil {
		var ke *rltask.KeyError
		if errors.As(err, &ke) {
			k := ke.Key
			if k == "name" {
				k = "type"
			}
			return Errorf("task."+k, "%s", ke.Problem)
		}
		return Errorf("task", "%v", err)
	}
	rlOf(s).Task = t
	return nil
}

// rlScalar decodes one of the RL job's scalar keys into its field.
func rlScalar(field func(*RL) any) func(*yaml.Node, *Spec, given) error {
	return func(val *yaml.Node, s *Spec, _ given) error {
		if val.Kind != yaml.ScalarNode {
			return errors.New("must be a single value, not a list or mapping")
		}
		return decodeScalar(val, field(rlOf(s)))
	}
}

// finishRL checks the keys that set an RL job apart before defaults are
// filled: the RL keys only with kind: rl, kind: rl with a task and a
// policy and without a data set. It clears the data set the defaults
// chose: an RL job's data are its task's prompts.
func finishRL(s *Spec, g given) error {
	if s.Kind != KindRL {
		for _, k := range append([]string{"policy"}, rlKeys...) {
			if g[k] {
				return Errorf(k, "is a key of RL jobs only: add kind: rl, or remove it")
			}
		}
		s.RL = nil
		return nil
	}
	switch {
	case g["sweep"]:
		return Errorf("sweep", "sweeps of RL jobs are not supported yet: remove sweep")
	case g["dataset"]:
		return Errorf("dataset", "an RL job's prompts come from its task: remove dataset (to fine-tune on a task's answers first, run a supervised job with dataset: {type: task, ...} and give it as policy: {job: ID})")
	case g["init"]:
		return Errorf("init", "an RL job starts from its policy: give the parameters as policy, not init")
	case s.Policy == nil:
		return Errorf("policy", "is required with kind: rl: the model to improve, as {job: ID} (a finished text job on this coordinator) or the path of a safetensors file (crowdtrain export)")
	case !g["task"]:
		return Errorf("task", "is required with kind: rl: the verifiable task, e.g. {type: add, digits: 2} (types: %s)", strings.Join(rltask.Names, ", "))
	case g["update_codec"] && s.UpdateCodec != CodecFP32:
		return Errorf("update_codec", "an RL job's learn results are fp32 (%s is not supported for RL): remove update_codec", s.UpdateCodec)
	}
	if (s.Mode == ModeSync || s.Mode == ModeDiLoCo) && !g["backup_workers"] {
		// A learn lease past a round's K carries groups of rollouts that
		// a closed round throws away: an RL round leases no spare.
		s.BackupWorkers = 0
		g["backup_workers"] = true
	}
	if g["snapshot"] && s.Snapshot != SnapshotGranted {
		return Errorf("snapshot", "an RL lease computes from the policy version it names: an RL job's snapshot is granted; remove snapshot")
	}
	s.Snapshot = SnapshotGranted
	g["snapshot"] = true
	s.Dataset = dataset.Spec{}
	if !g["target_accuracy"] {
		s.TargetAccuracy = 0
	}
	return nil
}

// validateRL checks an RL job's keys; nil for any other job.
func (s Spec) validateRL() error {
	r := s.RL
	if s.Kind != KindRL {
		if r != nil || s.Policy != nil {
			return Errorf("kind", "policy and the RL keys need kind: rl")
		}
		return nil
	}
	if r == nil {
		return Errorf("task", "is required with kind: rl")
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	t := 0
	if len(s.Model.Input) == 1 {
		t = s.Model.Input[0]
	}
	switch {
	case !s.TextModel():
		return Errorf("model", "an RL job's policy is a language model: its input must be [t], token ids, got %v", s.Model.Input)
	case !slices.Contains(Modes, s.Mode):
		return Errorf("mode", "%q is not a mode (want async, sync or diloco)", s.Mode)
	case r.Algorithm != AlgorithmGRPO:
		return Errorf("algorithm", "%q is not an RL algorithm (want grpo)", r.Algorithm)
	case r.GroupSize < 2 || r.GroupSize > MaxGroupSize:
		return Errorf("group_size", "must be in 2..%d completions per prompt (GRPO compares a completion with its group), got %d", MaxGroupSize, r.GroupSize)
	case r.MaxNewTokens < 1 || r.MaxNewTokens > MaxMaxNewTokens || r.MaxNewTokens >= t:
		return Errorf("max_new_tokens", "must be in 1..%d and below the model's context (%d tokens), got %d", MaxMaxNewTokens, t, r.MaxNewTokens)
	case !(r.Temperature > 0 && r.Temperature <= MaxRLTemperature):
		return Errorf("temperature", "must be in (0, %d]: rollouts are sampled (greedy decoding is the evaluation's), got %v", MaxRLTemperature, r.Temperature)
	case !(r.Clip > 0 && r.Clip < 1):
		return Errorf("clip", "must be in (0, 1) (the ratio clip; 0.2 is usual), got %v", r.Clip)
	case !(r.KLCoef >= 0) || !finite(r.KLCoef):
		return Errorf("kl_coef", "must be a finite number >= 0 (0: no KL penalty), got %v", r.KLCoef)
	case s.Snapshot != SnapshotGranted:
		return Errorf("snapshot", "an RL job's snapshot is granted, got %s", s.Snapshot)
	case r.MaxRolloutStaleness < 0 || r.MaxRolloutStaleness > MaxMaxRolloutStaleness:
		return Errorf("max_rollout_staleness", "must be in 0..%d policy versions, got %d", MaxMaxRolloutStaleness, r.MaxRolloutStaleness)
	}
	if err := r.Task.Validate(); err != nil {
		return Errorf("task", "%v", err)
	}
	if !slices.Contains(rltask.Names, r.Task.Name) {
		return Errorf("task.type", "%q is not a task", r.Task.Name)
	}
	in := s.Init
	s.Init = s.Policy
	if err := s.validateInit(); err != nil {
		var se *Error
		if errors.As(err, &se) {
			se.Key = "policy" + strings.TrimPrefix(se.Key, "init")
		}
		return err
	}
	s.Init = in
	return nil
}

// validateRLJob validates a kind: rl spec: the model, the RL keys, and
// the training keys of its learning side. Its prompts and completions
// are text in the policy's tokens: bytes, or the policy's tokenizer's
// ids (the coordinator takes the policy's tokenizer when the spec names
// none).
func (s Spec) validateRLJob() error {
	if len(s.Model.Input) == 0 {
		return Errorf("model.input", "is required: [t], the policy's context")
	}
	if _, err := nn.NewModel(s.Model); err != nil {
		return Errorf("model", "%v", err)
	}
	if err := s.validateRL(); err != nil {
		return err
	}
	return s.validateTraining()
}
