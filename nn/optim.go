package nn

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas/blas32"
)

// OptimizerSpec configures an optimizer on flat vectors. It is also what job
// spec files contain under `optimizer:`. Zero values mean "use the default"
// (see WithDefaults).
type OptimizerSpec struct {
	Type     string  `json:"type" yaml:"type" msgpack:"type"` // "sgd", "momentum", "adam", "adamw"
	LR       float64 `json:"lr" yaml:"lr" msgpack:"lr"`
	Momentum float64 `json:"momentum,omitempty" yaml:"momentum,omitempty" msgpack:"momentum,omitempty"` // momentum: default 0.9
	Nesterov bool    `json:"nesterov,omitempty" yaml:"nesterov,omitempty" msgpack:"nesterov,omitempty"`
	Beta1    float64 `json:"beta1,omitempty" yaml:"beta1,omitempty" msgpack:"beta1,omitempty"`       // adam, adamw: default 0.9
	Beta2    float64 `json:"beta2,omitempty" yaml:"beta2,omitempty" msgpack:"beta2,omitempty"`       // adam, adamw: default 0.999
	Epsilon  float64 `json:"epsilon,omitempty" yaml:"epsilon,omitempty" msgpack:"epsilon,omitempty"` // adam, adamw: default 1e-8
	// WeightDecay is adamw's decoupled weight decay: every parameter
	// shrinks by lr*weight_decay*w per step, as torch.optim.AdamW. It is
	// taken as given (0 = none); a job spec fills in DefaultWeightDecay
	// when it leaves the key out.
	WeightDecay float64 `json:"weight_decay,omitempty" yaml:"weight_decay,omitempty" msgpack:"weight_decay,omitempty"`
	// ClipNorm (any type; 0 = off) scales the gradient by
	// min(1, clip_norm/(‖g‖₂+1e-6)) before the step, as
	// torch.nn.utils.clip_grad_norm_ over all parameters at once.
	ClipNorm float64 `json:"clip_norm,omitempty" yaml:"clip_norm,omitempty" msgpack:"clip_norm,omitempty"`
}

// Optimizer types accepted in OptimizerSpec.Type.
const (
	OptSGD      = "sgd"
	OptMomentum = "momentum"
	OptAdam     = "adam"
	OptAdamW    = "adamw"
)

// DefaultWeightDecay is adamw's weight decay when a job spec does not give
// one (PyTorch's default).
const DefaultWeightDecay = 0.01

// WithDefaults returns s with the zero-valued defaults filled in: momentum 0.9
// for "momentum"; beta1 0.9, beta2 0.999 and epsilon 1e-8 for "adam" and
// "adamw". Fields a type does not use are left alone; so is weight_decay,
// where 0 means none.
func (s OptimizerSpec) WithDefaults() OptimizerSpec {
	switch s.Type {
	case OptMomentum:
		if s.Momentum == 0 {
			s.Momentum = 0.9
		}
	case OptAdam, OptAdamW:
		if s.Beta1 == 0 {
			s.Beta1 = 0.9
		}
		if s.Beta2 == 0 {
			s.Beta2 = 0.999
		}
		if s.Epsilon == 0 {
			s.Epsilon = 1e-8
		}
	}
	return s
}

// Validate returns an error naming the first bad field, e.g.
// `optimizer.lr: must be a finite number > 0, got 0`. Zero-valued fields that
// have defaults are valid (they mean the default).
func (s OptimizerSpec) Validate() error {
	switch s.Type {
	case OptSGD, OptMomentum, OptAdam, OptAdamW:
	default:
		return fmt.Errorf("optimizer.type: unknown %q (want sgd, momentum, adam or adamw)", s.Type)
	}
	if !(s.LR > 0) || math.IsInf(s.LR, 0) {
		return fmt.Errorf("optimizer.lr: must be a finite number > 0, got %v", s.LR)
	}
	d := s.WithDefaults()
	unit := func(name string, v float64) error {
		if !(v >= 0 && v < 1) {
			return fmt.Errorf("optimizer.%s: must be in [0, 1), got %v", name, v)
		}
		return nil
	}
	if err := unit("momentum", d.Momentum); err != nil {
		return err
	}
	if err := unit("beta1", d.Beta1); err != nil {
		return err
	}
	if err := unit("beta2", d.Beta2); err != nil {
		return err
	}
	if (s.Type == OptAdam || s.Type == OptAdamW || d.Epsilon != 0) && (!(d.Epsilon > 0) || math.IsInf(d.Epsilon, 0)) {
		return fmt.Errorf("optimizer.epsilon: must be a finite number > 0, got %v", d.Epsilon)
	}
	if !(s.WeightDecay >= 0) || math.IsInf(s.WeightDecay, 0) {
		return fmt.Errorf("optimizer.weight_decay: must be a finite number >= 0, got %v", s.WeightDecay)
	}
	if s.WeightDecay != 0 && s.Type != OptAdamW {
		return fmt.Errorf("optimizer.weight_decay: applies to type adamw (decoupled weight decay), not %s", s.Type)
	}
	if !(s.ClipNorm >= 0) || math.IsInf(s.ClipNorm, 0) {
		return fmt.Errorf("optimizer.clip_norm: must be a finite number >= 0 (0 turns clipping off), got %v", s.ClipNorm)
	}
	return nil
}

