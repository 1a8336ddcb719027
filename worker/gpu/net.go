package gpu

import (
	"fmt"
	"slices"

	"github.com/crowdtrain/crowdtrain/nn"
)

// net is a model's layout in device memory for batches of up to
// maxBatch: the parameters, every activation and the gradients.
type net struct {
	model    *nn.Model
	maxBatch int
	top      *stack
	// clears are the gradient spans that backward adds into (an
	// embedding's token table, which a tied output layer writes first):
	// zeroed before each backward pass.
	clears [][2]int
	// seed is the dropout seed of the next gradient call, which moves it on
	// by one, as an nn.Workspace's.
	seed uint64

	base, w, grad    Ptr   // NumParams each
	moment1, moment2 Ptr   // inner AdamW's m and v
	room             Batch // one batch of examples and labels
	rowLoss, rowHit  Ptr   // softmax_xent's loss and hit per row
	sums             LossSums
	clipPartial      Ptr   // ClipBlocks partial sums of squares
	clipScale        Ptr   // one float: the clip's scale
	bytes            int   // the layout's size
	buffers          []Ptr // where each buffer starts, in order, then the end
}

// stack is a sequence of layers: the model's, or a residual block's body.
// acts[i] is layer i's input and acts[i+1] its output (acts[0] is set per
// call; a flatten layer's output aliases its input). dacts[i] is the loss
// gradient of acts[i], 0 where nobody reads it.
type stack struct {
	layers      []*layer
	acts, dacts []Ptr
}

// layer is one layer's plan and what its type does with it.
type layer struct {
	nn.LayerPlan
	name string // as in its tensors' names: "3", or "1.residual.0" in a body
	ops  layerOps
}

// layerOps runs one layer on a pass: layer i of st, whose input is
// st.acts[i] and output st.acts[i+1] (gradients in dacts).
type layerOps interface {
	forward(p *pass, st *stack, i int) error
	// backward writes the layer's parameter gradients and, when
	// st.dacts[i] is not 0, its input's gradient.
	backward(p *pass, st *stack, i int) error
}

// layerType is what the executor knows of one nn layer type; each
// registers itself from its own file.
type layerType struct {
	// build checks a layer's plan and reserves what it keeps on the
	// device; below says whether a layer before it has parameters.
	build func(bl *builder, l *layer, below bool) (layerOps, error)
	// aliases: the output is the input reshaped (flatten), with no
	// buffer of its own.
	aliases bool
	// tokens: the input is token ids, which have no gradient.
	tokens bool
}

var layerTypes = map[string]layerType{}

func register(typ string, t layerType) { layerTypes[typ] = t }

// pass is one call's forward or backward: the parameters and their
// gradient, the batch's examples, and whether dropout draws masks.
type pass struct {
	dev     Device
	nt      *net
	w, grad Ptr
	n       int
	train   bool
}

// wAt and gAt are where a tensor of the parameters, and its gradient,
// starts (offset in floats, as in nn.LayerPlan).
func (p *pass) wAt(offset int) Ptr { return Off(p.w, offset) }
func (p *pass) gAt(offset int) Ptr { return Off(p.grad, offset) }

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

// builder lays a net out from base: every buffer aligned to 256 bytes,
// the first GuardBytes left unused.
type builder struct {
	nt       *net
	dev      Device
	maxBatch int
	base     Ptr
	next     int // bytes laid out
	scratch  map[string]*scratchBuffer
}

// scratchBuffer is a buffer that layers use only while they run, shared
// by all of them: as large as the largest asks.
type scratchBuffer struct {
	floats int
	p      Ptr
}

func (bl *builder) alloc(floats int) Ptr {
	p := bl.base + Ptr(bl.next)
	bl.next += (4*max(floats, 1) + 255) &^ 255
	bl.nt.buffers = append(bl.nt.buffers, p)
	return p
}

// shared reserves floats of the scratch buffer key and returns where its
// address will be once the net is laid out.
func (bl *builder) shared(key string, floats int) *Ptr {
	s := bl.scratch[key]
	if s == nil {
		s = &scratchBuffer{}
		bl.scratch[key] = s
	}
	s.floats = max(s.floats, floats)
	return &s.p
}

// stack resolves plans into a stack with its activations. paramsBelow says
// whether a layer before the stack has parameters, so that the stack's
// input gradient is needed. prefix starts the names of the stack's layers
// ("" at the top, "1.residual." in layer 1's body).
func (bl *builder) stack(plans []nn.LayerPlan, paramsBelow bool, prefix string) (*stack, error) {
	L, nb := len(plans), bl.maxBatch
	st := &stack{acts: make([]Ptr, L+1), dacts: make([]Ptr, L+1)}
	for i, p := range plans {
		l := &layer{LayerPlan: p, name: fmt.Sprintf("%s%d", prefix, i)}
		st.layers = append(st.layers, l)
		typ, ok := layerTypes[p.Type]
		if !ok {
			return nil, fmt.Errorf("layer %s: the %s backend has no layer type %q", l.name, bl.dev.Name(), p.Type)
		}
		// An input gradient is needed below a layer only if some layer
		// under it has parameters.
		if paramsBelow && !typ.aliases && !typ.tokens {
			st.dacts[i] = bl.alloc(nb * p.InSize)
		}
		below := paramsBelow
		paramsBelow = paramsBelow || hasParams(p)
		var err error
		if l.ops, err = typ.build(bl, l, below); err != nil {
			return nil, err
		}
		if !typ.aliases {
			st.acts[i+1] = bl.alloc(nb * p.OutSize)
		}
	}
	return st, nil
}

