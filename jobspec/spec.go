package jobspec

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/nn"
)

// Spec is what an operator submits: a model, the data, and how to train.
// A parsed Spec has every default filled in, so the stored spec records
// what was chosen (the outer optimizer a mode picked, say).
type Spec struct {
	Name string `json:"name" yaml:"name"`
	// ModelPreset is set when `model` names a preset; Model is always the
	// resolved architecture.
	ModelPreset string       `json:"model_preset,omitempty" yaml:"-"`
	Model       nn.ModelSpec `json:"model" yaml:"-"`
	// Dataset is a built-in data set's name or files of a type (idx,
	// npy, text); see dataset.Spec.
	Dataset dataset.Spec `json:"dataset" yaml:"-"`
	// Tokenizer, for a text job, turns its text into token ids (nil:
	// the bytes are the tokens); see tokenizer.go.
	Tokenizer *Tokenizer `json:"tokenizer,omitempty" yaml:"-"`
	// Init, when set, is what version 0's parameters are instead of a
	// random initialization (init.go).
	Init *Init `json:"init,omitempty" yaml:"-"`

	// Mode is the update rule: ModeAsync, ModeSync or ModeDiLoCo.
	Mode string `json:"mode" yaml:"mode"`
	// OuterOptimizer is the coordinator's optimizer (the `optimizer` key
	// is its deprecated alias).
	OuterOptimizer nn.OptimizerSpec `json:"outer_optimizer" yaml:"-"`
	// InnerOptimizer is what workers run their local steps with.
	InnerOptimizer InnerOptimizer `json:"inner_optimizer" yaml:"-"`
	BatchSize      int            `json:"batch_size" yaml:"batch_size"`
	LocalSteps     int            `json:"local_steps" yaml:"local_steps"`
	// RoundSize is how many results a round averages: K for sync, M for
	// diloco, and for async diloco the N of Delayed Nesterov.
	RoundSize     int      `json:"round_size" yaml:"round_size"`
	BackupWorkers int      `json:"backup_workers" yaml:"backup_workers"`
	RoundTimeout  Duration `json:"round_timeout" yaml:"-"`
	AsyncDiLoCo   bool     `json:"async_diloco" yaml:"async_diloco"`

	DynamicLocalSteps bool `json:"dynamic_local_steps" yaml:"dynamic_local_steps"`
	MinLocalSteps     int  `json:"min_local_steps" yaml:"min_local_steps"`
	MaxLocalSteps     int  `json:"max_local_steps" yaml:"max_local_steps"`
	// Snapshot is SnapshotLatest or SnapshotGranted: which model version a
	// task of an asynchronous mode computes from.
	Snapshot string `json:"snapshot" yaml:"snapshot"`

	MaxStaleness int    `json:"max_staleness" yaml:"max_staleness"`
	StalenessLR  string `json:"staleness_lr" yaml:"staleness_lr"`
	ShardSize    int    `json:"shard_size" yaml:"shard_size"`
	// TargetAccuracy stops the job at an evaluation whose accuracy is at
	// or over it (0: none; a text job has none).
	TargetAccuracy float64 `json:"target_accuracy" yaml:"target_accuracy"`
	// TargetLoss stops the job at an evaluation whose loss (mean
	// cross-entropy per label position, nats) is at or under it (0: none).
	TargetLoss float64 `json:"target_loss,omitempty" yaml:"target_loss"`
	MaxEpochs  int     `json:"max_epochs" yaml:"max_epochs"`
	Seed       int64   `json:"seed" yaml:"seed"`
	EvalEvery  int     `json:"eval_every" yaml:"eval_every"`
	// CheckpointEvery is the most updates between checkpoints (the
	// coordinator's --checkpoint-interval bounds the time too).
	CheckpointEvery int `json:"checkpoint_every" yaml:"checkpoint_every"`
	// MaxUpdateNormRatio rejects an update whose L2 norm exceeds this many
	// times the running mean of accepted ones (0 turns the check off).
	MaxUpdateNormRatio float64  `json:"max_update_norm_ratio" yaml:"max_update_norm_ratio"`
	LeaseTimeout       Duration `json:"lease_timeout" yaml:"-"`
	// RelayWindow is how long a relay sums its workers' results before
	// it forwards them upstream in an asynchronous mode (round modes
	// forward once per round); 0, the default, forwards each result as
	// it is accepted (docs/RELAYS.md says why). The spec records it like
	// every other default.
	RelayWindow Duration `json:"relay_window" yaml:"-"`
	// Robust is how results are combined against hostile ones, in every
	// mode (the `robust` key).
	Robust Robust `json:"robust" yaml:"-"`
	// SpotCheck is the fraction of results computed again by another
	// volunteer and compared (0: off); SpotCheckStrikes mismatches ban a
	// volunteer; SpotCheckTolerance is the relative difference
	// ‖a−b‖/max(‖a‖,‖b‖) allowed between results not known to be
	// bit-identical (docs/SPOTCHECKS.md).
	SpotCheck          float64 `json:"spot_check" yaml:"spot_check"`
	SpotCheckStrikes   int     `json:"spot_check_strikes" yaml:"spot_check_strikes"`
	SpotCheckTolerance float64 `json:"spot_check_tolerance" yaml:"spot_check_tolerance"`

	// UpdateCodec is how workers send their updates: CodecFP32, CodecFP16,
	// CodecInt8, CodecTopK or CodecSparse (docs/PROTOCOL.md, Update
	// codecs); TopKFraction is the share of entries a topk update sends.
	UpdateCodec  string  `json:"update_codec" yaml:"update_codec"`
	TopKFraction float64 `json:"topk_fraction" yaml:"topk_fraction"`
	// SparseK is the share of each chunk a sparse update sends, and
	// SparseChunk the values per chunk; both 0 unless the codec is sparse.
	SparseK     float64 `json:"sparse_k,omitempty" yaml:"sparse_k"`
	SparseChunk int     `json:"sparse_chunk,omitempty" yaml:"sparse_chunk"`
	// SnapshotCodec is how snapshots are served to workers that read it:
	// CodecFP32 or CodecFP16.
	SnapshotCodec string `json:"snapshot_codec" yaml:"snapshot_codec"`
	// MaxCommFraction bounds the share of a worker's time spent on the
	// wire: with dynamic_local_steps its H is raised until communication
	// takes at most this share of each task.
	MaxCommFraction float64 `json:"max_comm_fraction" yaml:"max_comm_fraction"`

	// Weight is the job's share of the grid's compute among the running
	// jobs of its priority (0 in a spec stored before the key: 1), and
	// Priority its class: higher classes are served first
	// (placement.Pool). Both may change while it runs.
	Weight   float64 `json:"weight" yaml:"weight"`
	Priority int     `json:"priority" yaml:"priority"`
	// Requires limits the workers the job is placed on.
	Requires Requires `json:"requires,omitzero" yaml:"-"`
	// Kind is KindRL for a reinforcement-learning job (rl.go), empty for
	// supervised training. Policy is an RL job's starting parameters
	// (the forms of Init), and RL its other keys.
	Kind   string `json:"kind,omitempty" yaml:"-"`
	Policy *Init  `json:"policy,omitempty" yaml:"-"`
	RL     *RL    `json:"rl,omitempty" yaml:"-"`
	// Sweep, set on a sweep's spec only, makes it a hyperparameter search
	// whose trials are this spec with the sweep's values (sweep.go).
	Sweep *Sweep `json:"sweep,omitempty" yaml:"-"`
}

