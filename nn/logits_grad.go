package nn

import "fmt"

// LogitsLoss is a loss of a batch's logits: given them (n×LabelsPerExample
// ×NumClasses, row-major) it returns the loss and writes its gradient
// with respect to each logit into dLogits (same length, zeroed), which
// Model.GradientOfLogits propagates back to the parameters.
type LogitsLoss func(logits, dLogits []float32) float64

// GradientOfLogits is Gradient for a loss other than cross-entropy: it
// runs the forward pass on the n = len(x)/InputSize examples of x (1 to
// the workspace's maxBatch), lets loss compute the loss and its gradient
// of the logits, and OVERWRITES grad (len NumParams) with the gradient of
// that loss with respect to the parameters, through the same backward
// pass as Gradient. Dropout is off (as in Forward, so the logits are those
// a sampler saw) and the workspace's dropout seed does not move. It
// returns what loss returns and allocates nothing itself.
func (m *Model) GradientOfLogits(ws *Workspace, params, x, grad []float32, loss LogitsLoss) float64 {
	n := len(x) / m.InputSize
	m.checkCall("GradientOfLogits", ws, params, x, n)
	if n < 1 || n > ws.maxBatch {
		panic(fmt.Sprintf("nn: GradientOfLogits: batch of %d examples, want 1..%d (the workspace's maxBatch)", n, ws.maxBatch))
	}
	if len(grad) != m.NumParams {
		panic(fmt.Sprintf("nn: GradientOfLogits: len(grad) = %d, want NumParams = %d", len(grad), m.NumParams))
	}
	logits := m.forward(ws, params, x, n, false)
	dLogits := ws.dLogits[:len(logits)]
	clear(dLogits)
	l := loss(logits, dLogits)
	m.backward(ws, params, grad, n)
	return l
}
