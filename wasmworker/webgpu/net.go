package webgpu

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/nn"
)

// kernels records GPU work: what the layers need of a device. device
// implements it in the browser.
type kernels interface {
	// dispatch runs kernel name over x×y×z workgroups.
	dispatch(name string, x, y, z int, args ...any) error
	// launch runs an elementwise kernel over total elements.
	launch(name string, total int, args ...any) error
	// launchRows runs a kernel with one workgroup per row.
	launchRows(name string, rows int, args ...any) error
	// gemm: C = alpha·op(A)·op(B) + beta·C, row-major, strided-batched.
	gemm(transA, transB bool, m, n, k int, alpha float32, a ptr, lda, sa int, b ptr, ldb, sb int, beta float32, c ptr, ldc, sc, batch int) error
}

// net is a model's layout in the arena for batches of up to maxBatch: the
// parameters, every activation and the gradients, as gpuworker's net.
type net struct {
	model    *nn.Model
	maxBatch int
	top      *stack

	scratchT    ptr              // conv2d: the GEMM's (n*P)×F output and gradient
	scratchRows ptr              // conv2d: the patches' gradient
	attScratch  attentionScratch // attention's backward
	// clears are the gradient spans that backward adds into (an
	// embedding's token table, which a tied output layer writes first).
	clears [][2]int
	// seed is the dropout seed of the next gradient call, which moves it
	// on by one, as an nn.Workspace's.
	seed uint64

	base, w, grad    ptr // NumParams each
	moment1, moment2 ptr // inner AdamW's m and v
	x, labels        ptr // one batch: maxBatch examples and their labels
	rowLoss, rowHit  ptr // softmax_xent's loss and hit per row
	accLoss, accHit  ptr // their sums over a call's steps
	clipPartial      ptr // clipPartials partial sums of squares
	clipScale        ptr // one float: the clip's scale
	floats           int // the arena's size
}

// stack is a sequence of layers: the model's, or a residual block's body.
// acts[i] is layer i's input and acts[i+1] its output (acts[0] is set per
// call; a flatten layer's output aliases its input). dacts[i] is the loss
// gradient of acts[i], 0 where nobody reads it.
type stack struct {
	layers      []*layer
	acts, dacts []ptr
}

// layer is one layer's plan and what it keeps in the arena.
type layer struct {
	nn.LayerPlan
	name       string // as in its tensors' names: "3", or "1.residual.0"
	rows       ptr    // conv2d: the batch's patches, kept for backward
	argmax     ptr    // maxpool2d: the winners
	mean, rstd ptr    // layernorm: per row
	att        *attention
	body       *stack // residual
}

func hasParams(l nn.LayerPlan) bool {
	if len(l.Tensors) > 0 || l.WeightSize > 0 {
		return true
	}
	for _, b := range l.Body {
		if hasParams(b) {
			return true
		}
	}
	return false
}

// seqRows views a layer's input per example as rows: a sequence [t,d] is
// t rows of d, anything else one row of all its values.
func seqRows(l nn.LayerPlan) (rows, cols int) {
	if l.InKind == "sequence" {
		return l.InShape[0], l.InShape[1]
	}
	return 1, l.InSize
}

// gatherVocab is the largest vocabulary whose token table gradient is
// gathered per table entry (vocab*d threads, each reading every row);
// larger ones take one thread per column (embedding_backward_columns).
const gatherVocab = 1024

// clipPartials is grad_sumsq_partial's fixed number of workgroups, which
// fixes the order of the additions.
const clipPartials = 256

// guardFloats keeps offset 0 unallocated, so a 0 ptr means "none".
const guardFloats = 64

// builder lays a net out in the arena.
type builder struct {
	nt                       *net
	maxBatch                 int
	scratchT, scratchRows    int
	attCtx, attProbs, attQKV int
}

// alloc reserves floats, aligned to 64 floats (256 bytes).
func (bl *builder) alloc(floats int) ptr {
	p := ptr(bl.nt.floats)
	bl.nt.floats += (max(floats, 1) + 63) &^ 63
	return p
}

