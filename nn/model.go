package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Size limits keep index arithmetic (including int32 argmax indices) far from
// overflow and turn absurd specs into clear errors instead of huge allocations.
const (
	maxParams     = 1 << 30
	maxActivation = 1 << 28 // floats per example in one activation tensor
)

// ParamTensor is one named tensor inside the flat parameter vector. Tensors
// are row-major and use PyTorch's orders, so they can be copied into a
// torch.nn model as they are: dense weight [units, inputs] (y = x·Wᵀ + b),
// conv2d weight [filters, channels, kernel, kernel], biases [units] or
// [filters].
type ParamTensor struct {
	Name   string `json:"name" msgpack:"name"` // e.g. "0.dense.weight", "0.dense.bias", "3.conv2d.weight"
	Shape  []int  `json:"shape" msgpack:"shape"`
	Offset int    `json:"offset" msgpack:"offset"`
	Size   int    `json:"size" msgpack:"size"`
}

// Model is a validated architecture with the layout of its flat parameter
// vector. It holds no parameters itself and is safe for concurrent use; all
// mutable state lives in Workspaces and optimizers. Spec is a copy of the
// spec given to NewModel, as given (defaults are not filled in).
type Model struct {
	Spec       ModelSpec
	Layout     []ParamTensor
	NumParams  int
	InputSize  int // channels*height*width
	NumClasses int // output size of the last layer

	layers []layer
}

type layerKind uint8

const (
	kindDense layerKind = iota
	kindReLU
	kindConv
	kindPool
	kindFlatten
)

// shape is an activation shape per example: spatial [c,h,w] or a flat vector
// of c values (h = w = 1).
type shape struct {
	c, h, w int
	flat    bool
}

func (s shape) size() int { return s.c * s.h * s.w }

func (s shape) String() string {
	if s.flat {
		return fmt.Sprintf("[%d]", s.c)
	}
	return fmt.Sprintf("[%d,%d,%d]", s.c, s.h, s.w)
}

// layer is the resolved form of a LayerSpec: defaults applied, shapes and
// parameter offsets known.
type layer struct {
	kind            layerKind
	in, out         shape
	inSize, outSize int

	// Parameter tensors (dense and conv2d): weight is [out, in] for dense and
	// [filters, channels, k, k] for conv2d, i.e. rows are output units.
	wOff, wLen, bOff, bLen int
	fanIn                  int

	// conv2d and maxpool2d.
	k, stride, pad int
	// conv2d im2col matrix: colRows = channels*k*k, colCols = outH*outW.
	colRows, colCols int
	rowMode          bool // conv2d: see rowModeMinR

	// needDIn is false when no layer before this one has parameters, so the
	// gradient with respect to this layer's input would be thrown away.
	needDIn bool
	// fusedReLU (dense, conv2d): the next layer is a relu, applied in place
	// while the output is still in cache; the pre-activation is never stored.
	fusedReLU bool
}

