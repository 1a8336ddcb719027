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
	plan     []nn.LayerPlan
	maxBatch int

	// acts[i] is layer i's input and acts[i+1] its output (acts[0] is set
	// per call; a flatten layer's output aliases its input). dacts[i] is
	// the loss gradient of acts[i], 0 where nobody reads it.
	acts, dacts []cuda.DevicePtr
	rows        []cuda.DevicePtr // conv2d: the batch's patches, kept for backward
	argmax      []cuda.DevicePtr // maxpool2d: the winners
	scratchT    cuda.DevicePtr   // conv2d: the GEMM's (n*P)×F output and gradient
	scratchRows cuda.DevicePtr   // conv2d: the patches' gradient

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

func newNet(b *Backend, model *nn.Model, maxBatch int) (_ *net, err error) {
	nt := &net{model: model, plan: model.Plan(), maxBatch: maxBatch}
	defer func() {
		if err != nil {
			nt.free(b.d)
		}
	}()
	alloc := func(floats int) (cuda.DevicePtr, error) {
		p, err := b.d.Alloc(4 * max(floats, 1))
		if err == nil {
			nt.allocs = append(nt.allocs, p)
		}
		return p, err
	}
	L := len(nt.plan)
	nt.acts = make([]cuda.DevicePtr, L+1)
	nt.dacts = make([]cuda.DevicePtr, L+1)
	nt.rows = make([]cuda.DevicePtr, L)
	nt.argmax = make([]cuda.DevicePtr, L)
	var scratchT, scratchRows int
	for i, l := range nt.plan {
		switch l.Type {
		case nn.TypeFlatten:
			continue // aliases, set per call
		case nn.TypeConv2D:
			P, R := l.Out[1]*l.Out[2], l.In[0]*l.Kernel*l.Kernel
			if nt.rows[i], err = alloc(maxBatch * P * R); err != nil {
				return nil, err
			}
			scratchT = max(scratchT, maxBatch*P*l.Out[0])
			scratchRows = max(scratchRows, maxBatch*P*R)
		case nn.TypeMaxPool2D:
			if nt.argmax[i], err = alloc(maxBatch * l.OutSize); err != nil {
				return nil, err
			}
		}
		if nt.acts[i+1], err = alloc(maxBatch * l.OutSize); err != nil {
			return nil, err
		}
	}
	if nt.scratchT, err = alloc(scratchT); err != nil {
		return nil, err
	}
	if nt.scratchRows, err = alloc(scratchRows); err != nil {
		return nil, err
	}
	// An input gradient is needed below a layer only if some layer under
	// it has parameters.
	params := false
	for i, l := range nt.plan {
		if i > 0 && params && l.Type != nn.TypeFlatten {
			if nt.dacts[i], err = alloc(maxBatch * l.InSize); err != nil {
				return nil, err
			}
		}
		params = params || l.WeightSize > 0
	}
	if nt.dacts[L], err = alloc(maxBatch * model.NumClasses); err != nil {
		return nil, err
	}
	for _, p := range []*cuda.DevicePtr{&nt.base, &nt.w, &nt.grad, &nt.moment1, &nt.moment2} {
		if *p, err = alloc(model.NumParams); err != nil {
			return nil, err
		}
	}
	if nt.acc, err = alloc(4); err != nil {
		return nil, err
	}
	for _, p := range []*cuda.DevicePtr{&nt.rowLoss, &nt.rowHit} {
		if *p, err = alloc(maxBatch); err != nil {
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
	L := len(nt.plan)
	nt.acts[0] = x
	for i, l := range nt.plan {
		if err := nt.forward(b, i, l, w, n); err != nil {
			return fmt.Errorf("layer %d (%s) forward: %w", i, l.Type, err)
		}
	}
	classes := nt.model.NumClasses
	if err := b.launchRows("softmax_xent", n, nt.acts[L], labels, nt.dacts[L], n, classes, 1/float32(n), nt.rowLoss, nt.rowHit); err != nil {
		return err
	}
	if err := b.launchGrid("sum_losses", 1, 256, nt.rowLoss, nt.rowHit, n, nt.acc, off(nt.acc, 2)); err != nil {
		return err
	}
	for i := L - 1; i >= 0; i-- {
		if nt.dacts[i+1] == 0 {
			break
		}
		if err := nt.backward(b, i, nt.plan[i], w, n, grad); err != nil {
			return fmt.Errorf("layer %d (%s) backward: %w", i, nt.plan[i].Type, err)
		}
	}
	return nil
}

func (nt *net) forward(b *Backend, i int, l nn.LayerPlan, w cuda.DevicePtr, n int) error {
	in, out := nt.acts[i], nt.acts[i+1]
	switch l.Type {
	case nn.TypeFlatten:
		nt.acts[i+1] = in
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
		if err := b.launch("im2row", n*P*R, in, nt.rows[i], n, C, H, W, l.Kernel, l.Stride, l.Padding, OH, OW); err != nil {
			return err
		}
		// outT[(n*P)×F] = rows[(n*P)×R] · Wᵀ
		if err := b.blas.GemmRowMajor(false, true, n*P, F, R, 1, nt.rows[i], R, off(w, l.WeightOffset), R, 0, nt.scratchT, F); err != nil {
			return err
		}
		return b.launch("conv_output", n*F*P, nt.scratchT, off(w, l.BiasOffset), out, n, F, P)
	case nn.TypeMaxPool2D:
		return b.launch("maxpool_forward", n*l.OutSize, in, out, nt.argmax[i], n, l.In[0], l.In[1], l.In[2], l.Kernel, l.Stride, l.Out[1], l.Out[2])
	}
	return fmt.Errorf("unsupported layer type %q", l.Type)
}

func (nt *net) backward(b *Backend, i int, l nn.LayerPlan, w cuda.DevicePtr, n int, grad cuda.DevicePtr) error {
	in, dOut, dIn := nt.acts[i], nt.dacts[i+1], nt.dacts[i]
	switch l.Type {
	case nn.TypeFlatten:
		nt.dacts[i] = dOut // the same values, reshaped
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
			return b.launch("relu_backward", n*l.OutSize, nt.acts[i+1], dOut, dIn, n*l.OutSize)
		}
	case nn.TypeConv2D:
		C, H, W := l.In[0], l.In[1], l.In[2]
		F, OH, OW := l.Out[0], l.Out[1], l.Out[2]
		P, R := OH*OW, C*l.Kernel*l.Kernel
		if err := b.launch("conv_grad_rows", n*F*P, dOut, nt.scratchT, n, F, P); err != nil {
			return err
		}
		// dW[F×R] = dOutTᵀ · rows, over all n*P positions at once.
		if err := b.blas.GemmRowMajor(true, false, F, R, n*P, 1, nt.scratchT, F, nt.rows[i], R, 0, off(grad, l.WeightOffset), R); err != nil {
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
			return b.launch("maxpool_backward", n*l.InSize, dOut, nt.argmax[i], dIn, n, l.In[0], l.In[1], l.In[2], l.Kernel, l.Stride, l.Out[1], l.Out[2])
		}
	default:
		return fmt.Errorf("unsupported layer type %q", l.Type)
	}
	return nil
}
