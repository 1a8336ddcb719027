package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
)

// Layer is one resolved layer of a model: its spec checked against the
// shape it receives, defaults applied, parameter tensors placed in the flat
// vector. Each layer type lives in its own file and registers itself
// (registerLayer) with the spec fields it reads and a resolve function; the
// model, the workspace and the plan only go through this interface.
//
// A layer works on a batch of n examples: in holds n*inSize values and out
// n*outSize, row-major per example. Layers keep whatever they need between
// forward and backward (patch matrices, masks, probabilities) in their
// state, allocated once per Workspace by newState, so a training step
// allocates nothing.
type Layer interface {
	// base returns the fields every layer has.
	base() *layerBase
	// newState allocates the layer's buffers for batches of up to
	// maxBatch examples (nil if it needs none) and asks b for shared
	// scratch space.
	newState(b *wsBuilder, maxBatch int) any
	// forward computes out from in. With a fused relu (layerBase.fusedReLU),
	// out is the relu's output.
	forward(c *runCtx, st any, params, in, out []float32, n int)
	// backward writes the layer's parameter gradients into grad (overwriting
	// them, except for tensors the model clears first, see
	// layerBase.accumulate) and, if dIn is non-nil, the gradient with
	// respect to in. out is the forward output (the relu's, if fused).
	backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int)
	// describe fills the type-specific fields of the layer's plan.
	describe(p *LayerPlan)
}

// layerBase holds what every resolved layer has.
type layerBase struct {
	typ             string
	index           int // position in a depth-first walk of the model's layers
	in, out         shape
	inSize, outSize int
	// tensors are the layer's own parameter tensors, in layout order.
	tensors []ParamTensor
	// needDIn is false when no layer before this one has parameters, so the
	// gradient with respect to this layer's input would be thrown away.
	needDIn bool
	// fusedReLU: the next layer is a relu that this layer applies in place while
	// the output is still in cache; the pre-activation is never stored.
	fusedReLU bool
	// alias: the output is the input, reshaped (flatten).
	alias bool
	// accumulate lists the parameter spans this layer's backward adds to
	// instead of overwriting (scatter-adds, tied weights); the model clears
	// them before each backward pass.
	accumulate []span
}

func (b *layerBase) base() *layerBase { return b }

type span struct{ off, len int }

// shapeKind tells how a per-example activation is laid out.
type shapeKind uint8

const (
	shapeImage  shapeKind = iota // [c,h,w], channel-major
	shapeFlat                    // [c] (h = w = 1)
	shapeTokens                  // [t] token ids stored as float32
	shapeSeq                     // [t,d]: t positions of d values
)

// shape is an activation shape per example. Images use c, h, w; a flat
// vector of c values has h = w = 1; token sequences use t; sequences of
// vectors t and d.
type shape struct {
	kind    shapeKind
	c, h, w int
	t, d    int
}

func imageShape(c, h, w int) shape { return shape{kind: shapeImage, c: c, h: h, w: w} }
func flatShape(n int) shape        { return shape{kind: shapeFlat, c: n, h: 1, w: 1} }
func tokenShape(t int) shape       { return shape{kind: shapeTokens, t: t} }
func seqShape(t, d int) shape      { return shape{kind: shapeSeq, t: t, d: d} }

func (s shape) size() int {
	switch s.kind {
	case shapeTokens:
		return s.t
	case shapeSeq:
		return s.t * s.d
	}
	return s.c * s.h * s.w
}

// dims returns the shape as a list: [c,h,w], [n], [t] or [t,d].
func (s shape) dims() []int {
	switch s.kind {
	case shapeFlat:
		return []int{s.c}
	case shapeTokens:
		return []int{s.t}
	case shapeSeq:
		return []int{s.t, s.d}
	}
	return []int{s.c, s.h, s.w}
}

// dims3 is the shape in LayerPlan's three slots: [c,h,w], [n,1,1], [t,1,1]
// or [t,d,1].
func (s shape) dims3() [3]int {
	switch s.kind {
	case shapeTokens:
		return [3]int{s.t, 1, 1}
	case shapeSeq:
		return [3]int{s.t, s.d, 1}
	}
	return [3]int{s.c, s.h, s.w}
}

func (s shape) String() string {
	switch s.kind {
	case shapeFlat:
		return fmt.Sprintf("[%d]", s.c)
	case shapeTokens:
		return fmt.Sprintf("[%d] (token ids)", s.t)
	case shapeSeq:
		return fmt.Sprintf("[%d,%d]", s.t, s.d)
	}
	return fmt.Sprintf("[%d,%d,%d]", s.c, s.h, s.w)
}

// rows and cols view an activation as rows of vectors: a sequence [t,d] is t
// rows of d, anything else one row of all its values. Per-position layers
// (dense on a sequence, layernorm, the elementwise ones) work on rows.
func (s shape) rows() int {
	if s.kind == shapeSeq {
		return s.t
	}
	return 1
}

func (s shape) cols() int { return s.size() / s.rows() }

// layerType is a registered layer type.
type layerType struct {
	// fields are the LayerSpec fields (YAML keys) the type reads; any other
	// field set in a spec is an error.
	fields []string
	// resolve checks the spec against the input shape and builds the layer,
	// placing its tensors with r.
	resolve func(r *resolver, ls LayerSpec, in shape) (Layer, error)
}

