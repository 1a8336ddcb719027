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

// SnapshotID identifies the parameters a Stepper is given: two calls with
// the same non-zero id carry the same parameters, so a backend that keeps
// them on a device may skip uploading them again. Zero means unknown.
type SnapshotID uint64

// Stepper is an optional extension of Backend for backends that keep the
// model in their own memory (a GPU): the loop hands it a whole lease at
// once, instead of calling Gradient per batch and stepping on the host.
type Stepper interface {
	// Steps runs up to steps inner SGD steps (learning rate lr) from
	// params, each on the next batchSize examples of x (len(labels)
	// examples), stopping early when the examples run out. It writes the
	// pseudo-gradient (params - w_after) / lr into update; when one step
	// runs, that is the gradient itself, written as computed. It returns
	// the loss summed over every example and the correct predictions.
	// batchSize is at most the Prepare'd maxBatch.
	Steps(id SnapshotID, params, x []float32, labels []int32, batchSize, steps int, lr float32, update []float32) (lossSum float64, correct int, err error)
}
