package jobspec

import (
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
)

// finish fills the mode's defaults, resolves the model preset and
// validates every key.
func finish(s Spec, g given) (Spec, error) {
	if !slices.Contains(Modes, s.Mode) {
		return Spec{}, Errorf("mode", "%q is not a mode (want %s)", s.Mode, strings.Join(Modes, ", "))
	}
	modeDefaults(&s, g)
	if s.ModelPreset != "" {
		spec, err := nn.Preset(s.ModelPreset)
		if err != nil {
			return Spec{}, Errorf("model", "%v", err)
		}
		s.Model = spec
	}
	if s.TextModel() {
		// A language model's accuracy (the next byte guessed right) is
		// no goal: a text job stops at target_loss or max_epochs.
		if g["target_accuracy"] && s.TargetAccuracy > 0 {
			return Spec{}, Errorf("target_accuracy", "a text job has no accuracy target (the model reads token sequences); give target_loss in nats instead")
		}
		s.TargetAccuracy = 0
	}
	if len(s.Model.Input) == 0 && s.Dataset.IsImageBuiltin() {
		// Every built-in image data set is 28x28 grey.
		s.Model.Input = []int{1, 28, 28}
	}
	return s, s.Validate()
}

// TextModel reports whether the model reads token sequences (input [t]):
// a text job's model.
func (s Spec) TextModel() bool { return len(s.Model.Input) == 1 }

// Validate checks every key and says which one is wrong.
func (s Spec) Validate() error {
	if len(s.Name) > 128 {
		return Errorf("name", "at most 128 characters")
	}
	if err := s.validateInit(); err != nil {
		return err
	}
	if s.Kind == KindRL || s.RL != nil || s.Policy != nil {
		return s.validateRLJob()
	}
	if err := s.Dataset.Validate(); err != nil {
		var ke *dataset.KeyError
		if errors.As(err, &ke) {
			return &Error{Key: ke.Key, Problem: ke.Problem}
		}
		return Errorf("dataset", "%v", err)
	}
	if len(s.Model.Input) == 0 {
		if s.Dataset.Type == dataset.TypeIDX || s.Dataset.Type == dataset.TypeNPY {
			// The coordinator takes the input's shape from the data
			// (InputFromData) and checks the model then.
			return s.validateTraining()
		}
		return Errorf("model.input", "is required with this data set: [t], the context, for text (e.g. [128])")
	}
	if _, err := nn.NewModel(s.Model); err != nil {
		return Errorf("model", "%v", err)
	}
	if err := s.validateTokenizer(); err != nil {
		return err
	}
	return s.validateTraining()
}

// InputFromData is the model input an example of shape gives: [c,h,w] as
// it is, [h,w] as [1,h,w], [n] as [1,1,n].
func InputFromData(shape []int) []int {
	switch len(shape) {
	case 1:
		return []int{1, 1, shape[0]}
	case 2:
		return []int{1, shape[0], shape[1]}
	}
	return append([]int(nil), shape...)
}

