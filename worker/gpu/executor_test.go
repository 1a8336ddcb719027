package gpu

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/nn/nntest"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// layoutDevice checks what the executor asks of a device against the
// memory it laid out: every span an upload, a copy or a GEMM touches lies
// inside one buffer, and every pointer a kernel takes is in one. It
// computes nothing; the backends' tests compare the numbers with the
// CPU's.
type layoutDevice struct {
	t           *testing.T
	base        Ptr
	bytes, read int
	buffers     []Ptr          // the executor's layout: buffer starts, then the end
	kernels     map[string]int // launches by kernel
	bad         []string
}

func (d *layoutDevice) Name() string { return "test" }

func (d *layoutDevice) Reserve(bytes, readBytes int) (Ptr, error) {
	d.base, d.bytes, d.read = 1<<20, bytes, readBytes
	return d.base, nil
}

// span checks floats values at p: inside one buffer of the layout.
func (d *layoutDevice) span(what string, p Ptr, floats int) {
	if p < d.base+GuardBytes || p%4 != 0 || int(p-d.base)+4*floats > d.bytes {
		d.bad = append(d.bad, fmt.Sprintf("%s: %d floats at %d, outside [%d, %d)", what, floats, p, d.base+GuardBytes, int(d.base)+d.bytes))
		return
	}
	if d.buffers == nil {
		return // laying out
	}
	i, _ := slices.BinarySearch(d.buffers, p+1) // the first start past p
	if end := Off(p, floats); i == 0 || i == len(d.buffers) || end > d.buffers[i] {
		d.bad = append(d.bad, fmt.Sprintf("%s: %d floats at %d cross a buffer's end", what, floats, p))
	}
}

func (d *layoutDevice) Upload(p Ptr, v []float32) error { d.span("upload", p, len(v)); return nil }
func (d *layoutDevice) Download(v []float32, p Ptr) error {
	d.span("download", p, len(v))
	if 4*len(v) > d.read {
		d.bad = append(d.bad, fmt.Sprintf("download of %d floats, readback of %d bytes", len(v), d.read))
	}
	return nil
}
func (d *layoutDevice) Zero(p Ptr, floats int) error { d.span("zero", p, floats); return nil }
func (d *layoutDevice) Copy(dst, src Ptr, floats int) error {
	d.span("copy to", dst, floats)
	d.span("copy from", src, floats)
	return nil
}

func (d *layoutDevice) Examples(x []float32, labels []int32, lo, hi int, room Batch) (Batch, error) {
	d.span("examples", room.X, (hi-lo)*room.InputSize)
	d.span("labels", room.Labels, (hi-lo)*room.LabelsPerExample)
	return room, nil
}

// launch checks a kernel's pointers: each must be a place in the
// reservation (its extent is the kernel's business), or 0 for "none".
func (d *layoutDevice) launch(name string, args []any) error {
	d.kernels[name]++
	for i, a := range args {
		switch v := a.(type) {
		case Ptr:
			if v != 0 {
				d.span(fmt.Sprintf("%s argument %d", name, i), v, 1)
			} else if name != "embedding_forward" {
				d.bad = append(d.bad, fmt.Sprintf("%s argument %d is no buffer", name, i))
			}
		case int, uint32, uint64, float32:
		default:
			d.bad = append(d.bad, fmt.Sprintf("%s argument %d has type %T, which no backend passes", name, i, a))
		}
	}
	return nil
}

func (d *layoutDevice) Launch(name string, total int, args ...any) error { return d.launch(name, args) }
func (d *layoutDevice) LaunchRows(name string, rows int, args ...any) error {
	return d.launch(name, args)
}
func (d *layoutDevice) LaunchBlocks(name string, blocks int, args ...any) error {
	return d.launch(name, args)
}

// Gemm checks each matrix's last value, in every batch.
func (d *layoutDevice) Gemm(transA, transB bool, m, n, k int, alpha float32, a Ptr, lda, strideA int, b Ptr, ldb, strideB int, beta float32, c Ptr, ldc, strideC, batch int) error {
	d.kernels["gemm"]++
	extent := func(rows, cols, ld int, trans bool) int {
		if trans {
			rows, cols = cols, rows
		}
		return (rows-1)*ld + cols
	}
	last := batch - 1
	d.span("gemm A", Off(a, last*strideA), extent(m, k, lda, transA))
	d.span("gemm B", Off(b, last*strideB), extent(k, n, ldb, transB))
	d.span("gemm C", Off(c, last*strideC), extent(m, n, ldc, false))
	return nil
}

