package nn

import (
	"fmt"
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
	Spec      ModelSpec
	Layout    []ParamTensor
	NumParams int
	// InputSize is the number of floats per example in x: channels*height*
	// width, or t token ids.
	InputSize int
	// NumClasses is the output size of the last layer per label: the
	// number of classes, or the vocabulary of a language model.
	NumClasses int
	// LabelsPerExample is 1 for a classifier and t for a sequence model
	// whose last layer outputs [t, vocab] (one label per position).
	LabelsPerExample int

	top    *stack
	inits  []tensorInit
	clears []span // parameter gradients that layers add to; zeroed before backward
}

// NewModel validates spec and builds the model.
//
// dense accepts any image or flat input and treats it as flat, and applies
// per position on a sequence; flatten is a reshape only. The last layer must
// produce a flat vector of at least 2 class scores, or a sequence [t, vocab]
// of scores per position.
func NewModel(spec ModelSpec) (*Model, error) {
	spec = spec.Clone()
	var cur shape
	switch len(spec.Input) {
	case 3:
		cur = imageShape(spec.Input[0], spec.Input[1], spec.Input[2])
	case 1:
		cur = tokenShape(spec.Input[0])
	default:
		return nil, fmt.Errorf("input: want [channels, height, width] or [t] for a sequence of t token ids, got %v (for flat features use [1, 1, N])", spec.Input)
	}
	for i, d := range spec.Input {
		if d < 1 {
			return nil, fmt.Errorf("input: dimension %d is %d; all of %s must be >= 1", i, d, map[bool]string{true: "[channels, height, width]", false: "[t]"}[len(spec.Input) == 3])
		}
		if d > maxActivation {
			return nil, fmt.Errorf("input: %v is too large (at most %d values per example)", spec.Input, maxActivation)
		}
	}
	if cur.kind == shapeImage && int64(cur.c)*int64(cur.h)*int64(cur.w) > maxActivation {
		return nil, fmt.Errorf("input: %v is too large (at most %d values per example)", spec.Input, maxActivation)
	}
	if len(spec.Layers) == 0 {
		return nil, fmt.Errorf("layers: empty; add at least a dense layer whose units is the number of classes")
	}

	m := &Model{Spec: spec, InputSize: cur.size()}
	r := &resolver{}
	top, err := r.resolveStack("", spec.Layers, cur)
	if err != nil {
		return nil, err
	}
	m.top = top
	m.Layout, m.inits = r.layout, r.inits
	top.walk(func(l Layer) { m.clears = append(m.clears, l.base().accumulate...) })
	last := len(spec.Layers) - 1
	out := top.out
	switch out.kind {
	case shapeFlat:
		m.NumClasses, m.LabelsPerExample = out.c, 1
	case shapeSeq:
		m.NumClasses, m.LabelsPerExample = out.d, out.t
	default:
		return nil, fmt.Errorf("layer %d (%s): the model's output is %v but must be a flat vector of class scores (or a sequence [t, vocab] of scores per position); end the model with a dense layer whose units is the number of classes", last, spec.Layers[last].Type, out)
	}
	if m.NumClasses < 2 {
		return nil, fmt.Errorf("layer %d (%s): the model's output has %d class score(s) but a classifier needs at least 2; set the last dense layer's units to the number of classes", last, spec.Layers[last].Type, m.NumClasses)
	}
	if r.offset == 0 {
		return nil, fmt.Errorf("layers: no layer has parameters, so there is nothing to train; add a dense layer")
	}
	m.NumParams = r.offset
	return m, nil
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

// Init fills params (len NumParams) deterministically from seed, with
// PyTorch's default scales where the layer has a PyTorch counterpart:
// He-uniform weights (U(-a, a) with a = sqrt(6/fanIn)) for conv2d and for
// dense layers on a flat input (they feed ReLUs); a = 1/sqrt(fanIn) for
// dense layers on a sequence and attention's out_proj (nn.Linear's
// default), Xavier-uniform for attention's in_proj_weight; a = sqrt(3)
// (standard deviation 1, nn.Embedding's) for embedding tables, except
// sqrt(3)*0.02 for a token embedding that is also the output layer (tied);
// ones for layernorm gains and zero biases. Tensors draw in layout order.
//
// Uniform rather than normal because it needs only exactly rounded float64
// operations (Float64, one multiply, Sqrt), so the same seed gives a
// bit-identical vector on every platform, wasm included.
func (m *Model) Init(params []float32, seed int64) {
	if len(params) != m.NumParams {
		panic(fmt.Sprintf("nn: Init: len(params) = %d, want NumParams = %d", len(params), m.NumParams))
	}
	r := rand.New(rand.NewPCG(uint64(seed), initStream))
	initTensors(m.inits, params, r)
}
