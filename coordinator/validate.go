package coordinator

import (
	"fmt"
	"math"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
)

// Validation examples: the fixed batch of the training set the
// coordinator scores flagged updates on (engine.Zeno). A text model's
// examples are whole windows, each many label positions (charlm's 2
// windows are 256 positions, as many as mnist's 256 images), and a
// transformer's forward pass is dear: it takes few.
const (
	validationExamples     = 256
	validationTextExamples = 2
)

// validator is a job's held-out batch and the Zeno check over it.
type validator struct {
	zeno engine.Zeno
	x    []float32
	y    []int32
	n    int
	ws   *nn.Workspace
	// model and train: fits scores a task's own examples.
	model *nn.Model
	train *dataset.Set
	// positions is the label positions the batch holds: the loss is their
	// mean.
	positions float64
	// observer scores the sample of accepted updates for the noise
	// floor off the job's loop (observeValidation).
	observer *observer
}

// observer scores accepted updates for the validation's noise floor on
// its own goroutine, with its own workspace: two forward passes of the
// batch each, which on the loop held every result behind them (a sixth
// of the loop's time at mnist-mlp's ingest rate). It takes one update at
// a time; the loop skips a sample while one is being scored (the floor
// is a sample anyway), and records each score on the loop.
type observer struct {
	zeno      engine.Zeno // its own: Score keeps a trial vector and a cached loss
	params, u []float32
	version   int64
	busy      bool // on the loop: an update is being scored
	work      chan struct{}
}

// newObserver returns v's observer, whose goroutine runs until done.
func (v *validator) newObserver(done <-chan struct{}, post func(func())) *observer {
	ws := v.model.NewWorkspace(min(v.n, 64))
	o := &observer{work: make(chan struct{}, 1)}
	o.zeno = engine.Zeno{Rho: v.zeno.Rho, Margin: v.zeno.Margin, Loss: func(params []float32) float64 {
		l, _ := v.model.Evaluate(ws, params, v.x, v.y)
		return l / v.positions
	}}
	go func() {
		for {
			select {
			case <-done:
				return
			case <-o.work:
			}
			score, before, _ := o.zeno.Score(o.version, o.params, o.u)
			post(func() {
				o.busy = false
				v.zeno.Record(score, before)
			})
		}
	}()
	return o
}

// newValidator takes an evenly spread fixed batch of train: the same
// examples every time, so that two scores differ only by the update.
func newValidator(m *nn.Model, train *dataset.Set, text bool) *validator {
	n := validationExamples
	if text {
		n = validationTextExamples
	}
	n = min(n, train.N)
	if n < 1 {
		return nil
	}
	idx := train.Spread(n)
	es, lpe := train.ExampleSize(), train.LabelsPerExample()
	v := &validator{x: make([]float32, len(idx)*es), y: make([]int32, len(idx)*lpe), n: len(idx), model: m, train: train}
	for k, i := range idx {
		train.FillExample(v.x[k*es:(k+1)*es], v.y[k*lpe:(k+1)*lpe], i)
	}
	v.positions = float64(len(idx) * lpe)
	v.ws = m.NewWorkspace(min(len(idx), 64))
	v.zeno = engine.Zeno{Rho: engine.DefaultZenoRho, Margin: engine.DefaultZenoMargin, Loss: func(params []float32) float64 {
		l, _ := m.Evaluate(v.ws, params, v.x, v.y)
		return l / v.positions
	}}
	return v
}

// zenoGamma is the step an update is tried at: the inner rate for a
// gradient (w − γ·u is where the worker's SGD step took the model), and
// 1/H for a delta of H inner steps (one step's worth of it: the whole
// delta lands on the worker's local model, which after many steps on its
// own shard may score worse on other data though it is honest; the
// direction is what tells a hostile delta).
func zenoGamma(spec *jobspec.Spec) float64 {
	if spec.UpdateKind() == jobspec.UpdateDelta {
		return 1 / float64(max(1, spec.TaskSteps()))
	}
	return float64(innerOptimizer(spec).LR)
}

// validate scores u against the model as it is now: "" to apply it, or
// why it is refused. It runs on the loop.
func (j *Job) validate(u []float32) string {
	v := j.validator
	if v == nil {
		return ""
	}
	v.zeno.Gamma = zenoGamma(&j.st.spec)
	d := v.zeno.Check(j.st.model.Version, j.st.model.Params, u)
	if d != "" && j.verbose {
		j.log.Warn(fmt.Sprintf("job %s: quarantined an update: %s", j.ID, d))
	}
	return d
}

// fitLoss is the mean loss under which params fit examples exactly: the
// softmax is one-hot to float32 precision, and every gradient is zero.
const fitLoss = 1e-7

// fits reports whether params fit the training examples idx exactly,
// the one case where an honest gradient is all zeros.
func (v *validator) fits(params []float32, idx []int) bool {
	es, lpe := v.train.ExampleSize(), v.train.LabelsPerExample()
	x, y := make([]float32, len(idx)*es), make([]int32, len(idx)*lpe)
	for k, i := range idx {
		v.train.FillExample(x[k*es:(k+1)*es], y[k*lpe:(k+1)*lpe], i)
	}
	loss, _ := v.model.Evaluate(v.ws, params, x, y)
	return loss/float64(len(idx)*lpe) < fitLoss
}

// observeValidation scores a sample of the accepted updates (one in
// engine.Zeno.SampleEvery) for the validation's noise floor
// (engine.Zeno.Floor), where the job validates at all (a robust method).
// It runs on the loop, before the update is applied; the scoring runs
// on the validator's observer.
func (j *Job) observeValidation(u []float32) {
	v := j.validator
	if v == nil || j.st.spec.Robust.Method == engine.RobustNone {
		return
	}
	if j.st.validationSeen++; j.st.validationSeen%v.zeno.SampleEvery() != 0 {
		return
	}
	if !v.observe(j.stopped, j.post, zenoGamma(&j.st.spec), j.st.model.Version, j.st.model.Params, u) {
		j.st.validationSeen-- // the next accepted update takes its place
	}
}

// observe hands u, an update accepted at params (the model at version),
// to the observer to score at step gamma, copying both; false if it is
// still scoring the last one. The observer starts on first use and stops
// with done; post runs its findings on the caller's loop.
func (v *validator) observe(done <-chan struct{}, post func(func()), gamma float64, version int64, params, u []float32) bool {
	if v.observer == nil {
		v.observer = v.newObserver(done, post)
	}
	o := v.observer
	if o.busy {
		return false
	}
	o.busy = true
	o.zeno.Gamma = gamma
	o.version = version
	o.params = append(o.params[:0], params...)
	o.u = append(o.u[:0], u...)
	o.work <- struct{}{}
	return true
}

// descent is u's descent score at the model as it is now, relative to
// the held-out batch's loss: above 0 where u's step descends.
func (j *Job) descent(u []float32) float64 {
	v := j.validator
	v.zeno.Gamma = zenoGamma(&j.st.spec)
	s, before, _ := v.zeno.Score(j.st.model.Version, j.st.model.Params, u)
	if before == 0 {
		return 0
	}
	return s / math.Abs(before)
}
