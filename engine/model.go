package engine

import "github.com/crowdtrain/crowdtrain/nn"

// Model is the only state that steps: the flat parameters, the outer
// optimizer and the version (how many steps were applied).
type Model struct {
	Params  []float32
	Opt     nn.Optimizer
	Version int64
	// OptLR is the rate Opt was built with; LRScale turns it into the
	// rate an operator set since.
	OptLR   float64
	LRScale float32
}

// Apply takes one step (s.Repeat steps of the optimizer on the same
// update) and moves the version on by one.
func (m *Model) Apply(s Step) {
	for range max(1, s.Repeat) {
		m.Opt.Step(m.Params, s.Update, s.Scale*m.LRScale)
	}
	m.Version++
}
