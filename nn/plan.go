package nn

// LayerPlan is a read-only description of one resolved layer: defaults
// applied, shapes and parameter offsets known. Other backends (the GPU
// worker) read it instead of re-deriving the shapes from the spec.
type LayerPlan struct {
	Type string // a layer type: TypeDense, TypeConv2D, TypeAttention, ...
	// Index is the layer's position in a depth-first walk of the model
	// (a residual block, then its body, then the next layer); dropout masks
	// depend on it (DropoutKeep).
	Index int
	// In and Out are the per-example activation shapes in three slots:
	// [channels, height, width] for images, [n, 1, 1] for a flat vector of
	// n values, [t, 1, 1] for t token ids and [t, d, 1] for a sequence of t
	// vectors of d values. InShape and OutShape give the same without the
	// padding ([c,h,w], [n], [t], [t,d]); InKind and OutKind say which.
	In, Out           [3]int
	InShape, OutShape []int
	InKind, OutKind   string // "image", "flat", "tokens" or "sequence"
	InSize, OutSize   int    // values per example
	// Weight and bias tensors in the flat parameter vector (zero where the
	// layer has none). Dense weights are [Out, In] (on a sequence, per
	// position: [units, d]), conv2d weights [filters, channels, Kernel,
	// Kernel], row-major; a tied dense layer's weight is the embedding's.
	// For embedding, Weight is the token table [vocab, units]; for
	// layernorm, the gain and shift [d]; for attention, in_proj_weight
	// [3d, d] and in_proj_bias [3d].
	WeightOffset, WeightSize int
	BiasOffset, BiasSize     int
	// conv2d and maxpool2d: square window, stride and zero padding.
	Kernel, Stride, Padding int
	// dense: output units per position (the vocab when Tied); embedding:
	// the width.
	Units int
	// dense on a sequence: the weight is the first embedding's (no tensor
	// of its own, its gradient is added to the embedding's).
	Tied bool
	// embedding: vocabulary, rows of the position table and where it is
	// (PositionSize 0: no position table).
	Vocab, Positions             int
	PositionOffset, PositionSize int
	// layernorm: added to the variance.
	Eps float64
	// attention: heads and the causal mask; out_proj.weight [d, d] and
	// out_proj.bias [d].
	Heads                          int
	Causal                         bool
	OutWeightOffset, OutWeightSize int
	OutBiasOffset, OutBiasSize     int
	// dropout: the probability of dropping a value.
	Rate float64
	// residual: the body's layers (out = in + body(in)).
	Body []LayerPlan
	// Tensors are the layer's own parameter tensors, in layout order (for
	// residual, none: its body's layers have them).
	Tensors []ParamTensor
}

var kindNames = [...]string{shapeImage: "image", shapeFlat: "flat", shapeTokens: "tokens", shapeSeq: "sequence"}

// Plan returns the model's resolved layers, in order. The slice is a fresh
// copy on each call.
func (m *Model) Plan() []LayerPlan { return m.top.plan() }

func (s *stack) plan() []LayerPlan {
	p := make([]LayerPlan, len(s.layers))
	for i, l := range s.layers {
		b := l.base()
		p[i] = LayerPlan{
			Type:     b.typ,
			Index:    b.index,
			In:       b.in.dims3(),
			Out:      b.out.dims3(),
			InShape:  b.in.dims(),
			OutShape: b.out.dims(),
			InKind:   kindNames[b.in.kind],
			OutKind:  kindNames[b.out.kind],
			InSize:   b.inSize,
			OutSize:  b.outSize,
		}
		for _, t := range b.tensors {
			t.Shape = append([]int(nil), t.Shape...)
			p[i].Tensors = append(p[i].Tensors, t)
		}
		l.describe(&p[i])
	}
	return p
}