// ClipScale is what a gradient g is multiplied by before a step with
// clip_norm c: min(1, c/(‖g‖₂+1e-6)), as torch.nn.utils.clip_grad_norm_
// computes it (the norm summed in float64 here). c = 0 means no clipping:
// 1. A g with a NaN or an infinity gives NaN or 0, so the step is not
// finite and the coordinator's divergence check sees it.
func ClipScale(g []float32, c float64) float32 {
	if c == 0 {
		return 1
	}
	var ss float64
	for _, v := range g {
		ss += float64(v) * float64(v)
	}
	coef := c / (math.Sqrt(ss) + 1e-6)
	if coef >= 1 {
		return 1
	}
	return float32(coef)
}

// Optimizer updates a flat parameter vector from a flat (pseudo-)gradient.
type Optimizer interface {
	// Step applies one update to params from the (pseudo-)gradient g, with the
	// learning rate multiplied by lrScale (the coordinator's staleness rule
	// passes 1/(1+s)). Allocates nothing.
	Step(params, g []float32, lrScale float32)
	// State returns the optimizer's internal vectors (none for sgd; velocity
	// for momentum; m and v for adam) and the step count, so a checkpoint can
	// save them. The vectors are the optimizer's own, not copies: serialize
	// them before the next Step. SetState copies vectors in (error on wrong
	// lengths or count).
	State() (vectors [][]float32, steps int64)
	SetState(vectors [][]float32, steps int64) error
}

// NewOptimizer applies defaults, validates spec and returns an optimizer for
// vectors of numParams values.
func NewOptimizer(spec OptimizerSpec, numParams int) (Optimizer, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if numParams < 0 {
		return nil, fmt.Errorf("optimizer: numParams must be >= 0, got %d", numParams)
	}
	spec = spec.WithDefaults()
	clip := spec.ClipNorm
	switch spec.Type {
	case OptSGD:
		return &sgd{lr: spec.LR, n: numParams, clip: clip}, nil
	case OptMomentum:
		return &momentum{lr: spec.LR, mu: float32(spec.Momentum), nesterov: spec.Nesterov, v: make([]float32, numParams), clip: clip}, nil
	default:
		name := "adam"
		if spec.Type == OptAdamW {
			name = "adamw"
		}
		return &adam{name: name, lr: spec.LR, b1: spec.Beta1, b2: spec.Beta2, eps: float32(spec.Epsilon), wd: float32(spec.WeightDecay),
			m: make([]float32, numParams), v: make([]float32, numParams), clip: clip}, nil
	}
}

// SGDStep does params -= lr*grad (the inner optimizer a worker uses when
// local_steps > 1).
func SGDStep(params, grad []float32, lr float32) {
	checkLens("SGDStep", len(params), len(grad))
	// blas32.Axpy has an SSE kernel on amd64.
	blas32.Axpy(-lr, blas32.Vector{N: len(grad), Inc: 1, Data: grad}, blas32.Vector{N: len(params), Inc: 1, Data: params})
}

func checkLens(fn string, np, ng int) {
	if np != ng {
		panic(fmt.Sprintf("nn: %s: len(params) = %d but len(grad) = %d", fn, np, ng))
	}
}

func setVectors(name string, dst [][]float32, src [][]float32, steps int64) error {
	if len(src) != len(dst) {
		return fmt.Errorf("%s optimizer state: got %d vectors, want %d", name, len(src), len(dst))
	}
	for i := range src {
		if len(src[i]) != len(dst[i]) {
			return fmt.Errorf("%s optimizer state: vector %d has %d values, want %d (one per model parameter)", name, i, len(src[i]), len(dst[i]))
		}
	}
	if steps < 0 {
		return fmt.Errorf("%s optimizer state: step count %d is negative", name, steps)
	}
	for i := range src {
		copy(dst[i], src[i])
	}
	return nil
}

type sgd struct {
	lr    float64
	n     int
	clip  float64
	steps int64
}