func (bl *builder) stack(plans []nn.LayerPlan, paramsBelow bool, prefix string) (*stack, error) {
	L, nb := len(plans), bl.maxBatch
	st := &stack{acts: make([]ptr, L+1), dacts: make([]ptr, L+1)}
	for i, p := range plans {
		l := &layer{LayerPlan: p, name: fmt.Sprintf("%s%d", prefix, i)}
		st.layers = append(st.layers, l)
		if paramsBelow && p.Type != nn.TypeFlatten && p.Type != nn.TypeEmbedding {
			st.dacts[i] = bl.alloc(nb * p.InSize)
		}
		below := paramsBelow
		paramsBelow = paramsBelow || hasParams(p)
		switch p.Type {
		case nn.TypeFlatten:
			continue // aliases, set per call
		case nn.TypeDense, nn.TypeReLU, nn.TypeGELU, nn.TypeDropout:
		case nn.TypeEmbedding:
			if p.InKind != "tokens" || p.Units < 1 || p.Vocab < 1 {
				return nil, fmt.Errorf("layer %s: an embedding on %s input %v", l.name, p.InKind, p.InShape)
			}
			bl.nt.clears = append(bl.nt.clears, [2]int{p.WeightOffset, p.WeightSize})
		case nn.TypeLayerNorm:
			r, _ := seqRows(p)
			l.mean, l.rstd = bl.alloc(nb*r), bl.alloc(nb*r)
		case nn.TypeAttention:
			if p.InKind != "sequence" || p.Heads < 1 || p.InShape[1]%p.Heads != 0 {
				return nil, fmt.Errorf("layer %s: attention with %d heads on %s input %v", l.name, p.Heads, p.InKind, p.InShape)
			}
			a := &attention{n: nb, t: p.InShape[0], d: p.InShape[1], heads: p.Heads, causal: p.Causal}
			a.qkv, a.probs, a.ctx = bl.alloc(a.qkvSize()), bl.alloc(a.probsSize()), bl.alloc(a.ctxSize())
			bl.attCtx = max(bl.attCtx, a.ctxSize())
			bl.attProbs = max(bl.attProbs, a.probsSize())
			bl.attQKV = max(bl.attQKV, a.qkvSize())
			l.att = a
		case nn.TypeResidual:
			var err error
			if l.body, err = bl.stack(p.Body, below, l.name+".residual."); err != nil {
				return nil, err
			}
		case nn.TypeConv2D:
			P, R := p.Out[1]*p.Out[2], p.In[0]*p.Kernel*p.Kernel
			l.rows = bl.alloc(nb * P * R)
			bl.scratchT = max(bl.scratchT, nb*P*p.Out[0])
			bl.scratchRows = max(bl.scratchRows, nb*P*R)
		case nn.TypeMaxPool2D:
			l.argmax = bl.alloc(nb * p.OutSize)
		default:
			return nil, fmt.Errorf("layer %s: the WebGPU backend has no layer type %q", l.name, p.Type)
		}
		st.acts[i+1] = bl.alloc(nb * p.OutSize)
	}
	return st, nil
}

// newNet lays model out for batches of up to maxBatch.
func newNet(model *nn.Model, maxBatch int) (*net, error) {
	nt := &net{model: model, maxBatch: maxBatch, floats: guardFloats}
	bl := &builder{nt: nt, maxBatch: maxBatch}
	var err error
	if nt.top, err = bl.stack(model.Plan(), false, ""); err != nil {
		return nil, err
	}
	L, rows := len(nt.top.layers), maxBatch*model.LabelsPerExample
	nt.top.dacts[L] = bl.alloc(rows * model.NumClasses)
	nt.scratchT, nt.scratchRows = bl.alloc(bl.scratchT), bl.alloc(bl.scratchRows)
	nt.attScratch = attentionScratch{dctx: bl.alloc(bl.attCtx), dprobs: bl.alloc(bl.attProbs), dqkv: bl.alloc(bl.attQKV)}
	P := model.NumParams
	nt.base, nt.w, nt.grad, nt.moment1, nt.moment2 = bl.alloc(P), bl.alloc(P), bl.alloc(P), bl.alloc(P), bl.alloc(P)
	nt.x, nt.labels = bl.alloc(maxBatch*model.InputSize), bl.alloc(rows)
	nt.rowLoss, nt.rowHit, nt.accLoss, nt.accHit = bl.alloc(rows), bl.alloc(rows), bl.alloc(rows), bl.alloc(rows)
	nt.clipPartial, nt.clipScale = bl.alloc(clipPartials), bl.alloc(1)
	return nt, nil
}