func (d *layoutDevice) AddLosses(rowLoss, rowHit Ptr, rows int, sums LossSums) error {
	d.span("row losses", rowLoss, rows)
	d.span("row hits", rowHit, rows)
	d.span("loss sums", sums.Loss, sums.Rows)
	d.span("hit sums", sums.Hits, sums.Rows)
	if sums.Rows < max(rows, 2) {
		d.bad = append(d.bad, fmt.Sprintf("%d rows into sums of %d", rows, sums.Rows))
	}
	return nil
}

func (d *layoutDevice) Losses(sums LossSums) (float64, int, error) { return 0, 0, nil }

// Every layer type and preset lays out inside its reservation, and
// Gradient, Steps (SGD and AdamW, clipped) and Forward touch nothing
// outside it.
func TestExecutorStaysInsideItsMemory(t *testing.T) {
	specs := map[string]nn.ModelSpec{}
	for name, spec := range nntest.LayerModels {
		specs[name] = spec
	}
	for _, preset := range []string{"mnist-mlp", "mnist-cnn", "charlm-tiny"} {
		spec, err := nn.Preset(preset)
		if err != nil {
			t.Fatal(err)
		}
		specs[preset] = spec
	}
	kernels := map[string]int{}
	for name, spec := range specs {
		m, err := nn.NewModel(spec)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		dev := &layoutDevice{t: t, kernels: kernels}
		e := New(dev, "test")
		const batch = 3
		if err := e.Prepare(m, batch); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		dev.buffers = e.net.buffers
		if !slices.IsSorted(dev.buffers) || dev.buffers[0] != dev.base+GuardBytes || dev.buffers[len(dev.buffers)-1] != dev.base+Ptr(dev.bytes) {
			t.Fatalf("%s: buffers at %v in a reservation of %d bytes at %d", name, dev.buffers, dev.bytes, dev.base)
		}
		params, x, labels := nntest.RandomBatch(m, 2*batch, 1)
		grad := make([]float32, m.NumParams)
		if _, _, err := e.Gradient(params, x[:batch*m.InputSize], labels[:batch*m.LabelsPerExample], grad); err != nil {
			t.Fatalf("%s: Gradient: %v", name, err)
		}
		for _, inner := range []protocol.InnerOptimizer{
			{Type: protocol.InnerSGD, LR: 0.1, ClipNorm: 1},
			{Type: protocol.InnerAdamW, LR: 0.01, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8},
		} {
			plan := worker.InnerSteps{BatchSize: batch, Steps: 2, Inner: inner, UpdateKind: protocol.UpdateDelta}
			if _, _, err := e.Steps(1, params, x, labels, plan, grad); err != nil {
				t.Fatalf("%s: Steps: %v", name, err)
			}
		}
		out := make([]float32, batch*m.NumClasses*m.LabelsPerExample)
		if err := e.Forward(params, x[:batch*m.InputSize], out); err != nil {
			t.Fatalf("%s: Forward: %v", name, err)
		}
		for _, b := range dev.bad {
			t.Errorf("%s: %s", name, b)
		}
	}
	// Every layer type's kernels ran somewhere above.
	for _, k := range []string{"add_bias", "im2row", "row2im", "maxpool_backward", "embedding_backward_gather", "embedding_backward_scatter",
		"layernorm_backward", "attention_softmax_backward", "gelu_backward", "dropout_apply", "add", "adamw_step", "sgd_step", "clip_scale", "gemm"} {
		if kernels[k] == 0 {
			t.Errorf("no model launched %s", k)
		}
	}
}

// A layer type no backend has is refused at Prepare, naming the backend.
func TestUnknownLayerTypeIsAnError(t *testing.T) {
	m, err := nn.NewModel(nntest.LayerModels["relu"])
	if err != nil {
		t.Fatal(err)
	}
	saved := layerTypes[nn.TypeReLU]
	delete(layerTypes, nn.TypeReLU)
	defer func() { layerTypes[nn.TypeReLU] = saved }()
	err = New(&layoutDevice{t: t, kernels: map[string]int{}}, "test").Prepare(m, 2)
	if err == nil || !strings.Contains(err.Error(), `the test backend has no layer type "relu"`) {
		t.Errorf("Prepare of a relu without its layer type: %v", err)
	}
}

// Every nn layer type has its file here.
func TestEveryLayerTypeIsRegistered(t *testing.T) {
	for _, typ := range []string{nn.TypeDense, nn.TypeReLU, nn.TypeConv2D, nn.TypeMaxPool2D, nn.TypeFlatten, nn.TypeEmbedding,
		nn.TypeLayerNorm, nn.TypeAttention, nn.TypeGELU, nn.TypeResidual, nn.TypeDropout} {
		if _, ok := layerTypes[typ]; !ok {
			t.Errorf("layer type %q has no GPU implementation", typ)
		}
	}
}