// Requires is the `requires` key: what a worker must have to be given
// the job.
type Requires struct {
	Kind        []string `json:"kind,omitempty" yaml:"kind"`
	MinMemoryMB int      `json:"min_memory_mb,omitempty" yaml:"min_memory_mb"`
}

// DefaultRelayWindow is relay_window when a spec leaves it out: none, a
// relay forwards each result of an asynchronous mode as it is accepted.
// A window sums several into one aggregate, which the root takes as that
// many steps from one base: the root hears fewer messages, and the model
// needs more examples (docs/RELAYS.md has the figures).
const DefaultRelayWindow = 0

// EffectiveRelayWindow is how long a relay sums results in an
// asynchronous mode: RelayWindow (0: it forwards each).
func (s *Spec) EffectiveRelayWindow() time.Duration { return max(0, s.RelayWindow.Duration) }

// EffectiveWeight is Weight, or 1 for a spec stored before the key.
func (s *Spec) EffectiveWeight() float64 {
	if s.Weight > 0 {
		return s.Weight
	}
	return 1
}

// Codec names in a spec (update_codec, snapshot_codec).
const (
	CodecFP32 = "fp32"
	CodecFP16 = "fp16"
	CodecInt8 = "int8"
	CodecTopK = "topk"
	// CodecSparse is SparseLoCo's compression: per chunk, the largest
	// entries with 2-bit values.
	CodecSparse = "sparse"
)

