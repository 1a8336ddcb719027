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
)

// LayerSpec describes one layer. Type is one of "dense", "relu", "conv2d", "maxpool2d", "flatten".
type LayerSpec struct {
	Type    string `json:"type" yaml:"type" msgpack:"type"`
	Units   int    `json:"units,omitempty" yaml:"units,omitempty" msgpack:"units,omitempty"`       // dense: output units
	Filters int    `json:"filters,omitempty" yaml:"filters,omitempty" msgpack:"filters,omitempty"` // conv2d: output channels
	Kernel  int    `json:"kernel,omitempty" yaml:"kernel,omitempty" msgpack:"kernel,omitempty"`    // conv2d: square kernel; maxpool2d: window (default 2)
	Stride  int    `json:"stride,omitempty" yaml:"stride,omitempty" msgpack:"stride,omitempty"`    // conv2d default 1; maxpool2d default = Kernel
	Padding int    `json:"padding,omitempty" yaml:"padding,omitempty" msgpack:"padding,omitempty"` // conv2d zero padding, default 0
}

// ModelSpec is a model's architecture. Input is [channels, height, width] (e.g. [1,28,28]).
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
		c.Layers = append([]LayerSpec(nil), s.Layers...)
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
