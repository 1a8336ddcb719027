package nn

import (
	"fmt"
	"strings"
)

// Workspace holds every buffer needed for batches of up to maxBatch examples.
// Not safe for concurrent use; one per goroutine.
type Workspace struct {
	m        *Model
	maxBatch int
	bytes    int64       // what its buffers take (Bytes)
	st       *stackState // the model's layers' activations, gradients and state
	// dLogits is the loss gradient of the logits.
	dLogits []float32
	ctx     runCtx
	// allDIn makes backward compute every input gradient, down to the
	// model's input (used by tests to check input gradients).
	allDIn bool
	// pinned is the kernel PinKernel fixed for this workspace (nil: the
	// process's kernel in use).
	pinned *kernel
}

// NewWorkspace allocates the buffers for batches of up to maxBatch examples.
func (m *Model) NewWorkspace(maxBatch int) *Workspace {
	return m.newWorkspace(maxBatch, false)
}

func (m *Model) newWorkspace(maxBatch int, allDIn bool) *Workspace {
	if maxBatch < 1 {
		panic(fmt.Sprintf("nn: NewWorkspace: maxBatch must be >= 1, got %d", maxBatch))
	}
	ws := &Workspace{m: m, maxBatch: maxBatch, allDIn: allDIn}
	b := &wsBuilder{allDIn: allDIn}
	ws.dLogits = b.floats(maxBatch * m.LabelsPerExample * m.NumClasses)
	ws.st = m.top.newState(b, maxBatch, ws.dLogits)
	b.allocShared()
	ws.ctx.gemm = newGemmScratch()
	ws.ctx.scratch = b.floats(b.scratch)
	ws.bytes = b.bytes + gemmScratchBytes
	return ws
}

// WorkspaceBytes returns the bytes NewWorkspace(maxBatch) allocates for
// its buffers (activations, their gradients, layer state and scratch),
// without allocating them: what a worker with a memory budget weighs
// before it chooses a micro-batch. It grows about linearly with
// maxBatch.
func (m *Model) WorkspaceBytes(maxBatch int) int64 {
	if maxBatch < 1 {
		panic(fmt.Sprintf("nn: WorkspaceBytes: maxBatch must be >= 1, got %d", maxBatch))
	}
	b := &wsBuilder{dry: true}
	b.floats(maxBatch * m.LabelsPerExample * m.NumClasses)
	m.top.newState(b, maxBatch, []float32{}) // non-nil: the top stack, as NewWorkspace's
	b.allocShared()
	b.floats(b.scratch)
	return b.bytes + gemmScratchBytes
}

// Bytes returns what the workspace's buffers take (WorkspaceBytes of its
// maxBatch).
func (ws *Workspace) Bytes() int64 { return ws.bytes }

// SetSeed sets the seed of the next Gradient call's dropout masks; each
// Gradient call then moves it on by one, so consecutive steps draw new
// masks. Two workspaces with the same seed draw the same masks.
func (ws *Workspace) SetSeed(seed uint64) { ws.ctx.seed = seed }

// PinKernel makes every later computation in ws run on the named GEMM
// kernel, whatever kernel the process uses (UseKernel): a computation
// that must give the same figures on every machine (the coordinator's
// recomputation of a disputed result) pins KernelGo, which every
// platform has.
func (ws *Workspace) PinKernel(name string) error {
	kernelsMu.Lock()
	k := findKernel(name)
	kernelsMu.Unlock()
	if k == nil {
		return fmt.Errorf("nn: no GEMM kernel %q here; available: %s", name, strings.Join(Kernels(), ", "))
	}
	ws.pinned = k
	return nil
}

// Seed returns the dropout seed the next Gradient call will use.
func (ws *Workspace) Seed() uint64 { return ws.ctx.seed }

// SetFirstExample says that the examples of the next Gradient calls are
// a part of a larger batch that starts with example first (0 by default):
// dropout numbers their values as in that batch (DropoutKeep's i), so a
// batch split into parts computed apart draws the same mask as the whole.
func (ws *Workspace) SetFirstExample(first int) {
	if first < 0 {
		panic(fmt.Sprintf("nn: SetFirstExample: first must be >= 0, got %d", first))
	}
	ws.ctx.first = first
}

// inputGrad returns the loss gradient with respect to the model's input of
// the last Gradient call (nil unless the workspace computes it).
func (ws *Workspace) inputGrad() []float32 { return ws.st.dacts[0] }

// MaxBatch returns the largest batch the workspace can hold.
func (ws *Workspace) MaxBatch() int { return ws.maxBatch }

func (m *Model) checkCall(fn string, ws *Workspace, params, x []float32, n int) {
	if ws == nil || ws.m != m {
		panic(fmt.Sprintf("nn: %s: workspace was not made by this model's NewWorkspace", fn))
	}
	if len(params) != m.NumParams {
		panic(fmt.Sprintf("nn: %s: len(params) = %d, want NumParams = %d", fn, len(params), m.NumParams))
	}
	if len(x) != n*m.InputSize {
		panic(fmt.Sprintf("nn: %s: len(x) = %d, want %d examples * InputSize %d = %d", fn, len(x), n, m.InputSize, n*m.InputSize))
	}
}

