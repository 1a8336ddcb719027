package nn

import "fmt"

// Workspace holds every buffer needed for batches of up to maxBatch examples.
// Not safe for concurrent use; one per goroutine.
type Workspace struct {
	m        *Model
	maxBatch int
	// acts[i] is layer i's input and acts[i+1] its output. acts[0] aliases
	// the caller's x during a call; a flatten layer's output aliases its input.
	acts [][]float32
	// dacts[i] is the loss gradient with respect to acts[i]. Only allocated
	// where someone reads it; a flatten layer's input gradient aliases its
	// output gradient.
	dacts  [][]float32
	cols   [][]float32  // conv2d: the batch's patch matrices, kept for backward
	patch  []float32    // conv2d backward: one example's patch gradient
	argmax [][]int32    // maxpool2d: winning input index per output
	wT     []float32    // dense forward: a transposed weight matrix
	gemm   *gemmScratch // packed GEMM operands
	// allDIn makes backward compute every input gradient, down to dacts[0]
	// (used by tests to check input gradients).
	allDIn bool
}

// NewWorkspace allocates the buffers for batches of up to maxBatch examples.
func (m *Model) NewWorkspace(maxBatch int) *Workspace {
	return m.newWorkspace(maxBatch, false)
}

func (m *Model) newWorkspace(maxBatch int, allDIn bool) *Workspace {
	if maxBatch < 1 {
		panic(fmt.Sprintf("nn: NewWorkspace: maxBatch must be >= 1, got %d", maxBatch))
	}
	L := len(m.layers)
	ws := &Workspace{
		m:        m,
		maxBatch: maxBatch,
		acts:     make([][]float32, L+1),
		dacts:    make([][]float32, L+1),
		cols:     make([][]float32, L),
		argmax:   make([][]int32, L),
		allDIn:   allDIn,
	}
	patch, wT := 0, 0
	for i := range m.layers {
		l := &m.layers[i]
		// A flatten output aliases its input; a fused relu writes straight
		// into the next buffer.
		if l.kind != kindFlatten && !l.fusedReLU {
			ws.acts[i+1] = make([]float32, maxBatch*l.outSize)
		}
		switch l.kind {
		case kindConv:
			if !l.convDirect() {
				ws.cols[i] = make([]float32, maxBatch*l.colRows*l.colCols)
				if l.needDIn || allDIn {
					patch = max(patch, l.colRows*l.colCols)
				}
			}
		case kindPool:
			ws.argmax[i] = make([]int32, maxBatch*l.outSize)
		case kindDense:
			wT = max(wT, l.wLen)
		}
	}
	ws.wT = make([]float32, wT)
	ws.gemm = newGemmScratch()
	ws.patch = make([]float32, patch)
	// Walk backwards so a flatten layer can alias the buffer above it.
	for j := L; j >= 0; j-- {
		needed := j == L || allDIn || m.layers[j].needDIn
		switch {
		case !needed:
		case j < L && m.layers[j].kind == kindFlatten && j > 0:
			ws.dacts[j] = ws.dacts[j+1]
		case j == L:
			ws.dacts[j] = make([]float32, maxBatch*m.NumClasses)
		default:
			ws.dacts[j] = make([]float32, maxBatch*m.layers[j].inSize)
		}
	}
	return ws
}

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

func badLabel(e int, lab int32, classes int) string {
	return fmt.Sprintf("nn: label %d of example %d is outside [0, %d); check the data with Model.CheckLabels", lab, e, classes)
}

// CheckLabels returns an error for the first label outside [0, NumClasses).
// Gradient and Evaluate panic on such labels, so callers that take labels
// from untrusted data should check them once up front.
func (m *Model) CheckLabels(labels []int32) error {
	for i, lab := range labels {
		if lab < 0 || int(lab) >= m.NumClasses {
			return fmt.Errorf("label %d of example %d is outside [0, %d): the data has more classes than the model's last layer outputs", lab, i, m.NumClasses)
		}
	}
	return nil
}

// forward runs all layers on n examples and returns the logits (n×NumClasses,
// owned by ws).
func (m *Model) forward(ws *Workspace, params, x []float32, n int) []float32 {
	ws.gemm.k = active.Load() // this step's kernel, for backward too
	ws.acts[0] = x[:n*m.InputSize]
	for i := 0; i < len(m.layers); i++ {
		l := &m.layers[i]
		in := ws.acts[i][:n*l.inSize]
		if l.kind == kindFlatten {
			ws.acts[i+1] = in
			continue
		}
		if l.fusedReLU {
			// Write the relu's output directly and skip the relu layer.
			out := ws.acts[i+2][:n*l.outSize]
			if l.kind == kindDense {
				denseForward(ws.gemm, l, params, in, out, ws.wT, n)
				reluForward(out, out)
			} else {
				convForward(ws.gemm, l, params, in, out, ws.cols[i], n)
			}
			i++
			continue
		}
		out := ws.acts[i+1][:n*l.outSize]
		switch l.kind {
		case kindDense:
			denseForward(ws.gemm, l, params, in, out, ws.wT, n)
		case kindReLU:
			reluForward(in, out)
		case kindConv:
			convForward(ws.gemm, l, params, in, out, ws.cols[i], n)
		case kindPool:
			poolForward(l, in, out, ws.argmax[i][:n*l.outSize], n)
		}
	}
	return ws.acts[len(m.layers)][:n*m.NumClasses]
}

