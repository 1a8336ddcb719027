package nn

import "fmt"

// DelayedNesterov is the outer optimizer of asynchronous DiLoCo (Liu et
// al. 2024, "Asynchronous Local-SGD Training for Language Modeling"):
// Nesterov momentum whose momentum is updated and applied once every N
// results, so that results arriving one at a time from workers at
// different speeds do not each compound the momentum.
//
// Each result g is applied at once without momentum, params -= lr*g/N,
// and summed into a buffer d. On every N-th result the momentum takes the
// buffer's mean, m = mu*m + d/N, and params -= lr*mu*m; d is cleared.
// Over N results that is one Nesterov step, lr*(ḡ + mu*m), on their mean ḡ.
type DelayedNesterov struct {
	lr    float64
	mu    float32
	n     int
	m     []float32 // momentum
	d     []float32 // sum of the results since the last momentum step
	steps int64
}

// NewDelayedNesterov returns Delayed Nesterov with rate lr, momentum mu
// and delay n (results per momentum step) for numParams values.
func NewDelayedNesterov(lr, mu float64, n, numParams int) (*DelayedNesterov, error) {
	switch {
	case !(lr > 0):
		return nil, fmt.Errorf("delayed nesterov: lr must be > 0, got %v", lr)
	case !(mu >= 0 && mu < 1):
		return nil, fmt.Errorf("delayed nesterov: momentum must be in [0, 1), got %v", mu)
	case n < 1:
		return nil, fmt.Errorf("delayed nesterov: delay must be >= 1, got %d", n)
	}
	return &DelayedNesterov{lr: lr, mu: float32(mu), n: n, m: make([]float32, numParams), d: make([]float32, numParams)}, nil
}

func (o *DelayedNesterov) Step(params, g []float32, lrScale float32) {
	checkLens("DelayedNesterov.Step", len(params), len(g))
	if len(params) != len(o.m) {
		panic(fmt.Sprintf("nn: DelayedNesterov.Step: len(params) = %d, want %d", len(params), len(o.m)))
	}
	lr, inv := float32(o.lr)*lrScale, 1/float32(o.n)
	d := o.d[:len(params)]
	for i, gi := range g[:len(params)] {
		params[i] -= lr * inv * gi
		d[i] += gi
	}
	o.steps++
	if o.steps%int64(o.n) != 0 {
		return
	}
	m, mu := o.m[:len(params)], o.mu
	for i := range m {
		mi := mu*m[i] + d[i]*inv
		m[i] = mi
		params[i] -= lr * mu * mi
		d[i] = 0
	}
}

// State is the momentum and the buffer, then the step count.
func (o *DelayedNesterov) State() ([][]float32, int64) { return [][]float32{o.m, o.d}, o.steps }

func (o *DelayedNesterov) SetState(vectors [][]float32, steps int64) error {
	if err := setVectors("delayed nesterov", [][]float32{o.m, o.d}, vectors, steps); err != nil {
		return err
	}
	o.steps = steps
	return nil
}