// Codec defaults.
const (
	DefaultTopKFraction    = 0.01
	DefaultMaxCommFraction = 0.1
	DefaultSparseK         = 0.01
	DefaultSparseChunk     = 4096
)

// SparseOuterMomentum is DiLoCo's default outer momentum with
// update_codec sparse (0.9 with the other codecs).
const SparseOuterMomentum = 0.7

// Sparse codec bounds (the protocol's: a chunk's offsets fit 16 bits).
const (
	MaxSparseK     = 0.25
	MinSparseChunk = 64
	MaxSparseChunk = 1 << 16
)

// Robust is the `robust` key: the method and its parameters (see
// engine.Robust). A spec stored before the key existed decodes to the
// zero value, which WithDefaults turns into the default method.
type Robust struct {
	Method     string  `json:"method" yaml:"method"`
	Tau        float64 `json:"tau,omitempty" yaml:"tau"`
	Iterations int     `json:"iterations,omitempty" yaml:"iterations"`
	Bucket     int     `json:"bucket,omitempty" yaml:"bucket"`
	Trim       float64 `json:"trim,omitempty" yaml:"trim"`
}

// Robust defaults.
const (
	DefaultRobustMethod     = engine.RobustCenteredClip
	DefaultRobustTau        = 1.5
	DefaultRobustIterations = 3
	DefaultRobustBucket     = 2
	DefaultRobustTrim       = 0.2
)

// WithDefaults fills what r leaves out.
func (r Robust) WithDefaults() Robust {
	if r.Method == "" {
		r.Method = DefaultRobustMethod
	}
	if r.Tau == 0 {
		r.Tau = DefaultRobustTau
	}
	if r.Iterations == 0 {
		r.Iterations = DefaultRobustIterations
	}
	if r.Bucket == 0 {
		r.Bucket = DefaultRobustBucket
	}
	if r.Trim == 0 && r.Method == engine.RobustTrimmedMean {
		r.Trim = DefaultRobustTrim
	}
	return r
}

// Engine is r as the engine takes it.
func (r Robust) Engine() engine.Robust {
	return engine.Robust{Method: r.Method, Tau: r.Tau, Iterations: r.Iterations, Bucket: r.Bucket, Trim: r.Trim}
}

// Modes (Spec.Mode).
const (
	ModeAsync  = "async"  // apply each result as it arrives (DOWNPOUR), bounded by staleness
	ModeSync   = "sync"   // rounds of K results (of K+backup_workers leased) averaged, one step per round
	ModeDiLoCo = "diloco" // H inner steps per task; rounds of M deltas averaged, outer Nesterov
)

// Modes lists the modes in documentation order.
var Modes = []string{ModeAsync, ModeSync, ModeDiLoCo}

// Snapshot policies (Spec.Snapshot), the same words as the protocol's.
const (
	SnapshotLatest  = "latest"  // the base is fixed when the worker starts computing
	SnapshotGranted = "granted" // the base is fixed when the lease is granted
)

// DefaultAsyncSnapshot is the snapshot policy of an asynchronous job that
// does not choose one: a worker computes from the newest snapshot when it
// starts a task, not from the one current when the task was granted, so a
// slow worker's prefetched tasks are not stale before it begins them.
const DefaultAsyncSnapshot = SnapshotLatest

// Inner optimizers (InnerOptimizer.Type), the same words as the protocol's.
const (
	InnerSGD   = "sgd"
	InnerAdamW = "adamw"
)

// Step-size rules for stale results (Spec.StalenessLR).
const (
	StalenessLRNone    = "none"    // apply every accepted result at the full rate
	StalenessLRInverse = "inverse" // scale the step by 1/(1+staleness)
)