// backward propagates ws.dacts[L] (already holding the loss gradient of the
// logits) down the layers, writing every parameter gradient into grad.
func (m *Model) backward(ws *Workspace, params, grad []float32, n int) {
	for i := len(m.layers) - 1; i >= 0; i-- {
		if ws.dacts[i+1] == nil {
			break // no parameters and no wanted input gradient below here
		}
		l := &m.layers[i]
		dOut := ws.dacts[i+1][:n*l.outSize]
		var dIn []float32
		if l.needDIn || ws.allDIn {
			dIn = ws.dacts[i][:n*l.inSize]
		}
		switch l.kind {
		case kindDense:
			denseBackward(ws.gemm, l, params, ws.acts[i][:n*l.inSize], dOut, dIn, grad, n)
		case kindConv:
			convBackward(ws.gemm, l, params, ws.acts[i][:n*l.inSize], ws.cols[i], dOut, dIn, ws.patch, grad, n)
		case kindReLU:
			if dIn != nil {
				reluBackward(ws.acts[i+1][:n*l.outSize], dOut, dIn)
			}
		case kindPool:
			if dIn != nil {
				poolBackward(l, dOut, dIn, ws.argmax[i][:n*l.outSize], n)
			}
		case kindFlatten:
			if dIn != nil && &dIn[0] != &dOut[0] {
				copy(dIn, dOut)
			}
		}
	}
}

// Gradient runs forward and backward on n = len(labels) examples (x holds
// n*InputSize floats, row-major per example, channel-major CHW) and
// OVERWRITES grad (len NumParams) with the gradient of the MEAN softmax
// cross-entropy loss over the batch. It returns the SUM of per-example losses
// and how many predictions were correct. n must be 1..maxBatch. Allocates
// nothing. Panics on a label outside [0, NumClasses).
func (m *Model) Gradient(ws *Workspace, params, x []float32, labels []int32, grad []float32) (lossSum float64, correct int) {
	n := len(labels)
	m.checkCall("Gradient", ws, params, x, n)
	if n < 1 || n > ws.maxBatch {
		panic(fmt.Sprintf("nn: Gradient: batch of %d examples, want 1..%d (the workspace's maxBatch)", n, ws.maxBatch))
	}
	if len(grad) != m.NumParams {
		panic(fmt.Sprintf("nn: Gradient: len(grad) = %d, want NumParams = %d", len(grad), m.NumParams))
	}
	logits := m.forward(ws, params, x, n)
	lossSum, correct = softmaxCE(logits, labels, m.NumClasses, ws.dacts[len(m.layers)][:n*m.NumClasses], 1/float32(n))
	m.backward(ws, params, grad, n)
	return lossSum, correct
}

// Evaluate runs the forward pass only over any number of examples (in chunks
// of the workspace's maxBatch) and returns the summed loss and the number
// correct. Allocates nothing. Panics on a label outside [0, NumClasses).
func (m *Model) Evaluate(ws *Workspace, params, x []float32, labels []int32) (lossSum float64, correct int) {
	total := len(labels)
	m.checkCall("Evaluate", ws, params, x, total)
	for off := 0; off < total; off += ws.maxBatch {
		n := min(ws.maxBatch, total-off)
		logits := m.forward(ws, params, x[off*m.InputSize:(off+n)*m.InputSize], n)
		l, c := softmaxCE(logits, labels[off:off+n], m.NumClasses, nil, 0)
		lossSum += l
		correct += c
	}
	return lossSum, correct
}

// Forward runs the forward pass on the len(x)/InputSize examples in x (at
// most the workspace's maxBatch) and returns their logits, n×NumClasses
// row-major. The returned slice belongs to ws and is overwritten by its next
// use. Allocates nothing.
func (m *Model) Forward(ws *Workspace, params, x []float32) []float32 {
	n := len(x) / m.InputSize
	m.checkCall("Forward", ws, params, x, n)
	if n < 1 || n > ws.maxBatch {
		panic(fmt.Sprintf("nn: Forward: batch of %d examples, want 1..%d (the workspace's maxBatch)", n, ws.maxBatch))
	}
	return m.forward(ws, params, x, n)
}
