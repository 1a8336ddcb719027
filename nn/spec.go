package nn

import (
	"fmt"
	"sort"
	"strings"
)

// Layer types accepted in LayerSpec.Type.
const (
	TypeDense     = "dense"
	TypeReLU      = "relu"
	TypeConv2D    = "conv2d"
	TypeMaxPool2D = "maxpool2d"
	TypeFlatten   = "flatten"
	TypeEmbedding = "embedding"
	TypeLayerNorm = "layernorm"
	TypeAttention = "attention"
	TypeGELU      = "gelu"
	TypeResidual  = "residual"
	TypeDropout   = "dropout"
)

// LayerSpec describes one layer. Type is a registered layer type
// (LayerTypes): "dense", "relu", "conv2d", "maxpool2d", "flatten",
// "embedding", "layernorm", "attention", "gelu", "residual" or "dropout".
// A field a type does not use must be left zero.
type LayerSpec struct {
	Type      string      `json:"type" yaml:"type" msgpack:"type"`
	Units     int         `json:"units,omitempty" yaml:"units,omitempty" msgpack:"units,omitempty"`             // dense, embedding: output units
	Filters   int         `json:"filters,omitempty" yaml:"filters,omitempty" msgpack:"filters,omitempty"`       // conv2d: output channels
	Kernel    int         `json:"kernel,omitempty" yaml:"kernel,omitempty" msgpack:"kernel,omitempty"`          // conv2d: square kernel; maxpool2d: window (default 2)
	Stride    int         `json:"stride,omitempty" yaml:"stride,omitempty" msgpack:"stride,omitempty"`          // conv2d default 1; maxpool2d default = Kernel
	Padding   int         `json:"padding,omitempty" yaml:"padding,omitempty" msgpack:"padding,omitempty"`       // conv2d zero padding, default 0
	Vocab     int         `json:"vocab,omitempty" yaml:"vocab,omitempty" msgpack:"vocab,omitempty"`             // embedding: number of token ids
	Positions int         `json:"positions,omitempty" yaml:"positions,omitempty" msgpack:"positions,omitempty"` // embedding: rows of the position table (0: none)
	Heads     int         `json:"heads,omitempty" yaml:"heads,omitempty" msgpack:"heads,omitempty"`             // attention: number of heads
	Causal    bool        `json:"causal,omitempty" yaml:"causal,omitempty" msgpack:"causal,omitempty"`          // attention: position p sees 0..p only
	Eps       float64     `json:"eps,omitempty" yaml:"eps,omitempty" msgpack:"eps,omitempty"`                   // layernorm: added to the variance, default 1e-5
	Rate      float64     `json:"rate,omitempty" yaml:"rate,omitempty" msgpack:"rate,omitempty"`                // dropout: probability of dropping a value
	Tied      bool        `json:"tied,omitempty" yaml:"tied,omitempty" msgpack:"tied,omitempty"`                // dense on a sequence: use the embedding's weight
	Layers    []LayerSpec `json:"layers,omitempty" yaml:"layers,omitempty" msgpack:"layers,omitempty"`          // residual: the body
}

// LayerSpecKeys returns every key a layer spec may have, in the order of
// LayerSpec's fields.
func LayerSpecKeys() []string {
	return []string{"type", "units", "filters", "kernel", "stride", "padding", "vocab", "positions", "heads", "causal", "eps", "rate", "tied", "layers"}
}

// clone returns a deep copy of the layer (residual bodies included).
func (l LayerSpec) clone() LayerSpec {
	if l.Layers != nil {
		body := make([]LayerSpec, len(l.Layers))
		for i, b := range l.Layers {
			body[i] = b.clone()
		}
		l.Layers = body
	}
	return l
}

// ModelSpec is a model's architecture. Input is [channels, height, width]
// (e.g. [1,28,28]) for images and feature vectors ([1,1,N]), or [t] for a
// sequence of t token ids.
type ModelSpec struct {
	Input  []int       `json:"input" yaml:"input" msgpack:"input"`
	Layers []LayerSpec `json:"layers" yaml:"layers" msgpack:"layers"`
}

// Clone returns a deep copy, so a stored spec cannot be changed through the
// caller's slices.
func (s ModelSpec) Clone() ModelSpec {
	c := ModelSpec{}
	if s.Input != nil {
		c.Input = append([]int(nil), s.Input...)
	}
	if s.Layers != nil {
		c.Layers = make([]LayerSpec, len(s.Layers))
		for i, l := range s.Layers {
			c.Layers[i] = l.clone()
		}
	}
	return c
}