func (o *sgd) Step(params, g []float32, lrScale float32) {
	if len(params) != o.n {
		panic(fmt.Sprintf("nn: sgd.Step: len(params) = %d, want %d", len(params), o.n))
	}
	SGDStep(params, g, float32(o.lr)*lrScale*ClipScale(g, o.clip))
	o.steps++
}

func (o *sgd) State() ([][]float32, int64) { return nil, o.steps }

func (o *sgd) SetState(vectors [][]float32, steps int64) error {
	if err := setVectors("sgd", nil, vectors, steps); err != nil {
		return err
	}
	o.steps = steps
	return nil
}

// momentum is PyTorch's SGD with momentum: v = mu*v + g; params -= lr*v, or
// with Nesterov params -= lr*(g + mu*v).
type momentum struct {
	lr       float64
	mu       float32
	nesterov bool
	v        []float32
	clip     float64
	steps    int64
}

func (o *momentum) Step(params, g []float32, lrScale float32) {
	checkLens("momentum.Step", len(params), len(g))
	if len(params) != len(o.v) {
		panic(fmt.Sprintf("nn: momentum.Step: len(params) = %d, want %d", len(params), len(o.v)))
	}
	lr, mu := float32(o.lr)*lrScale, o.mu
	v := o.v[:len(params)]
	g = g[:len(params)]
	cs := ClipScale(g, o.clip)
	if cs != 1 {
		for i, gi := range g {
			gi *= cs
			vi := mu*v[i] + gi
			v[i] = vi
			if o.nesterov {
				params[i] -= lr * (gi + mu*vi)
			} else {
				params[i] -= lr * vi
			}
		}
	} else if o.nesterov {
		for i, gi := range g {
			vi := mu*v[i] + gi
			v[i] = vi
			params[i] -= lr * (gi + mu*vi)
		}
	} else {
		for i, gi := range g {
			vi := mu*v[i] + gi
			v[i] = vi
			params[i] -= lr * vi
		}
	}
	o.steps++
}

func (o *momentum) State() ([][]float32, int64) { return [][]float32{o.v}, o.steps }

func (o *momentum) SetState(vectors [][]float32, steps int64) error {
	if err := setVectors("momentum", [][]float32{o.v}, vectors, steps); err != nil {
		return err
	}
	o.steps = steps
	return nil
}

// adam is Adam with bias correction, and with wd > 0 AdamW (decoupled
// weight decay, torch.optim.AdamW: params *= 1 - lr*wd first):
// m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g²;
// params -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps).
type adam struct {
	name       string // "adam" or "adamw", for errors
	lr, b1, b2 float64
	eps, wd    float32
	m, v       []float32
	clip       float64
	steps      int64
}

func (o *adam) Step(params, g []float32, lrScale float32) {
	if len(params) != len(g) {
		panic(fmt.Sprintf("nn: %s.Step: len(params) = %d but len(grad) = %d", o.name, len(params), len(g)))
	}
	if len(params) != len(o.m) {
		panic(fmt.Sprintf("nn: %s.Step: len(params) = %d, want %d", o.name, len(params), len(o.m)))
	}
	o.steps++
	t := float64(o.steps)
	// Bias corrections in float64: b2^t is close to 1 for many steps.
	c1 := float32(1 / (1 - math.Pow(o.b1, t)))
	c2 := float32(1 / math.Sqrt(1-math.Pow(o.b2, t)))
	lr := float32(o.lr) * lrScale
	b1, b2 := float32(o.b1), float32(o.b2)
	a1, a2 := 1-b1, 1-b2
	eps := o.eps
	m, v := o.m[:len(params)], o.v[:len(params)]
	g = g[:len(params)]
	cs := ClipScale(g, o.clip)
	decay := lr * o.wd
	k := adamConsts{cs, b1, a1, b2, a2, decay, lr, c1, c2, eps}
	done := adamStepVector(params, g, m, v, &k)
	for i := done; i < len(g); i++ {
		gi := g[i] * cs
		mi := b1*m[i] + a1*gi
		vi := b2*v[i] + a2*gi*gi
		m[i], v[i] = mi, vi
		params[i] = params[i] - decay*params[i] - lr*(mi*c1)/(float32(math.Sqrt(float64(vi)))*c2+eps)
	}
}

// adamConsts are one Adam step's scalars, in the order optim_amd64.s
// reads them.
type adamConsts struct {
	cs, b1, a1, b2, a2, decay, lr, c1, c2, eps float32
}

func (o *adam) State() ([][]float32, int64) { return [][]float32{o.m, o.v}, o.steps }

func (o *adam) SetState(vectors [][]float32, steps int64) error {
	if err := setVectors(o.name, [][]float32{o.m, o.v}, vectors, steps); err != nil {
		return err
	}
	o.steps = steps
	return nil
}