// layout lays model out from base for batches of up to maxBatch.
func layout(dev Device, model *nn.Model, maxBatch int, base Ptr) (*net, error) {
	nt := &net{model: model, maxBatch: maxBatch}
	bl := &builder{nt: nt, dev: dev, maxBatch: maxBatch, base: base, next: GuardBytes, scratch: map[string]*scratchBuffer{}}
	var err error
	if nt.top, err = bl.stack(model.Plan(), false, ""); err != nil {
		return nil, err
	}
	L, rows := len(nt.top.layers), maxBatch*model.LabelsPerExample
	nt.top.dacts[L] = bl.alloc(rows * model.NumClasses)
	keys := make([]string, 0, len(bl.scratch))
	for k := range bl.scratch {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		bl.scratch[k].p = bl.alloc(bl.scratch[k].floats)
	}
	P := model.NumParams
	nt.base, nt.w, nt.grad, nt.moment1, nt.moment2 = bl.alloc(P), bl.alloc(P), bl.alloc(P), bl.alloc(P), bl.alloc(P)
	nt.room = Batch{X: bl.alloc(maxBatch * model.InputSize), Labels: bl.alloc(rows), InputSize: model.InputSize, LabelsPerExample: model.LabelsPerExample}
	nt.rowLoss, nt.rowHit = bl.alloc(rows), bl.alloc(rows)
	sumRows := max(rows, 2)
	nt.sums = LossSums{Loss: bl.alloc(sumRows), Hits: bl.alloc(sumRows), Rows: sumRows}
	nt.clipPartial, nt.clipScale = bl.alloc(2*ClipBlocks), bl.alloc(1)
	nt.bytes = bl.next
	nt.buffers = append(nt.buffers, base+Ptr(bl.next))
	return nt, nil
}

// readFloats is the most a call reads back: the update, the output or the
// loss sums of a row each.
func (nt *net) readFloats() int {
	rows := nt.maxBatch * nt.model.LabelsPerExample
	return max(nt.model.NumParams, rows*nt.model.NumClasses, 2)
}

// gradient runs forward and backward on batch b of n examples with
// parameters w, writes the gradient of the mean loss into grad and adds
// the losses and hits into the device's sums.
// clearSums zeroes the loss sums.
func (nt *net) clearSums(dev Device) error {
	if err := dev.Zero(nt.sums.Loss, nt.sums.Rows); err != nil {
		return err
	}
	return dev.Zero(nt.sums.Hits, nt.sums.Rows)
}

func (nt *net) gradient(dev Device, w Ptr, b Batch, n int, grad Ptr) error {
	top := nt.top
	L := len(top.layers)
	top.acts[0] = b.X
	p := &pass{dev: dev, nt: nt, w: w, grad: grad, n: n, train: true}
	if err := p.forward(top); err != nil {
		return err
	}
	// The loss: one row of classes per label, n*LabelsPerExample rows.
	classes, rows := nt.model.NumClasses, n*nt.model.LabelsPerExample
	if err := dev.LaunchRows("softmax_xent", rows, top.acts[L], b.Labels, top.dacts[L], rows, classes, 1/float32(rows), nt.rowLoss, nt.rowHit); err != nil {
		return err
	}
	if err := dev.AddLosses(nt.rowLoss, nt.rowHit, rows, nt.sums); err != nil {
		return err
	}
	for _, c := range nt.clears {
		if err := dev.Zero(Off(grad, c[0]), c[1]); err != nil {
			return err
		}
	}
	err := p.backward(top)
	nt.seed++
	return err
}

// clip scales the NumParams values at g by min(1, c/(‖g‖₂+1e-6)), as
// nn.ClipInPlace does on the host; c = 0 does nothing.
func (nt *net) clip(dev Device, g Ptr, c float32) error {
	if c == 0 {
		return nil
	}
	n := nt.model.NumParams
	if err := dev.LaunchBlocks("grad_sumsq_partial", ClipBlocks, g, n, nt.clipPartial); err != nil {
		return err
	}
	if err := dev.LaunchBlocks("clip_scale", 1, nt.clipPartial, ClipBlocks, c, nt.clipScale); err != nil {
		return err
	}
	return dev.Launch("scale_by", n, g, nt.clipScale, n)
}

// forward runs a stack's layers.
func (p *pass) forward(st *stack) error {
	for i, l := range st.layers {
		if err := l.ops.forward(p, st, i); err != nil {
			return fmt.Errorf("layer %s (%s) forward: %w", l.name, l.Type, err)
		}
	}
	return nil
}

// backward runs a stack's layers backward, from the gradient of its
// output in dacts[len(layers)], as far down as a gradient is needed.
func (p *pass) backward(st *stack) error {
	for i := len(st.layers) - 1; i >= 0; i-- {
		if st.dacts[i+1] == 0 {
			break
		}
		l := st.layers[i]
		if err := l.ops.backward(p, st, i); err != nil {
			return fmt.Errorf("layer %s (%s) backward: %w", l.name, l.Type, err)
		}
	}
	return nil
}
