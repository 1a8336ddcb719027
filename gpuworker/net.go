//go:build linux || windows

package gpuworker

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/gpuworker/cuda"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
)

// net is a model's device memory for batches of up to maxBatch: the
// parameters, every activation and the gradients. Used on the device
// thread only.
type net struct {
	model    *nn.Model
	maxBatch int
	top      *stack

	scratchT    cuda.DevicePtr   // conv2d: the GEMM's (n*P)×F output and gradient
	scratchRows cuda.DevicePtr   // conv2d: the patches' gradient
	attScratch  attentionScratch // attention's backward
	// clears are the gradient spans that backward adds into (an
	// embedding's token table, which a tied output layer writes first):
	// zeroed before each backward pass.
	clears [][2]int
	// seed is the dropout seed of the next gradient call, which moves it on
	// by one, as an nn.Workspace's; Gradient and Steps set it first.
	seed uint64

	base, w, grad    cuda.DevicePtr // NumParams each
	moment1, moment2 cuda.DevicePtr // inner AdamW's m and v, NumParams each
	snap             worker.SnapshotID
	x, labels        cuda.DevicePtr
	xCap             int            // examples x and labels hold
	acc              cuda.DevicePtr // float64 loss sum, int32 correct count
	clipPartial      cuda.DevicePtr // clipBlocks float64 partial sums of squares
	clipScale        cuda.DevicePtr // one float32: the clip's scale
	rowLoss, rowHit  cuda.DevicePtr // softmax_xent's loss and hit per row
	stage            *cuda.HostBuffer
	allocs           []cuda.DevicePtr
}

// stack is a sequence of layers: the model's, or a residual block's body.
// acts[i] is layer i's input and acts[i+1] its output (acts[0] is set per
// call; a flatten layer's output aliases its input). dacts[i] is the loss
// gradient of acts[i], 0 where nobody reads it.
type stack struct {
	layers      []*layer
	acts, dacts []cuda.DevicePtr
}

// layer is one layer's plan and what it keeps on the device.
type layer struct {
	nn.LayerPlan
	name       string         // as in its tensors' names: "3", or "1.residual.0" in a body
	rows       cuda.DevicePtr // conv2d: the batch's patches, kept for backward
	argmax     cuda.DevicePtr // maxpool2d: the winners
	mean, rstd cuda.DevicePtr // layernorm: per row
	att        *attention     // attention: its buffers
	body       *stack         // residual: the body
}

// hasParams says whether a layer (or a residual block's body) has
// parameters.
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

// seqRows views a layer's input per example as rows of values: a sequence
// [t,d] is t rows of d (dense, layernorm apply per position), anything else
// one row of all its values.
func seqRows(l nn.LayerPlan) (rows, cols int) {
	if l.InKind == "sequence" {
		return l.InShape[0], l.InShape[1]
	}
	return 1, l.InSize
}

// gatherVocab is the largest vocabulary whose token table gradient is
// gathered in a fixed order (embedding_backward_gather, rows*vocab*d
// comparisons); larger ones are scattered by atomics.
const gatherVocab = 1024

// builder allocates a net's device memory.
type builder struct {
	b                        *Backend
	nt                       *net
	maxBatch                 int
	scratchT, scratchRows    int
	attCtx, attProbs, attQKV int // attention's backward scratch, floats
}

func (bl *builder) alloc(floats int) (cuda.DevicePtr, error) {
	p, err := bl.b.d.Alloc(4 * max(floats, 1))
	if err == nil {
		bl.nt.allocs = append(bl.nt.allocs, p)
	}
	return p, err
}