// validateTraining checks every key but the data set and the model.
func (s Spec) validateTraining() error {
	if err := s.OuterOptimizer.Validate(); err != nil {
		// nn names the field "optimizer.x"; the key is outer_optimizer.
		return &Error{Problem: "outer_" + err.Error()}
	}
	if err := s.validateMode(); err != nil {
		return err
	}
	switch {
	case s.BatchSize < 1 || s.BatchSize > 4096:
		return Errorf("batch_size", "must be in 1..4096, got %d", s.BatchSize)
	case s.LocalSteps < 1 || s.LocalSteps > 1000:
		return Errorf("local_steps", "must be in 1..1000, got %d", s.LocalSteps)
	case s.MaxStaleness < 0:
		return Errorf("max_staleness", "must be >= 0, got %d", s.MaxStaleness)
	case s.MaxStaleness > MaxMaxStaleness:
		return Errorf("max_staleness", "must be at most %d versions, got %d: lower it (8 is the async default; a result that stale is noise)", MaxMaxStaleness, s.MaxStaleness)
	case s.StalenessLR != StalenessLRNone && s.StalenessLR != StalenessLRInverse:
		return Errorf("staleness_lr", "%q is not a rule (want none or inverse)", s.StalenessLR)
	case s.ShardSize < 1 || s.ShardSize > 100000:
		return Errorf("shard_size", "must be in 1..100000, got %d", s.ShardSize)
	case s.BatchSize*s.TaskSteps() > s.ShardSize:
		return Errorf("batch_size", "batch_size*local_steps (%d) exceeds shard_size (%d): a task must fit in one shard", s.BatchSize*s.TaskSteps(), s.ShardSize)
	case !(s.TargetAccuracy >= 0 && s.TargetAccuracy <= 1):
		return Errorf("target_accuracy", "must be in [0, 1] (0: no accuracy target), got %v", s.TargetAccuracy)
	case !(s.TargetLoss >= 0) || math.IsInf(s.TargetLoss, 0):
		return Errorf("target_loss", "must be a finite number of nats >= 0 (0: no loss target), got %v", s.TargetLoss)
	case s.TargetLoss > MaxTargetLoss:
		return Errorf("target_loss", "must be at most %g nats, got %v: any model starts below it; give a loss the job should reach", float64(MaxTargetLoss), s.TargetLoss)
	case s.MaxEpochs < 1 || s.MaxEpochs > MaxMaxEpochs:
		return Errorf("max_epochs", "must be in 1..%d, got %d: give a target instead of a run that never ends", MaxMaxEpochs, s.MaxEpochs)
	case !(s.MaxUpdateNormRatio >= 0 && s.MaxUpdateNormRatio <= MaxNormRatio):
		return Errorf("max_update_norm_ratio", "must be a number in [0, %d] (0 turns the check off), got %v", MaxNormRatio, s.MaxUpdateNormRatio)
	case s.Robust.Engine().Check() != nil:
		return Errorf("robust", "%v", s.Robust.Engine().Check())
	case !(s.SpotCheck >= 0 && s.SpotCheck <= 1):
		return Errorf("spot_check", "must be a fraction in [0, 1] of the results checked (0 turns spot checks off), got %v", s.SpotCheck)
	case s.SpotCheckStrikes < 1 || s.SpotCheckStrikes > 1000:
		return Errorf("spot_check_strikes", "must be in 1..1000 (strikes that ban a volunteer), got %d", s.SpotCheckStrikes)
	case !(s.SpotCheckTolerance > 0 && s.SpotCheckTolerance < 1):
		return Errorf("spot_check_tolerance", "must be a relative difference in (0, 1), got %v", s.SpotCheckTolerance)
	case !slices.Contains([]string{CodecFP32, CodecFP16, CodecInt8, CodecTopK, CodecSparse}, s.UpdateCodec):
		return Errorf("update_codec", "%q is not a codec (want fp32, fp16, int8, topk or sparse)", s.UpdateCodec)
	case !(s.TopKFraction > 0 && s.TopKFraction <= 0.5):
		return Errorf("topk_fraction", "must be a fraction in (0, 0.5] of the entries a topk update sends, got %v", s.TopKFraction)
	case s.UpdateCodec == CodecTopK && s.SpotCheck > 0:
		return Errorf("spot_check", "must be 0 with update_codec topk: a topk update carries the worker's error-feedback residual, which a spot check's copy cannot reproduce; use int8 or fp16 where spot checks matter")
	case s.validateSparse() != nil:
		return s.validateSparse()
	case s.SnapshotCodec != CodecFP32 && s.SnapshotCodec != CodecFP16:
		return Errorf("snapshot_codec", "%q is not a snapshot codec (want fp32 or fp16)", s.SnapshotCodec)
	case !(s.MaxCommFraction > 0 && s.MaxCommFraction < 1):
		return Errorf("max_comm_fraction", "must be a fraction in (0, 1) of a worker's time spent communicating, got %v", s.MaxCommFraction)
	case s.CheckpointEvery < 1 || s.CheckpointEvery > MaxCheckpointEvery:
		return Errorf("checkpoint_every", "must be in 1..%d updates, got %d (the coordinator also checkpoints every --checkpoint-interval)", MaxCheckpointEvery, s.CheckpointEvery)
	case s.EvalEvery < 1 || s.EvalEvery > MaxEvalEvery:
		return Errorf("eval_every", "must be in 1..%d updates, got %d", MaxEvalEvery, s.EvalEvery)
	case s.LeaseTimeout.Duration < 100*time.Millisecond || s.LeaseTimeout.Duration > MaxLeaseTimeout:
		return Errorf("lease_timeout", "must be in 100ms..%v, got %v: a lease held longer keeps its task from everyone else", MaxLeaseTimeout, s.LeaseTimeout.Duration)
	case s.RelayWindow.Duration < 0 || s.RelayWindow.Duration > 0 && s.RelayWindow.Duration < 10*time.Millisecond || s.RelayWindow.Duration > MaxRelayWindow:
		return Errorf("relay_window", "must be 0 (the default: each result forwarded) or in 10ms..%v, got %v", MaxRelayWindow, s.RelayWindow.Duration)
	case !(s.Weight >= 0 && s.Weight <= MaxWeight):
		return Errorf("weight", "must be a number above 0 and at most %g (left out: 1), got %v: a job's share of the grid is its weight over the running jobs' sum", float64(MaxWeight), s.Weight)
	case s.Priority < -MaxPriority || s.Priority > MaxPriority:
		return Errorf("priority", "must be a whole number in -%d..%d, got %d", MaxPriority, MaxPriority, s.Priority)
	}
	return nil
}