var registry = map[string]*layerType{}

func registerLayer(name string, fields []string, resolve func(r *resolver, ls LayerSpec, in shape) (Layer, error)) {
	if _, dup := registry[name]; dup {
		panic("nn: layer type " + name + " registered twice")
	}
	registry[name] = &layerType{fields: fields, resolve: resolve}
}

// LayerTypes returns the registered layer types, sorted.
func LayerTypes() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// tensorInit says how Init fills a tensor.
type tensorInit struct {
	off, size int
	kind      initKind
	a         float64 // uniform: U(-a, a)
}

type initKind uint8

const (
	initZero    initKind = iota
	initOne              // layernorm gains
	initUniform          // U(-a, a)
)

// resolver builds the layers of a model in depth-first order.
type resolver struct {
	layout []ParamTensor
	inits  []tensorInit
	offset int
	// seenParams: some layer already resolved has parameters.
	seenParams bool
	index      int // next depth-first layer index
	// embedding is the first embedding layer, whose weight a tied dense
	// layer uses.
	embedding *embeddingLayer
	// prefix is the tensor name prefix of the layer being resolved
	// ("3.dense.", "2.residual.1.attention.").
	prefix string
}

// tensor places a parameter tensor named prefix+name with the given shape
// and initialisation and returns its offset and size.
func (r *resolver) tensor(l *layerBase, name string, shp []int, kind initKind, a float64) (off, size int, err error) {
	n := int64(1)
	for _, d := range shp {
		if d > maxParams {
			n = maxParams + 1
			break
		}
		n *= int64(d)
		if n > maxParams {
			break
		}
	}
	if n > int64(maxParams-r.offset) {
		return 0, 0, fmt.Errorf("too many parameters: tensor %s %v would take the model past %d", name, shp, maxParams)
	}
	pt := ParamTensor{Name: r.prefix + name, Shape: append([]int(nil), shp...), Offset: r.offset, Size: int(n)}
	r.layout = append(r.layout, pt)
	l.tensors = append(l.tensors, pt)
	r.inits = append(r.inits, tensorInit{off: r.offset, size: int(n), kind: kind, a: a})
	r.offset += int(n)
	r.seenParams = true
	return pt.Offset, pt.Size, nil
}

// heUniform is Init's bound for weights with this fan-in that feed a ReLU
// (image and feature models).
func heUniform(fanIn int) float64 { return math.Sqrt(6 / float64(fanIn)) }

// linearUniform is Init's bound for the weights of a sequence model's
// projections: PyTorch's nn.Linear default (Kaiming-uniform with a = √5),
// 1/√fanIn, a sixth of He's variance. A transformer's blocks then add
// little to the residual stream at first, and the token embedding's
// signal (embedInit) carries through them.
func linearUniform(fanIn int) float64 { return 1 / math.Sqrt(float64(fanIn)) }

// setInit changes the initialisation of the tensor placed at off.
func (r *resolver) setInit(off int, kind initKind, a float64) {
	for i := range r.inits {
		if r.inits[i].off == off {
			r.inits[i].kind, r.inits[i].a = kind, a
		}
	}
}

// checkFields rejects negative values and fields a layer type does not use,
// which are almost always typos in a hand-written spec.
func checkFields(ls LayerSpec, used []string) error {
	type field struct {
		name string
		neg  bool
		set  bool
		val  any
	}
	fields := []field{
		{"units", ls.Units < 0, ls.Units != 0, ls.Units},
		{"filters", ls.Filters < 0, ls.Filters != 0, ls.Filters},
		{"kernel", ls.Kernel < 0, ls.Kernel != 0, ls.Kernel},
		{"stride", ls.Stride < 0, ls.Stride != 0, ls.Stride},
		{"padding", ls.Padding < 0, ls.Padding != 0, ls.Padding},
		{"vocab", ls.Vocab < 0, ls.Vocab != 0, ls.Vocab},
		{"positions", ls.Positions < 0, ls.Positions != 0, ls.Positions},
		{"heads", ls.Heads < 0, ls.Heads != 0, ls.Heads},
		{"causal", false, ls.Causal, ls.Causal},
		{"eps", ls.Eps < 0, ls.Eps != 0, ls.Eps},
		{"rate", ls.Rate < 0, ls.Rate != 0, ls.Rate},
		{"tied", false, ls.Tied, ls.Tied},
		{"layers", false, ls.Layers != nil, len(ls.Layers)},
	}
	for _, f := range fields {
		if f.neg {
			return fmt.Errorf("%s must not be negative, got %v", f.name, f.val)
		}
		if f.set && !contains(used, f.name) {
			return fmt.Errorf("%s is not used by %s layers (remove it)", f.name, ls.Type)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// initTensors fills params as Init describes, drawing from r in layout
// order.
func initTensors(inits []tensorInit, params []float32, r *rand.Rand) {
	for _, ti := range inits {
		v := params[ti.off : ti.off+ti.size]
		switch ti.kind {
		case initZero:
			clear(v)
		case initOne:
			fill(v, 1)
		case initUniform:
			for i := range v {
				u := 2*r.Float64() - 1 // exact: Float64 is a multiple of 2^-53
				v[i] = float32(u * ti.a)
			}
		}
	}
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
