package coordinator

import "github.com/crowdtrain/crowdtrain/jobspec"

// defaultSpec is the mnist-mlp preset with every default filled in, for
// tests that build a job by hand.
func defaultSpec() jobspec.Spec {
	s, ok := jobspec.Preset("mnist-mlp")
	if !ok {
		panic("the mnist-mlp preset does not validate")
	}
	return s
}
