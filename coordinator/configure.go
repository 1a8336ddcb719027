package coordinator

import (
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
)

// asyncWarmupTimeout is the longest an asynchronous job holds its first
// results for the robust clip's warm-up, waiting for more workers.
const asyncWarmupTimeout = 10 * time.Second

// configure sets the job's engine to spec: the scheduler's policy, the
// aggregator and the outer optimizer. On a running job (an operator's
// change) it keeps what the change leaves alone: the optimizer's state
// when only its rate moved, the aggregator when the rule is the same. A
// new rule first closes any partial round with what it has, and every
// lease out goes back to the queue, since its task was cut for the old
// rule (its result would be refused as unknown_lease).
func (j *Job) configure(spec jobspec.Spec) error {
	st := &j.st
	defer func() { j.place.Store(j.placeInfo(st.spec)) }() // route.go
	old := st.spec
	fresh := st.agg == nil
	n := j.model.NumParams

	if fresh || outerChanged(old, spec) {
		opt, err := outerOptimizer(spec, n)
		if err != nil {
			return &jobspec.Error{Key: "outer_optimizer", Problem: err.Error()}
		}
		st.model.Opt, st.model.OptLR, st.model.LRScale = opt, spec.OuterOptimizer.LR, 1
	} else {
		st.model.LRScale = float32(spec.OuterOptimizer.LR / st.model.OptLR)
	}

	ruleChanged := fresh || ruleChanged(old, spec)
	if !fresh && ruleChanged {
		if r, ok := st.agg.(*engine.Rounds); ok {
			if s, ok := r.Flush(); ok {
				st.model.Apply(s)
			}
		}
		j.unleased(st.sched.ReleaseAll())
	}
	switch {
	case spec.Rounds() && ruleChanged:
		st.agg = engine.NewRounds(spec.RoundSize, spec.BackupWorkers, spec.RoundTimeout.Duration, n)
	case spec.Rounds():
		r := st.agg.(*engine.Rounds)
		r.Timeout = spec.RoundTimeout.Duration
	case ruleChanged:
		st.agg = &engine.Async{}
	}
	if a, ok := st.agg.(*engine.Async); ok {
		a.MaxStaleness, a.InverseStaleness = spec.MaxStaleness, spec.StalenessLR == jobspec.StalenessLRInverse
		// One result at a time: every robust method but none clips it
		// around the robust running centre.
		switch {
		case spec.Robust.Method == engine.RobustNone:
			a.Clip = nil
		case a.Clip == nil:
			a.Clip = engine.NewClipper(n, spec.Robust.Tau, asyncWarmupTimeout)
		default:
			a.Clip.Tau = spec.Robust.Tau
		}
		if a.Clip != nil {
			a.Validate = j.validate
		}
		if a.Clip != nil && spec.AsyncDiLoCo {
			// Delayed Nesterov keeps its own momentum of the deltas.
			a.Clip.Momentum = 0
		}
	}
	if r, ok := st.agg.(*engine.Rounds); ok {
		r.Robust = spec.Robust.Engine()
		r.Validate = j.validate
		// DiLoCo's rounds are few and far between, and the pairwise
		// comparison costs the square of their size in passes over the
		// model: sync rounds, many a second, do without it.
		r.Collusion = spec.Mode == jobspec.ModeDiLoCo
		// And a DiLoCo round scores each result on the held-out batch:
		// one forward pass of it a result, a round.
		r.Descent = nil
		if r.Collusion && j.validator != nil && spec.Robust.Method != engine.RobustNone {
			r.Descent = j.descent
		}
	}

	sc := &st.sched
	sc.LeaseTimeout = spec.LeaseTimeout.Duration
	sc.BatchSize = spec.BatchSize
	sc.Latest = spec.Snapshot == jobspec.SnapshotLatest
	sc.LocalSteps, sc.MinLocalSteps, sc.MaxLocalSteps, sc.Dynamic = spec.LocalSteps, spec.MinLocalSteps, spec.MaxLocalSteps, spec.DynamicLocalSteps
	sc.MaxCommFraction = spec.MaxCommFraction // live: the next lease's H follows it
	st.spec = spec
	if !fresh && old.TaskSteps() != spec.TaskSteps() {
		// The queue was cut for the old H: cut it again.
		sc.SetQueue(carve(sc.Queue(), spec.BatchSize*spec.TaskSteps()))
	}
	return nil
}

// outerOptimizer builds the optimizer spec's mode steps with.
func outerOptimizer(spec jobspec.Spec, n int) (nn.Optimizer, error) {
	if spec.Mode == jobspec.ModeDiLoCo && spec.AsyncDiLoCo {
		o := spec.OuterOptimizer
		return nn.NewDelayedNesterov(o.LR, o.Momentum, spec.RoundSize, n)
	}
	return nn.NewOptimizer(spec.OuterOptimizer, n)
}

// outerChanged reports whether the outer optimizer must be built anew
// (its state starts fresh): anything but its rate changed.
func outerChanged(a, b jobspec.Spec) bool {
	oa, ob := a.OuterOptimizer, b.OuterOptimizer
	oa.LR, ob.LR = 0, 0
	delayed := func(s jobspec.Spec) bool { return s.Mode == jobspec.ModeDiLoCo && s.AsyncDiLoCo }
	return oa != ob || delayed(a) != delayed(b) || (delayed(b) && a.RoundSize != b.RoundSize)
}

// ruleChanged reports whether results of leases granted under a would
// mean something else under b.
func ruleChanged(a, b jobspec.Spec) bool {
	return a.Mode != b.Mode || a.AsyncDiLoCo != b.AsyncDiLoCo || a.InnerOptimizer != b.InnerOptimizer ||
		a.RoundSize != b.RoundSize || a.BackupWorkers != b.BackupWorkers || a.Snapshot != b.Snapshot ||
		a.LocalSteps != b.LocalSteps || a.DynamicLocalSteps != b.DynamicLocalSteps
}
