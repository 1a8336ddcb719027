package worker

import "github.com/crowdtrain/crowdtrain/nn"

// Backend computes gradients for one worker. The loop calls Prepare once
// per job, then Gradient from a single goroutine.
type Backend interface {
	// Kind is the worker kind reported in hello: protocol.KindNative,
	// KindBrowser or KindGPU.
	Kind() string
	// Name identifies the implementation, e.g. "cpu-gonum".
	Name() string
	// Threads is how many threads it computes with.
	Threads() int
	// Prepare readies the backend for model with batches of up to maxBatch.
	Prepare(model *nn.Model, maxBatch int) error
	// Gradient overwrites grad with the gradient of the mean loss over the
	// batch (len(labels) examples of x) at params, and returns the summed
	// loss and the number of correct predictions.
	Gradient(params, x []float32, labels []int32, grad []float32) (lossSum float64, correct int, err error)
}