// examples returns how many examples labels covers.
func (m *Model) examples(fn string, labels []int32) int {
	if len(labels)%m.LabelsPerExample != 0 {
		panic(fmt.Sprintf("nn: %s: len(labels) = %d is not a multiple of LabelsPerExample %d", fn, len(labels), m.LabelsPerExample))
	}
	return len(labels) / m.LabelsPerExample
}

func badLabel(i int, lab int32, classes int) string {
	return fmt.Sprintf("nn: label %d at index %d is outside [0, %d); check the data with Model.CheckLabels", lab, i, classes)
}

// CheckLabels returns an error for the first label outside [0, NumClasses).
// Gradient and Evaluate panic on such labels, so callers that take labels
// from untrusted data should check them once up front.
func (m *Model) CheckLabels(labels []int32) error {
	for i, lab := range labels {
		if lab < 0 || int(lab) >= m.NumClasses {
			return fmt.Errorf("label %d of example %d is outside [0, %d): the data has more classes than the model's last layer outputs", lab, i/m.LabelsPerExample, m.NumClasses)
		}
	}
	return nil
}

// forward runs all layers on n examples and returns the logits
// (n×LabelsPerExample×NumClasses, owned by ws).
func (m *Model) forward(ws *Workspace, params, x []float32, n int, train bool) []float32 {
	ws.ctx.gemm.k = active.Load() // this step's kernel, for backward too
	if ws.pinned != nil {
		ws.ctx.gemm.k = ws.pinned
	}
	ws.ctx.train = train
	return m.top.forward(&ws.ctx, ws.st, params, x[:n*m.InputSize], n)
}

// backward propagates ws.dLogits (already holding the loss gradient of the
// logits) down the layers, writing every parameter gradient into grad.
func (m *Model) backward(ws *Workspace, params, grad []float32, n int) {
	for _, s := range m.clears {
		clear(grad[s.off : s.off+s.len])
	}
	m.top.backward(&ws.ctx, ws.st, params, grad, n)
}

// Gradient runs forward and backward on the n = len(labels)/LabelsPerExample
// examples of x (n*InputSize floats, row-major per example, channel-major
// CHW for images) and OVERWRITES grad (len NumParams) with the gradient of
// the MEAN softmax cross-entropy loss over every label position of the
// batch. It returns the SUM of the per-position losses and how many
// positions were predicted correctly. n must be 1..maxBatch. Dropout layers
// draw their masks from the workspace's seed (SetSeed), which then moves on
// by one. Allocates nothing. Panics on a label outside [0, NumClasses).
func (m *Model) Gradient(ws *Workspace, params, x []float32, labels []int32, grad []float32) (lossSum float64, correct int) {
	n := m.examples("Gradient", labels)
	m.checkCall("Gradient", ws, params, x, n)
	if n < 1 || n > ws.maxBatch {
		panic(fmt.Sprintf("nn: Gradient: batch of %d examples, want 1..%d (the workspace's maxBatch)", n, ws.maxBatch))
	}
	if len(grad) != m.NumParams {
		panic(fmt.Sprintf("nn: Gradient: len(grad) = %d, want NumParams = %d", len(grad), m.NumParams))
	}
	rows := n * m.LabelsPerExample
	logits := m.forward(ws, params, x, n, true)
	lossSum, correct = softmaxCE(logits, labels, m.NumClasses, ws.dLogits[:rows*m.NumClasses], 1/float32(rows))
	m.backward(ws, params, grad, n)
	ws.ctx.seed++
	return lossSum, correct
}

// Evaluate runs the forward pass only over any number of examples (in chunks
// of the workspace's maxBatch) and returns the summed loss over every label
// position and the number of positions predicted correctly. Dropout is off.
// Allocates nothing. Panics on a label outside [0, NumClasses).
func (m *Model) Evaluate(ws *Workspace, params, x []float32, labels []int32) (lossSum float64, correct int) {
	total := m.examples("Evaluate", labels)
	m.checkCall("Evaluate", ws, params, x, total)
	lpe := m.LabelsPerExample
	for off := 0; off < total; off += ws.maxBatch {
		n := min(ws.maxBatch, total-off)
		logits := m.forward(ws, params, x[off*m.InputSize:(off+n)*m.InputSize], n, false)
		l, c := softmaxCE(logits, labels[off*lpe:(off+n)*lpe], m.NumClasses, nil, 0)
		lossSum += l
		correct += c
	}
	return lossSum, correct
}

// Forward runs the forward pass on the len(x)/InputSize examples in x (at
// most the workspace's maxBatch) and returns their logits,
// n×LabelsPerExample×NumClasses row-major. Dropout is off. The returned
// slice belongs to ws and is overwritten by its next use. Allocates nothing.
func (m *Model) Forward(ws *Workspace, params, x []float32) []float32 {
	n := len(x) / m.InputSize
	m.checkCall("Forward", ws, params, x, n)
	if n < 1 || n > ws.maxBatch {
		panic(fmt.Sprintf("nn: Forward: batch of %d examples, want 1..%d (the workspace's maxBatch)", n, ws.maxBatch))
	}
	return m.forward(ws, params, x, n, false)
}
