package nn

// LayerPlan is a read-only description of one resolved layer: defaults
// applied, shapes and parameter offsets known. Other backends (the GPU
// worker) read it instead of re-deriving the shapes from the spec.
type LayerPlan struct {
	Type string // TypeDense, TypeReLU, TypeConv2D, TypeMaxPool2D or TypeFlatten
	// In and Out are the per-example activation shapes [channels, height,
	// width]; a flat vector of n values is [n, 1, 1].
	In, Out         [3]int
	InSize, OutSize int // values per example
	// Weight and bias tensors in the flat parameter vector (dense and
	// conv2d; zero otherwise). Dense weights are [Out, In] and conv2d
	// weights [filters, channels, Kernel, Kernel], row-major.
	WeightOffset, WeightSize int
	BiasOffset, BiasSize     int
	// conv2d and maxpool2d: square window, stride and zero padding.
	Kernel, Stride, Padding int
}

var kindType = [...]string{
	kindDense:   TypeDense,
	kindReLU:    TypeReLU,
	kindConv:    TypeConv2D,
	kindPool:    TypeMaxPool2D,
	kindFlatten: TypeFlatten,
}

// Plan returns the model's resolved layers, in order. The slice is a fresh
// copy on each call.
func (m *Model) Plan() []LayerPlan {
	p := make([]LayerPlan, len(m.layers))
	for i, l := range m.layers {
		p[i] = LayerPlan{
			Type:         kindType[l.kind],
			In:           [3]int{l.in.c, l.in.h, l.in.w},
			Out:          [3]int{l.out.c, l.out.h, l.out.w},
			InSize:       l.inSize,
			OutSize:      l.outSize,
			WeightOffset: l.wOff, WeightSize: l.wLen,
			BiasOffset: l.bOff, BiasSize: l.bLen,
			Kernel: l.k, Stride: l.stride, Padding: l.pad,
		}
	}
	return p
}