// readFloats is the most a call reads back: the update or the output.
func (nt *net) readFloats() int {
	return max(nt.model.NumParams, nt.maxBatch*nt.model.LabelsPerExample*nt.model.NumClasses)
}

// gradient runs forward and backward on the n examples at nt.x with
// parameters w, writes the gradient of the mean loss into grad and adds
// each row's loss and hit into accLoss and accHit.
func (nt *net) gradient(k kernels, w ptr, n int, grad ptr) error {
	top := nt.top
	L := len(top.layers)
	top.acts[0] = nt.x
	if err := nt.forward(k, top, w, n, true); err != nil {
		return err
	}
	classes, rows := nt.model.NumClasses, n*nt.model.LabelsPerExample
	if err := k.launchRows("softmax_xent", rows, top.acts[L], nt.labels, top.dacts[L], rows, classes, 1/float32(rows), nt.rowLoss, nt.rowHit); err != nil {
		return err
	}
	if err := k.launch("accumulate_rows", rows, nt.rowLoss, nt.rowHit, nt.accLoss, nt.accHit, rows); err != nil {
		return err
	}
	for _, c := range nt.clears {
		if err := k.launch("fill", c[1], off(grad, c[0]), c[1], float32(0)); err != nil {
			return err
		}
	}
	err := nt.backward(k, top, w, n, grad)
	nt.seed++
	return err
}

// clearSums zeroes the per-row loss and hit sums.
func (nt *net) clearSums(k kernels) error {
	rows := nt.maxBatch * nt.model.LabelsPerExample
	if err := k.launch("fill", rows, nt.accLoss, rows, float32(0)); err != nil {
		return err
	}
	return k.launch("fill", rows, nt.accHit, rows, float32(0)) // int 0 has the bits of float 0
}

// clip scales the NumParams values at g by min(1, c/(‖g‖₂+1e-6)), as
// nn.ClipInPlace does on the host; c = 0 does nothing.
func (nt *net) clip(k kernels, g ptr, c float32) error {
	if c == 0 {
		return nil
	}
	n := nt.model.NumParams
	if err := k.dispatch("grad_sumsq_partial", clipPartials, 1, 1, g, n, nt.clipPartial); err != nil {
		return err
	}
	if err := k.dispatch("clip_scale", 1, 1, 1, nt.clipPartial, clipPartials, c, nt.clipScale); err != nil {
		return err
	}
	return k.launch("scale_by", n, g, nt.clipScale, n)
}

// forward runs a stack's layers; train draws dropout masks, else dropout
// passes its input on.
func (nt *net) forward(k kernels, st *stack, w ptr, n int, train bool) error {
	for i, l := range st.layers {
		if err := nt.forwardLayer(k, st, i, l, w, n, train); err != nil {
			return fmt.Errorf("layer %s (%s) forward: %w", l.name, l.Type, err)
		}
	}
	return nil
}

// backward runs a stack's layers backward from dacts[len(layers)], as far
// down as a gradient is needed.
func (nt *net) backward(k kernels, st *stack, w ptr, n int, grad ptr) error {
	for i := len(st.layers) - 1; i >= 0; i-- {
		if st.dacts[i+1] == 0 {
			break
		}
		l := st.layers[i]
		if err := nt.backwardLayer(k, st, i, l, w, n, grad); err != nil {
			return fmt.Errorf("layer %s (%s) backward: %w", l.name, l.Type, err)
		}
	}
	return nil
}