// stack resolves plans into a stack with its activations. paramsBelow says
// whether a layer before the stack has parameters, so that the stack's
// input gradient is needed.
// prefix starts the names of the stack's layers ("" at the top,
// "1.residual." in layer 1's body).
func (bl *builder) stack(plans []nn.LayerPlan, paramsBelow bool, prefix string) (*stack, error) {
	L, nb := len(plans), bl.maxBatch
	st := &stack{acts: make([]cuda.DevicePtr, L+1), dacts: make([]cuda.DevicePtr, L+1)}
	var err error
	for i, p := range plans {
		l := &layer{LayerPlan: p, name: fmt.Sprintf("%s%d", prefix, i)}
		st.layers = append(st.layers, l)
		// An input gradient is needed below a layer only if some layer
		// under it has parameters.
		if paramsBelow && p.Type != nn.TypeFlatten && p.Type != nn.TypeEmbedding {
			if st.dacts[i], err = bl.alloc(nb * p.InSize); err != nil {
				return nil, err
			}
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
			if l.mean, err = bl.alloc(nb * r); err != nil {
				return nil, err
			}
			if l.rstd, err = bl.alloc(nb * r); err != nil {
				return nil, err
			}
		case nn.TypeAttention:
			if p.InKind != "sequence" || p.Heads < 1 || p.InShape[1]%p.Heads != 0 {
				return nil, fmt.Errorf("layer %s: attention with %d heads on %s input %v", l.name, p.Heads, p.InKind, p.InShape)
			}
			a := &attention{n: nb, t: p.InShape[0], d: p.InShape[1], heads: p.Heads, causal: p.Causal}
			if a.qkv, err = bl.alloc(a.qkvSize()); err != nil {
				return nil, err
			}
			if a.probs, err = bl.alloc(a.probsSize()); err != nil {
				return nil, err
			}
			if a.ctx, err = bl.alloc(a.ctxSize()); err != nil {
				return nil, err
			}
			bl.attCtx = max(bl.attCtx, a.ctxSize())
			bl.attProbs = max(bl.attProbs, a.probsSize())
			bl.attQKV = max(bl.attQKV, a.qkvSize())
			l.att = a
		case nn.TypeResidual:
			if l.body, err = bl.stack(p.Body, below, l.name+".residual."); err != nil {
				return nil, err
			}
		case nn.TypeConv2D:
			P, R := p.Out[1]*p.Out[2], p.In[0]*p.Kernel*p.Kernel
			if l.rows, err = bl.alloc(nb * P * R); err != nil {
				return nil, err
			}
			bl.scratchT = max(bl.scratchT, nb*P*p.Out[0])
			bl.scratchRows = max(bl.scratchRows, nb*P*R)
		case nn.TypeMaxPool2D:
			if l.argmax, err = bl.alloc(nb * p.OutSize); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("layer %s: the CUDA backend has no layer type %q", l.name, p.Type)
		}
		if st.acts[i+1], err = bl.alloc(nb * p.OutSize); err != nil {
			return nil, err
		}
	}
	return st, nil
}

func newNet(b *Backend, model *nn.Model, maxBatch int) (_ *net, err error) {
	nt := &net{model: model, maxBatch: maxBatch}
	defer func() {
		if err != nil {
			nt.free(b.d)
		}
	}()
	bl := &builder{b: b, nt: nt, maxBatch: maxBatch}
	if nt.top, err = bl.stack(model.Plan(), false, ""); err != nil {
		return nil, err
	}
	L, rows := len(nt.top.layers), maxBatch*model.LabelsPerExample
	if nt.top.dacts[L], err = bl.alloc(rows * model.NumClasses); err != nil {
		return nil, err
	}
	for _, s := range []struct {
		p      *cuda.DevicePtr
		floats int
	}{
		{&nt.scratchT, bl.scratchT}, {&nt.scratchRows, bl.scratchRows},
		{&nt.attScratch.dctx, bl.attCtx}, {&nt.attScratch.dprobs, bl.attProbs}, {&nt.attScratch.dqkv, bl.attQKV},
	} {
		if *s.p, err = bl.alloc(s.floats); err != nil {
			return nil, err
		}
	}
	for _, p := range []*cuda.DevicePtr{&nt.base, &nt.w, &nt.grad, &nt.moment1, &nt.moment2} {
		if *p, err = bl.alloc(model.NumParams); err != nil {
			return nil, err
		}
	}
	if nt.acc, err = bl.alloc(4); err != nil {
		return nil, err
	}
	if nt.clipPartial, err = bl.alloc(2 * clipBlocks); err != nil {
		return nil, err
	}
	if nt.clipScale, err = bl.alloc(1); err != nil {
		return nil, err
	}
	for _, p := range []*cuda.DevicePtr{&nt.rowLoss, &nt.rowHit} {
		if *p, err = bl.alloc(rows); err != nil {
			return nil, err
		}
	}
	nt.stage, err = b.d.AllocHost(4 * max(model.NumParams, maxBatch*model.InputSize))
	return nt, err
}

func (nt *net) free(d *cuda.Driver) {
	for _, p := range nt.allocs {
		d.Free(p)
	}
	nt.allocs = nil
	if nt.stage != nil {
		d.FreeHost(nt.stage)
		nt.stage = nil
	}
}

// ensureStage grows the pinned staging buffer to at least bytes.
func (nt *net) ensureStage(d *cuda.Driver, bytes int) error {
	if nt.stage.Bytes() >= bytes {
		return nil
	}
	d.FreeHost(nt.stage)
	var err error
	nt.stage, err = d.AllocHost(bytes)
	return err
}

// upload copies v to dst through the pinned staging buffer.
func (nt *net) upload(d *cuda.Driver, dst cuda.DevicePtr, v []float32) error {
	if err := nt.ensureStage(d, 4*len(v)); err != nil {
		return err
	}
	copy(nt.stage.Float32s(len(v)), v)
	return d.Upload(dst, nt.stage, 4*len(v))
}

