// Package nntest holds what tests of a compute backend share: small models
// that cover every layer kind, and random batches for them.
package nntest

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
)

// LayerModels are small models that exercise each layer kind and option,
// including the input gradient of every layer (a layer above another with
// parameters): what a backend's layers are checked with against package
// nn's.
var LayerModels = map[string]nn.ModelSpec{
	"dense": {Input: []int{1, 1, 12}, Layers: []nn.LayerSpec{{Type: "dense", Units: 7}, {Type: "dense", Units: 5}}},
	"relu":  {Input: []int{2, 3, 3}, Layers: []nn.LayerSpec{{Type: "dense", Units: 16}, {Type: "relu"}, {Type: "dense", Units: 4}}},
	"conv2d stride 2 padding 1": {Input: []int{3, 9, 8}, Layers: []nn.LayerSpec{
		{Type: "conv2d", Filters: 4, Kernel: 3, Stride: 2, Padding: 1}, {Type: "conv2d", Filters: 5, Kernel: 3, Stride: 1, Padding: 2},
		{Type: "flatten"}, {Type: "dense", Units: 3}}},
	"conv2d 1x1": {Input: []int{3, 5, 5}, Layers: []nn.LayerSpec{
		{Type: "conv2d", Filters: 4, Kernel: 1}, {Type: "conv2d", Filters: 2, Kernel: 1}, {Type: "flatten"}, {Type: "dense", Units: 3}}},
	"maxpool2d": {Input: []int{2, 8, 8}, Layers: []nn.LayerSpec{
		{Type: "conv2d", Filters: 3, Kernel: 3, Padding: 1}, {Type: "relu"}, {Type: "maxpool2d", Kernel: 2},
		{Type: "conv2d", Filters: 4, Kernel: 2}, {Type: "maxpool2d", Kernel: 3, Stride: 2}, // overlapping windows
		{Type: "flatten"}, {Type: "dense", Units: 6}, {Type: "relu"}, {Type: "dense", Units: 3}}},
	"flatten then dense": {Input: []int{2, 4, 4}, Layers: []nn.LayerSpec{
		{Type: "maxpool2d", Kernel: 2}, {Type: "flatten"}, {Type: "dense", Units: 5}, {Type: "relu"}, {Type: "dense", Units: 2}}},

	// The sequence layers: an embedding makes a sequence [t,d] of token
	// ids, and a dense layer per position gives the logits of each.
	"embedding, dense per position": {Input: []int{5}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 7, Units: 6, Positions: 8}, {Type: "dense", Units: 4}, {Type: "relu"}, {Type: "dense", Units: 7}}},
	"embedding without positions": {Input: []int{5}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 9, Units: 4}, {Type: "dense", Units: 9}}},
	"embedding, vocabulary scattered by atomics": {Input: []int{6}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 1500, Units: 3, Positions: 6}, {Type: "dense", Units: 5}}},
	"layernorm": {Input: []int{5}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 7, Units: 6, Positions: 5}, {Type: "layernorm"}, {Type: "dense", Units: 7}}},
	"layernorm eps 0.1 on a flat vector": {Input: []int{1, 1, 12}, Layers: []nn.LayerSpec{
		{Type: "dense", Units: 9}, {Type: "layernorm", Eps: 0.1}, {Type: "dense", Units: 3}}},
	"gelu": {Input: []int{5}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 7, Units: 6, Positions: 5}, {Type: "dense", Units: 8}, {Type: "gelu"}, {Type: "dense", Units: 7}}},
	"attention, causal": {Input: []int{6}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 7, Units: 8, Positions: 6}, {Type: "attention", Heads: 2, Causal: true}, {Type: "dense", Units: 7}}},
	"attention, one head, not causal": {Input: []int{5}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 7, Units: 4, Positions: 5}, {Type: "attention", Heads: 1}, {Type: "dense", Units: 7}}},
	"residual": {Input: []int{5}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 7, Units: 6, Positions: 5},
		{Type: "residual", Layers: []nn.LayerSpec{{Type: "layernorm"}, {Type: "dense", Units: 6}}}, {Type: "dense", Units: 7}}},
	"nested residual": {Input: []int{5}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 7, Units: 6, Positions: 5},
		{Type: "residual", Layers: []nn.LayerSpec{
			{Type: "residual", Layers: []nn.LayerSpec{{Type: "gelu"}, {Type: "dense", Units: 6}}},
			{Type: "layernorm"}}},
		{Type: "dense", Units: 7}}},
	"dropout": {Input: []int{5}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 7, Units: 6, Positions: 5}, {Type: "dropout", Rate: 0.3},
		{Type: "residual", Layers: []nn.LayerSpec{{Type: "dense", Units: 6}, {Type: "dropout", Rate: 0.5}}},
		{Type: "dense", Units: 7}}},
	"dense tied to the embedding": {Input: []int{5}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 9, Units: 6, Positions: 5}, {Type: "layernorm"}, {Type: "dense", Tied: true}}},
	// gpt-small's layers at toy size: the tied output's gradient meets
	// the embedding's through two blocks.
	"transformer, tied output": nn.Transformer(nn.TransformerConfig{Context: 6, Width: 8, Blocks: 2, Heads: 2, Vocab: 13, Tied: true}),
}

// RandomBatch returns parameters (nn's initialisation from seed, with
// non-zero biases, so that their use is checked), n examples of random
// inputs (token ids for a model on tokens) and random labels.
func RandomBatch(m *nn.Model, n int, seed uint64) ([]float32, []float32, []int32) {
	rng := rand.New(rand.NewPCG(seed, 7))
	params := make([]float32, m.NumParams)
	m.Init(params, int64(seed))
	for _, t := range m.Layout { // non-zero biases, so their use is checked
		if strings.HasSuffix(t.Name, ".bias") {
			for i := range t.Size {
				params[t.Offset+i] = 0.1 * float32(rng.NormFloat64())
			}
		}
	}
	x := make([]float32, n*m.InputSize)
	vocab := 0 // a model on token ids gets ids
	if p := m.Plan(); p[0].Type == nn.TypeEmbedding {
		vocab = p[0].Vocab
	}
	for i := range x {
		if vocab > 0 {
			x[i] = float32(rng.IntN(vocab))
		} else {
			x[i] = rng.Float32()
		}
	}
	labels := make([]int32, n*m.LabelsPerExample)
	for i := range labels {
		labels[i] = int32(rng.IntN(m.NumClasses))
	}
	return params, x, labels
}

// RandomSafetensors writes preset's model, freshly initialised from seed,
// as a safetensors file in dir and returns its path: a policy or init
// file for a test that needs weights, not training.
func RandomSafetensors(t testing.TB, dir, preset string, seed int64) string {
	t.Helper()
	ms, err := nn.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	params := make([]float32, m.NumParams)
	m.Init(params, seed)
	var b bytes.Buffer
	if err := nn.WriteSafetensors(&b, m.Layout, params, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, preset+".safetensors")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
