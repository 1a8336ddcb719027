//go:build linux

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

	scratchT    cuda.DevicePtr // conv2d: the GEMM's (n*P)×F output and gradient
	scratchRows cuda.DevicePtr // conv2d: the patches' gradient

	base, w, grad    cuda.DevicePtr // NumParams each
	moment1, moment2 cuda.DevicePtr // inner AdamW's m and v, NumParams each
	snap             worker.SnapshotID
	x, labels        cuda.DevicePtr
	xCap, labelCap   int            // examples x and labels hold
	acc              cuda.DevicePtr // float64 loss sum, int32 correct count
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
	rows   cuda.DevicePtr // conv2d: the batch's patches, kept for backward
	argmax cuda.DevicePtr // maxpool2d: the winners
}

// hasParams says whether a layer has parameters of its own.
func hasParams(l nn.LayerPlan) bool { return l.WeightSize > 0 || l.BiasSize > 0 }

// builder allocates a net's device memory.
type builder struct {
	b                     *Backend
	nt                    *net
	maxBatch              int
	scratchT, scratchRows int
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
func (bl *builder) stack(plans []nn.LayerPlan, paramsBelow bool) (*stack, error) {
	L, nb := len(plans), bl.maxBatch
	st := &stack{acts: make([]cuda.DevicePtr, L+1), dacts: make([]cuda.DevicePtr, L+1)}
	var err error
	for i, p := range plans {
		l := &layer{LayerPlan: p}
		st.layers = append(st.layers, l)
		// An input gradient is needed below a layer only if some layer
		// under it has parameters.
		if paramsBelow && p.Type != nn.TypeFlatten {
			if st.dacts[i], err = bl.alloc(nb * p.InSize); err != nil {
				return nil, err
			}
		}
		paramsBelow = paramsBelow || hasParams(p)
		switch p.Type {
		case nn.TypeFlatten:
			continue // aliases, set per call
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
	if nt.top, err = bl.stack(model.Plan(), false); err != nil {
		return nil, err
	}
	L := len(nt.top.layers)
	if nt.top.dacts[L], err = bl.alloc(maxBatch * model.NumClasses); err != nil {
		return nil, err
	}
	if nt.scratchT, err = bl.alloc(bl.scratchT); err != nil {
		return nil, err
	}
	if nt.scratchRows, err = bl.alloc(bl.scratchRows); err != nil {
		return nil, err
	}
	for _, p := range []*cuda.DevicePtr{&nt.base, &nt.w, &nt.grad, &nt.moment1, &nt.moment2} {
		if *p, err = bl.alloc(model.NumParams); err != nil {
			return nil, err
		}
	}
	if nt.acc, err = bl.alloc(4); err != nil {
		return nil, err
	}
	for _, p := range []*cuda.DevicePtr{&nt.rowLoss, &nt.rowHit} {
		if *p, err = bl.alloc(maxBatch); err != nil {
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
	n := len(labels)
	if n > nt.xCap {
		d.Free(nt.x)
		d.Free(nt.labels)
		nt.x, nt.labels, nt.xCap = 0, 0, 0
		var err error
		if nt.x, err = d.Alloc(4 * len(x)); err != nil {
			return err
		}
		if nt.labels, err = d.Alloc(4 * n); err != nil {
			d.Free(nt.x)
			nt.x = 0
			return err
		}
		nt.xCap = n
	}
	if err := nt.upload(d, nt.x, x); err != nil {
		return err
	}
	if err := nt.ensureStage(d, 4*n); err != nil {
		return err
	}
	copy(nt.stage.Int32s(n), labels)
	return d.Upload(nt.labels, nt.stage, 4*n)
}

func off(p cuda.DevicePtr, floats int) cuda.DevicePtr { return p + cuda.DevicePtr(4*floats) }

// gradient runs forward and backward on n examples at x with parameters
// w, writes the gradient of the mean loss into grad and adds the summed
// loss and correct count to acc.
func (nt *net) gradient(b *Backend, w, x, labels cuda.DevicePtr, n int, grad cuda.DevicePtr) error {
	top := nt.top
	L := len(top.layers)
	top.acts[0] = x
	if err := nt.forward(b, top, w, n, ""); err != nil {
		return err
	}
	classes := nt.model.NumClasses
	if err := b.launchRows("softmax_xent", n, top.acts[L], labels, top.dacts[L], n, classes, 1/float32(n), nt.rowLoss, nt.rowHit); err != nil {
		return err
	}
	if err := b.launchGrid("sum_losses", 1, 256, nt.rowLoss, nt.rowHit, n, nt.acc, off(nt.acc, 2)); err != nil {
		return err
	}
	return nt.backward(b, top, w, n, grad, "")
}

// forward runs a stack's layers; where names the stack in errors.
func (nt *net) forward(b *Backend, st *stack, w cuda.DevicePtr, n int, where string) error {
	for i, l := range st.layers {
		if err := nt.forwardLayer(b, st, i, l, w, n); err != nil {
			return fmt.Errorf("layer %s%d (%s) forward: %w", where, i, l.Type, err)
		}
	}
	return nil
}

// backward runs a stack's layers backward, from the gradient of its
// output in dacts[len(layers)], as far down as a gradient is needed.
func (nt *net) backward(b *Backend, st *stack, w cuda.DevicePtr, n int, grad cuda.DevicePtr, where string) error {
	for i := len(st.layers) - 1; i >= 0; i-- {
		if st.dacts[i+1] == 0 {
			break
		}
		if err := nt.backwardLayer(b, st, i, st.layers[i], w, n, grad); err != nil {
			return fmt.Errorf("layer %s%d (%s) backward: %w", where, i, st.layers[i].Type, err)
		}
	}
	return nil
}

func (nt *net) forwardLayer(b *Backend, st *stack, i int, l *layer, w cuda.DevicePtr, n int) error {
	in, out := st.acts[i], st.acts[i+1]
	switch l.Type {
	case nn.TypeFlatten:
		st.acts[i+1] = in
		return nil
	case nn.TypeDense:
		I, O := l.InSize, l.OutSize
		if err := b.blas.GemmRowMajor(false, true, n, O, I, 1, in, I, off(w, l.WeightOffset), I, 0, out, O); err != nil {
			return err
		}
		return b.launch("add_bias", n*O, out, off(w, l.BiasOffset), n, O)
	case nn.TypeReLU:
		return b.launch("relu_forward", n*l.OutSize, in, out, n*l.OutSize)
	case nn.TypeConv2D:
		C, H, W := l.In[0], l.In[1], l.In[2]
		F, OH, OW := l.Out[0], l.Out[1], l.Out[2]
		P, R := OH*OW, C*l.Kernel*l.Kernel
		if err := b.launch("im2row", n*P*R, in, l.rows, n, C, H, W, l.Kernel, l.Stride, l.Padding, OH, OW); err != nil {
			return err
		}
		// outT[(n*P)×F] = rows[(n*P)×R] · Wᵀ
		if err := b.blas.GemmRowMajor(false, true, n*P, F, R, 1, l.rows, R, off(w, l.WeightOffset), R, 0, nt.scratchT, F); err != nil {
			return err
		}
		return b.launch("conv_output", n*F*P, nt.scratchT, off(w, l.BiasOffset), out, n, F, P)
	case nn.TypeMaxPool2D:
		return b.launch("maxpool_forward", n*l.OutSize, in, out, l.argmax, n, l.In[0], l.In[1], l.In[2], l.Kernel, l.Stride, l.Out[1], l.Out[2])
	}
	return fmt.Errorf("unsupported layer type %q", l.Type)
}

func (nt *net) backwardLayer(b *Backend, st *stack, i int, l *layer, w cuda.DevicePtr, n int, grad cuda.DevicePtr) error {
	in, dOut, dIn := st.acts[i], st.dacts[i+1], st.dacts[i]
	switch l.Type {
	case nn.TypeFlatten:
		st.dacts[i] = dOut // the same values, reshaped
		return nil
	case nn.TypeDense:
		I, O := l.InSize, l.OutSize
		// dW[O×I] = dOutᵀ · in
		if err := b.blas.GemmRowMajor(true, false, O, I, n, 1, dOut, O, in, I, 0, off(grad, l.WeightOffset), I); err != nil {
			return err
		}
		if err := b.launchGrid("column_sums", O, 256, dOut, off(grad, l.BiasOffset), n, O); err != nil {
			return err
		}
		if dIn != 0 {
			// dIn[n×I] = dOut · W
			return b.blas.GemmRowMajor(false, false, n, I, O, 1, dOut, O, off(w, l.WeightOffset), I, 0, dIn, I)
		}
	case nn.TypeReLU:
		if dIn != 0 {
			return b.launch("relu_backward", n*l.OutSize, st.acts[i+1], dOut, dIn, n*l.OutSize)
		}
	case nn.TypeConv2D:
		C, H, W := l.In[0], l.In[1], l.In[2]
		F, OH, OW := l.Out[0], l.Out[1], l.Out[2]
		P, R := OH*OW, C*l.Kernel*l.Kernel
		if err := b.launch("conv_grad_rows", n*F*P, dOut, nt.scratchT, n, F, P); err != nil {
			return err
		}
		// dW[F×R] = dOutTᵀ · rows, over all n*P positions at once.
		if err := b.blas.GemmRowMajor(true, false, F, R, n*P, 1, nt.scratchT, F, l.rows, R, 0, off(grad, l.WeightOffset), R); err != nil {
			return err
		}
		if err := b.launchGrid("column_sums", F, 256, nt.scratchT, off(grad, l.BiasOffset), n*P, F); err != nil {
			return err
		}
		if dIn != 0 {
			// dRows[(n*P)×R] = dOutT · W, gathered back to the input.
			if err := b.blas.GemmRowMajor(false, false, n*P, R, F, 1, nt.scratchT, F, off(w, l.WeightOffset), R, 0, nt.scratchRows, R); err != nil {
				return err
			}
			return b.launch("row2im", n*C*H*W, nt.scratchRows, dIn, n, C, H, W, l.Kernel, l.Stride, l.Padding, OH, OW)
		}
	case nn.TypeMaxPool2D:
		if dIn != 0 {
			return b.launch("maxpool_backward", n*l.InSize, dOut, l.argmax, dIn, n, l.In[0], l.In[1], l.In[2], l.Kernel, l.Stride, l.Out[1], l.Out[2])
		}
	default:
		return fmt.Errorf("unsupported layer type %q", l.Type)
	}
	return nil
}