// Update kinds a mode asks workers for (UpdateKind), the protocol's words.
const (
	UpdateGradient = "gradient" // (w_base - w_after) / inner lr
	UpdateDelta    = "delta"    // w_base - w_after
)

// InnerOptimizer is the optimizer a worker runs its local steps with; its
// state starts fresh with every task.
type InnerOptimizer struct {
	Type        string  `json:"type" yaml:"type"`
	LR          float64 `json:"lr" yaml:"lr"`
	WeightDecay float64 `json:"weight_decay,omitempty" yaml:"weight_decay"`
	Beta1       float64 `json:"beta1,omitempty" yaml:"beta1"`
	Beta2       float64 `json:"beta2,omitempty" yaml:"beta2"`
	Epsilon     float64 `json:"epsilon,omitempty" yaml:"epsilon"`
	// ClipNorm (any type; 0 = off) clips each inner step's gradient to
	// this global L2 norm.
	ClipNorm float64 `json:"clip_norm,omitempty" yaml:"clip_norm"`
}

// UpdateKind is what a task's result holds in this mode. DiLoCo's outer
// lr of 0.7 assumes the plain difference: divided by an AdamW rate of
// 1e-3, each step would be 1,000 times too large.
func (s Spec) UpdateKind() string {
	if s.Mode == ModeDiLoCo {
		return UpdateDelta
	}
	return UpdateGradient
}

// Rounds reports whether the mode steps once per round of results
// rather than once per result.
func (s Spec) Rounds() bool {
	return s.Mode == ModeSync || (s.Mode == ModeDiLoCo && !s.AsyncDiLoCo)
}

// TaskSteps is the most inner steps one task may hold: the unit the
// epoch's examples are cut into.
func (s Spec) TaskSteps() int {
	if s.DynamicLocalSteps {
		return max(s.LocalSteps, s.MaxLocalSteps)
	}
	return s.LocalSteps
}

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

// UnmarshalJSON reads a stored spec, also one stored before modes
// existed: its `optimizer` and `inner_lr` become the outer and inner
// optimizers, and it trains as it did (async, granted snapshots).
func (s *Spec) UnmarshalJSON(b []byte) error {
	type plain Spec
	var v struct {
		plain
		Optimizer *nn.OptimizerSpec `json:"optimizer"`
		InnerLR   *float64          `json:"inner_lr"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Spec(v.plain)
	if s.Mode == "" {
		s.Mode = ModeAsync
		if s.Snapshot == "" {
			s.Snapshot = SnapshotGranted
		}
	}
	if v.Optimizer != nil && s.OuterOptimizer.Type == "" {
		s.OuterOptimizer = *v.Optimizer
	}
	if v.InnerLR != nil && s.InnerOptimizer.Type == "" {
		s.InnerOptimizer = InnerOptimizer{Type: InnerSGD, LR: *v.InnerLR}
	}
	s.Robust = s.Robust.WithDefaults()
	// A spec stored before spot checks existed keeps them off (its
	// spot_check decodes as 0) with the other keys at their defaults.
	if s.SpotCheckStrikes == 0 {
		s.SpotCheckStrikes = engine.DefaultSpotCheckStrikes
	}
	if s.SpotCheckTolerance == 0 {
		s.SpotCheckTolerance = engine.DefaultSpotCheckTolerance
	}
	// A spec stored before codecs existed travels as it did.
	if s.UpdateCodec == "" {
		s.UpdateCodec = CodecFP32
	}
	if s.TopKFraction == 0 {
		s.TopKFraction = DefaultTopKFraction
	}
	s.sparseDefaults(given{})
	if s.SnapshotCodec == "" {
		s.SnapshotCodec = CodecFP32
	}
	if s.MaxCommFraction == 0 {
		s.MaxCommFraction = DefaultMaxCommFraction
	}
	if s.RoundSize == 0 {
		s.RoundSize = 1
	}
	if s.MinLocalSteps == 0 {
		s.MinLocalSteps = 1
	}
	if s.MaxLocalSteps == 0 {
		s.MaxLocalSteps = max(s.LocalSteps, 1)
	}
	if s.RoundTimeout.Duration == 0 {
		s.RoundTimeout = s.LeaseTimeout
	}
	return nil
}