// download copies len(v) floats from src into v through the staging buffer.
func (nt *net) download(d *cuda.Driver, v []float32, src cuda.DevicePtr) error {
	if err := nt.ensureStage(d, 4*len(v)); err != nil {
		return err
	}
	if err := d.Download(nt.stage, src, 4*len(v)); err != nil {
		return err
	}
	copy(v, nt.stage.Float32s(len(v)))
	return nil
}

// uploadBatch copies a lease's examples and labels to the device, growing
// their buffers when a lease has more examples than any before.
func (nt *net) uploadBatch(d *cuda.Driver, x []float32, labels []int32) error {
	n := len(labels) / nt.model.LabelsPerExample
	if n > nt.xCap {
		d.Free(nt.x)
		d.Free(nt.labels)
		nt.x, nt.labels, nt.xCap = 0, 0, 0
		var err error
		if nt.x, err = d.Alloc(4 * len(x)); err != nil {
			return err
		}
		if nt.labels, err = d.Alloc(4 * len(labels)); err != nil {
			d.Free(nt.x)
			nt.x = 0
			return err
		}
		nt.xCap = n
	}
	if err := nt.upload(d, nt.x, x); err != nil {
		return err
	}
	if err := nt.ensureStage(d, 4*len(labels)); err != nil {
		return err
	}
	copy(nt.stage.Int32s(len(labels)), labels)
	return d.Upload(nt.labels, nt.stage, 4*len(labels))
}

func off(p cuda.DevicePtr, floats int) cuda.DevicePtr { return p + cuda.DevicePtr(4*floats) }

// gradient runs forward and backward on n examples at x with parameters
// w, writes the gradient of the mean loss into grad and adds the summed
// loss and correct count to acc.
func (nt *net) gradient(b *Backend, w, x, labels cuda.DevicePtr, n int, grad cuda.DevicePtr) error {
	top := nt.top
	L := len(top.layers)
	top.acts[0] = x
	if err := nt.forward(b, top, w, n); err != nil {
		return err
	}
	// The loss: one row of classes per label, n*LabelsPerExample rows.
	classes, rows := nt.model.NumClasses, n*nt.model.LabelsPerExample
	if err := b.launchRows("softmax_xent", rows, top.acts[L], labels, top.dacts[L], rows, classes, 1/float32(rows), nt.rowLoss, nt.rowHit); err != nil {
		return err
	}
	if err := b.launchGrid("sum_losses", 1, 256, nt.rowLoss, nt.rowHit, rows, nt.acc, off(nt.acc, 2)); err != nil {
		return err
	}
	for _, c := range nt.clears {
		if err := b.d.Memset32(off(grad, c[0]), 0, c[1]); err != nil {
			return err
		}
	}
	err := nt.backward(b, top, w, n, grad)
	nt.seed++
	return err
}

// clipBlocks is the fixed grid of grad_sumsq_partial: a fixed grid and
// block fix the order in which the squares are added.
const clipBlocks = 256

// clip scales the NumParams values at g by min(1, c/(‖g‖₂+1e-6)), as
// nn.ClipInPlace does on the host; c = 0 does nothing.
func (nt *net) clip(b *Backend, g cuda.DevicePtr, c float32) error {
	if c == 0 {
		return nil
	}
	n := nt.model.NumParams
	if err := b.launchGrid("grad_sumsq_partial", clipBlocks, 256, g, n, nt.clipPartial); err != nil {
		return err
	}
	if err := b.launchGrid("clip_scale", 1, 256, nt.clipPartial, clipBlocks, c, nt.clipScale); err != nil {
		return err
	}
	return b.launch("scale_by", n, g, nt.clipScale, n)
}

// forward runs a stack's layers.
func (nt *net) forward(b *Backend, st *stack, w cuda.DevicePtr, n int) error {
	for i, l := range st.layers {
		if err := nt.forwardLayer(b, st, i, l, w, n); err != nil {
			return fmt.Errorf("layer %s (%s) forward: %w", l.name, l.Type, err)
		}
	}
	return nil
}

// backward runs a stack's layers backward, from the gradient of its
// output in dacts[len(layers)], as far down as a gradient is needed.
func (nt *net) backward(b *Backend, st *stack, w cuda.DevicePtr, n int, grad cuda.DevicePtr) error {
	for i := len(st.layers) - 1; i >= 0; i-- {
		if st.dacts[i+1] == 0 {
			break
		}
		l := st.layers[i]
		if err := nt.backwardLayer(b, st, i, l, w, n, grad); err != nil {
			return fmt.Errorf("layer %s (%s) backward: %w", l.name, l.Type, err)
		}
	}
	return nil
}