// NewModel validates spec and builds the model.
//
// dense accepts any input shape and treats it as flat; flatten is a reshape
// only. The last layer must produce a flat vector of at least 2 class scores.
func NewModel(spec ModelSpec) (*Model, error) {
	spec = spec.Clone()
	if len(spec.Input) != 3 {
		return nil, fmt.Errorf("input: want [channels, height, width], got %v (for flat features use [1, 1, N])", spec.Input)
	}
	for i, d := range spec.Input {
		if d < 1 {
			return nil, fmt.Errorf("input: dimension %d is %d; all of [channels, height, width] must be >= 1", i, d)
		}
	}
	cur := shape{c: spec.Input[0], h: spec.Input[1], w: spec.Input[2]}
	if cur.c > maxActivation || cur.h > maxActivation || cur.w > maxActivation ||
		int64(cur.c)*int64(cur.h)*int64(cur.w) > maxActivation {
		return nil, fmt.Errorf("input: %v is too large (at most %d values per example)", spec.Input, maxActivation)
	}
	if len(spec.Layers) == 0 {
		return nil, fmt.Errorf("layers: empty; add at least a dense layer whose units is the number of classes")
	}

	m := &Model{Spec: spec, InputSize: cur.size()}
	offset := 0
	addTensor := func(name string, shp []int) (int, int) {
		n := 1
		for _, d := range shp {
			n *= d
		}
		m.Layout = append(m.Layout, ParamTensor{Name: name, Shape: shp, Offset: offset, Size: n})
		offset += n
		return offset - n, n
	}
	seenParams := false
	for i, ls := range spec.Layers {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("layer %d (%s): %s", i, ls.Type, fmt.Sprintf(format, args...))
		}
		if err := checkFields(ls); err != nil {
			return nil, fail("%v", err)
		}
		l := layer{in: cur, inSize: cur.size(), needDIn: seenParams}
		switch ls.Type {
		case TypeDense:
			l.kind = kindDense
			if ls.Units < 1 {
				return nil, fail("units must be >= 1, got %d (set units to the layer's output size)", ls.Units)
			}
			if int64(ls.Units)*int64(l.inSize) > maxParams-int64(offset) || ls.Units > maxActivation {
				return nil, fail("%d units on an input of %d values is too large (at most %d parameters in a model)", ls.Units, l.inSize, maxParams)
			}
			l.out = shape{c: ls.Units, h: 1, w: 1, flat: true}
			l.fanIn = l.inSize
			l.wOff, l.wLen = addTensor(fmt.Sprintf("%d.dense.weight", i), []int{ls.Units, l.inSize})
			l.bOff, l.bLen = addTensor(fmt.Sprintf("%d.dense.bias", i), []int{ls.Units})
			seenParams = true
		case TypeReLU:
			l.kind = kindReLU
			l.out = cur
		case TypeFlatten:
			l.kind = kindFlatten
			l.out = shape{c: cur.size(), h: 1, w: 1, flat: true}
		case TypeConv2D:
			l.kind = kindConv
			if cur.flat {
				return nil, fail("needs a [channels,height,width] input but gets a flat vector %v; put conv2d layers before flatten and dense", cur)
			}
			if ls.Filters < 1 {
				return nil, fail("filters must be >= 1, got %d (set filters to the number of output channels)", ls.Filters)
			}
			if ls.Kernel < 1 {
				return nil, fail("kernel must be >= 1, got %d (set kernel to the square kernel size, e.g. 3)", ls.Kernel)
			}
			l.k, l.stride, l.pad = ls.Kernel, ls.Stride, ls.Padding
			if l.stride == 0 {
				l.stride = 1
			}
			ph, pw := cur.h+2*l.pad, cur.w+2*l.pad
			if l.k > ph || l.k > pw {
				return nil, fail("kernel %d larger than padded input %dx%d", l.k, ph, pw)
			}
			oh, ow := (ph-l.k)/l.stride+1, (pw-l.k)/l.stride+1
			if ls.Filters > maxActivation || l.k > maxActivation ||
				int64(ls.Filters)*int64(oh)*int64(ow) > maxActivation ||
				int64(cur.c)*int64(l.k)*int64(l.k)*int64(oh)*int64(ow) > maxActivation {
				return nil, fail("%d filters of %dx%d on %v is too large (at most %d values per example in one tensor)", ls.Filters, l.k, l.k, cur, maxActivation)
			}
			l.out = shape{c: ls.Filters, h: oh, w: ow}
			l.colRows, l.colCols = cur.c*l.k*l.k, oh*ow
			l.rowMode = l.colRows >= rowModeMinR
			l.fanIn = l.colRows
			if int64(ls.Filters)*int64(l.colRows) > maxParams-int64(offset) {
				return nil, fail("too many parameters (at most %d in a model)", maxParams)
			}
			l.wOff, l.wLen = addTensor(fmt.Sprintf("%d.conv2d.weight", i), []int{ls.Filters, cur.c, l.k, l.k})
			l.bOff, l.bLen = addTensor(fmt.Sprintf("%d.conv2d.bias", i), []int{ls.Filters})
			seenParams = true
		case TypeMaxPool2D:
			l.kind = kindPool
			if cur.flat {
				return nil, fail("needs a [channels,height,width] input but gets a flat vector %v; put maxpool2d layers before flatten and dense", cur)
			}
			l.k, l.stride = ls.Kernel, ls.Stride
			if l.k == 0 {
				l.k = 2
			}
			if l.stride == 0 {
				l.stride = l.k
			}
			if l.k > cur.h || l.k > cur.w {
				return nil, fail("window %d larger than input %dx%d (use a smaller kernel or drop this pooling layer)", l.k, cur.h, cur.w)
			}
			l.out = shape{c: cur.c, h: (cur.h-l.k)/l.stride + 1, w: (cur.w-l.k)/l.stride + 1}
		default:
			return nil, fail("unknown layer type %q (want dense, relu, conv2d, maxpool2d or flatten)", ls.Type)
		}
		l.outSize = l.out.size()
		m.layers = append(m.layers, l)
		cur = l.out
	}
	for i := range m.layers[:len(m.layers)-1] {
		k := m.layers[i].kind
		m.layers[i].fusedReLU = (k == kindDense || k == kindConv) && m.layers[i+1].kind == kindReLU
	}
	last := len(spec.Layers) - 1
	if !cur.flat {
		return nil, fmt.Errorf("layer %d (%s): the model's output is %v but must be a flat vector of class scores; end the model with a dense layer whose units is the number of classes", last, spec.Layers[last].Type, cur)
	}
	if cur.c < 2 {
		return nil, fmt.Errorf("layer %d (%s): the model's output has %d class score(s) but a classifier needs at least 2; set the last dense layer's units to the number of classes", last, spec.Layers[last].Type, cur.c)
	}
	if offset == 0 {
		return nil, fmt.Errorf("layers: no layer has parameters, so there is nothing to train; add a dense layer")
	}
	m.NumParams = offset
	m.NumClasses = cur.c
	return m, nil
}