// validateSparse checks sparse_k and sparse_chunk: set with update_codec
// sparse only, and within the codec's bounds. Every mode takes sparse, as
// every mode takes topk: DiLoCo's pseudo-gradients are what SparseLoCo
// compresses, and the asynchronous and sync modes' gradients go the same
// way, their error feedback kept on the worker. Spot checks cannot judge
// it (the residual), so it refuses spot_check > 0.
func (s Spec) validateSparse() error {
	if s.UpdateCodec != CodecSparse {
		switch {
		case s.SparseK != 0:
			return Errorf("sparse_k", "applies to update_codec sparse only, not %s: remove it, or set update_codec: sparse", s.UpdateCodec)
		case s.SparseChunk != 0:
			return Errorf("sparse_chunk", "applies to update_codec sparse only, not %s: remove it, or set update_codec: sparse", s.UpdateCodec)
		}
		return nil
	}
	switch {
	case !(s.SparseK > 0 && s.SparseK <= MaxSparseK):
		return Errorf("sparse_k", "must be a fraction in (0, %g] of each chunk's entries a sparse update sends (0.01 sends 1%%), got %v", float64(MaxSparseK), s.SparseK)
	case s.SparseChunk < MinSparseChunk || s.SparseChunk > MaxSparseChunk:
		return Errorf("sparse_chunk", "must be in %d..%d values (the offsets in a chunk fit 16 bits), got %d", MinSparseChunk, MaxSparseChunk, s.SparseChunk)
	case s.SpotCheck > 0:
		return Errorf("spot_check", "must be 0 with update_codec sparse: a sparse update carries the worker's error-feedback residual, which a spot check's copy cannot reproduce; use int8 or fp16 where spot checks matter")
	}
	return nil
}