var presets = map[string]ModelSpec{
	"mnist-mlp": {
		Input: []int{1, 28, 28},
		Layers: []LayerSpec{
			{Type: TypeDense, Units: 256},
			{Type: TypeReLU},
			{Type: TypeDense, Units: 128},
			{Type: TypeReLU},
			{Type: TypeDense, Units: 10},
		},
	},
	"mnist-cnn": {
		Input: []int{1, 28, 28},
		Layers: []LayerSpec{
			{Type: TypeConv2D, Filters: 8, Kernel: 5, Padding: 2},
			{Type: TypeReLU},
			{Type: TypeMaxPool2D, Kernel: 2},
			{Type: TypeConv2D, Filters: 16, Kernel: 5},
			{Type: TypeReLU},
			{Type: TypeMaxPool2D, Kernel: 2},
			{Type: TypeFlatten},
			{Type: TypeDense, Units: 64},
			{Type: TypeReLU},
			{Type: TypeDense, Units: 10},
		},
	},
	// fashion-cnn is mnist-cnn made wider: Fashion-MNIST's clothes need
	// more filters than digits to pass 90% test accuracy.
	"fashion-cnn": {
		Input: []int{1, 28, 28},
		Layers: []LayerSpec{
			{Type: TypeConv2D, Filters: 16, Kernel: 5, Padding: 2},
			{Type: TypeReLU},
			{Type: TypeMaxPool2D, Kernel: 2},
			{Type: TypeConv2D, Filters: 32, Kernel: 5},
			{Type: TypeReLU},
			{Type: TypeMaxPool2D, Kernel: 2},
			{Type: TypeFlatten},
			{Type: TypeDense, Units: 128},
			{Type: TypeReLU},
			{Type: TypeDense, Units: 10},
		},
	},
	// charlm is a character (byte) level transformer with context 128:
	// token and position embeddings, four pre-LayerNorm blocks of causal
	// self-attention and a GELU MLP, a final LayerNorm and an untied output
	// layer; 875,520 parameters.
	"charlm": Transformer(TransformerConfig{Context: 128, Width: 128, Blocks: 4, Heads: 4, Vocab: 256}),
	// charlm-tiny is charlm made small enough for tests.
	"charlm-tiny": Transformer(TransformerConfig{Context: 32, Width: 32, Blocks: 2, Heads: 2, Vocab: 256}),
	// gpt-small is a GPT-2 style model for a 4096-token vocabulary: context
	// 256, width 384, six blocks of six heads, and an output layer tied to
	// the token embedding (GPT-2's lm_head), which saves the 4096x384
	// untied weight; 12,322,816 parameters.
	"gpt-small": Transformer(TransformerConfig{Context: 256, Width: 384, Blocks: 6, Heads: 6, Vocab: 4096, Tied: true}),
	// gpt-mini reads BPE tokens (a tokenizer of GPTMiniVocab tokens) with
	// context 64, width 64, two blocks of two heads and an untied output;
	// 236,288 parameters.
	"gpt-mini": Transformer(TransformerConfig{Context: 64, Width: 64, Blocks: 2, Heads: 2, Vocab: GPTMiniVocab}),
}

// GPTMiniVocab is the vocabulary of the gpt-mini preset: its embedding's
// rows and its output's units, the size of its job's tokenizer.
const GPTMiniVocab = 1024

// TransformerConfig is the shape of a GPT-style decoder (Transformer).
type TransformerConfig struct {
	Context int // tokens per example: the input [t] and the position table
	Width   int // d, the model width; the MLP is 4d wide
	Blocks  int // pre-LayerNorm blocks, each attention then MLP
	Heads   int // attention heads per block; must divide Width
	Vocab   int // token ids 0..Vocab-1 in, Vocab scores per position out
	// Tied: the output layer uses the token embedding's weight (its
	// transpose, as GPT-2) and has only a bias; otherwise it is a dense
	// layer of its own.
	Tied bool
}

// Transformer returns the spec of a GPT-style language model: token and
// position embeddings, c.Blocks pre-LayerNorm residual blocks of causal
// self-attention and a GELU MLP, a final LayerNorm and the output layer.
// NewModel checks the numbers.
func Transformer(c TransformerConfig) ModelSpec {
	t, d := c.Context, c.Width
	s := ModelSpec{Input: []int{t}, Layers: []LayerSpec{{Type: TypeEmbedding, Vocab: c.Vocab, Units: d, Positions: t}}}
	for range c.Blocks {
		s.Layers = append(s.Layers,
			LayerSpec{Type: TypeResidual, Layers: []LayerSpec{
				{Type: TypeLayerNorm},
				{Type: TypeAttention, Heads: c.Heads, Causal: true},
			}},
			LayerSpec{Type: TypeResidual, Layers: []LayerSpec{
				{Type: TypeLayerNorm},
				{Type: TypeDense, Units: 4 * d},
				{Type: TypeGELU},
				{Type: TypeDense, Units: d},
			}})
	}
	out := LayerSpec{Type: TypeDense, Units: c.Vocab}
	if c.Tied {
		out = LayerSpec{Type: TypeDense, Tied: true}
	}
	s.Layers = append(s.Layers, LayerSpec{Type: TypeLayerNorm}, out)
	return s
}

// PresetNames returns the names of the built-in model presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset returns a copy of the named built-in model spec.
func Preset(name string) (ModelSpec, error) {
	s, ok := presets[name]
	if !ok {
		return ModelSpec{}, fmt.Errorf("unknown model preset %q (presets: %s)", name, strings.Join(PresetNames(), ", "))
	}
	return s.Clone(), nil
}