// checkFields rejects negative values and fields a layer type does not use,
// which are almost always typos in a hand-written spec.
func checkFields(ls LayerSpec) error {
	type field struct {
		name string
		v    int
	}
	fields := []field{{"units", ls.Units}, {"filters", ls.Filters}, {"kernel", ls.Kernel}, {"stride", ls.Stride}, {"padding", ls.Padding}}
	var used map[string]bool
	switch ls.Type {
	case TypeDense:
		used = map[string]bool{"units": true}
	case TypeConv2D:
		used = map[string]bool{"filters": true, "kernel": true, "stride": true, "padding": true}
	case TypeMaxPool2D:
		used = map[string]bool{"kernel": true, "stride": true}
	case TypeReLU, TypeFlatten:
		used = map[string]bool{}
	default:
		return nil // the caller reports the unknown type
	}
	for _, f := range fields {
		if f.v < 0 {
			return fmt.Errorf("%s must not be negative, got %d", f.name, f.v)
		}
		if f.v != 0 && !used[f.name] {
			return fmt.Errorf("%s is not used by %s layers (remove it)", f.name, ls.Type)
		}
	}
	return nil
}

// Tensor returns the named tensor's slice of a flat vector laid out like
// params (parameters, gradients or updates), and false if there is no such
// tensor.
func (m *Model) Tensor(v []float32, name string) ([]float32, bool) {
	for _, t := range m.Layout {
		if t.Name == name {
			return v[t.Offset : t.Offset+t.Size], true
		}
	}
	return nil, false
}

// initStream distinguishes Init's PCG stream from any other use of the seed.
const initStream = 0x63726f7764747261 // "crowdtra"

// Init fills params (len NumParams) deterministically from seed: He-uniform
// weights (U(-a, a) with a = sqrt(6/fanIn)) and zero biases.
//
// He-uniform rather than He-normal because it needs only exactly rounded
// float64 operations (Float64, one multiply, Sqrt), so the same seed gives a
// bit-identical vector on every platform, wasm included.
func (m *Model) Init(params []float32, seed int64) {
	if len(params) != m.NumParams {
		panic(fmt.Sprintf("nn: Init: len(params) = %d, want NumParams = %d", len(params), m.NumParams))
	}
	r := rand.New(rand.NewPCG(uint64(seed), initStream))
	for _, l := range m.layers {
		if l.wLen == 0 {
			continue
		}
		a := math.Sqrt(6 / float64(l.fanIn))
		w := params[l.wOff : l.wOff+l.wLen]
		for i := range w {
			u := 2*r.Float64() - 1 // exact: Float64 is a multiple of 2^-53
			w[i] = float32(u * a)
		}
		clear(params[l.bOff : l.bOff+l.bLen])
	}
}