// validateMode checks the keys of the modes and the inner optimizer.
func (s Spec) validateMode() error {
	if !slices.Contains(Modes, s.Mode) {
		return Errorf("mode", "%q is not a mode (want %s)", s.Mode, strings.Join(Modes, ", "))
	}
	in := s.InnerOptimizer
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case in.Type != InnerSGD && in.Type != InnerAdamW:
		return Errorf("inner_optimizer.type", "%q is not an inner optimizer (want sgd or adamw)", in.Type)
	case !(in.LR > 0) || !finite(in.LR):
		return Errorf("inner_optimizer.lr", "must be a finite number > 0, got %v", in.LR)
	case !(in.WeightDecay >= 0) || !finite(in.WeightDecay):
		return Errorf("inner_optimizer.weight_decay", "must be a finite number >= 0, got %v", in.WeightDecay)
	case !(in.ClipNorm >= 0) || !finite(in.ClipNorm):
		return Errorf("inner_optimizer.clip_norm", "must be a finite number >= 0 (0 turns clipping off), got %v", in.ClipNorm)
	case in.Type == InnerSGD && (in.WeightDecay != 0 || in.Beta1 != 0 || in.Beta2 != 0 || in.Epsilon != 0):
		return Errorf("inner_optimizer", "weight_decay, beta1, beta2 and epsilon are adamw settings; sgd takes only lr")
	case in.Type == InnerAdamW && !(in.Beta1 >= 0 && in.Beta1 < 1):
		return Errorf("inner_optimizer.beta1", "must be in [0, 1), got %v", in.Beta1)
	case in.Type == InnerAdamW && !(in.Beta2 >= 0 && in.Beta2 < 1):
		return Errorf("inner_optimizer.beta2", "must be in [0, 1), got %v", in.Beta2)
	case in.Type == InnerAdamW && (!(in.Epsilon > 0) || !finite(in.Epsilon)):
		return Errorf("inner_optimizer.epsilon", "must be a finite number > 0, got %v", in.Epsilon)
	case s.RoundSize < 1 || s.RoundSize > 1024:
		return Errorf("round_size", "must be in 1..1024, got %d", s.RoundSize)
	case s.BackupWorkers < 0 || s.BackupWorkers > 1024:
		return Errorf("backup_workers", "must be in 0..1024, got %d", s.BackupWorkers)
	case s.Rounds() && (s.RoundTimeout.Duration < 100*time.Millisecond || s.RoundTimeout.Duration > MaxRoundTimeout):
		return Errorf("round_timeout", "must be in 100ms..%v, got %v: a round waits that long for its last result", MaxRoundTimeout, s.RoundTimeout.Duration)
	case s.AsyncDiLoCo && s.Mode != ModeDiLoCo:
		return Errorf("async_diloco", "applies to mode diloco, not %s", s.Mode)
	case s.Snapshot != SnapshotLatest && s.Snapshot != SnapshotGranted:
		return Errorf("snapshot", "%q is not a policy (want latest or granted)", s.Snapshot)
	case s.Snapshot == SnapshotLatest && s.Rounds():
		return Errorf("snapshot", "latest applies to the asynchronous modes; a round's tasks all compute from the version the round started at")
	case s.DynamicLocalSteps && s.Mode == ModeSync:
		return Errorf("dynamic_local_steps", "applies to async and diloco, not sync (a sync round's results must weigh alike)")
	case s.MinLocalSteps < 1:
		return Errorf("min_local_steps", "must be >= 1, got %d", s.MinLocalSteps)
	case s.MaxLocalSteps < s.MinLocalSteps || s.MaxLocalSteps > 1000:
		return Errorf("max_local_steps", "must be in min_local_steps (%d)..1000, got %d", s.MinLocalSteps, s.MaxLocalSteps)
	case s.DynamicLocalSteps && (s.LocalSteps < s.MinLocalSteps || s.LocalSteps > s.MaxLocalSteps):
		return Errorf("local_steps", "with dynamic_local_steps it is the first task's H and must be in min_local_steps..max_local_steps (%d..%d), got %d",
			s.MinLocalSteps, s.MaxLocalSteps, s.LocalSteps)
	case s.Mode == ModeDiLoCo && s.AsyncDiLoCo && !(s.OuterOptimizer.Type == nn.OptMomentum && s.OuterOptimizer.Nesterov):
		return Errorf("outer_optimizer", "async_diloco steps with Delayed Nesterov: want type momentum with nesterov: true, got %s", s.OuterOptimizer.Type)
	}
	return nil
}
