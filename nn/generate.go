package nn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Generate continues prompt by tokens tokens with a sequence model (input
// [t] token ids, one output row per position) and returns the new tokens
// only. Each step feeds the last ≤ t tokens, left-aligned: with fewer than
// t the positions after them hold token 0 and are ignored, which leaves the
// result exact for a causal model, whose position p sees only 0..p. The
// next token is drawn from the softmax of the last fed position's logits
// divided by temperature; temperature 0 takes the argmax (the first, on a
// tie). Given the same rng state it returns the same tokens. ws needs a
// maxBatch of at least 1. It allocates the returned slice and one input
// row per call, nothing per token.
func (m *Model) Generate(ws *Workspace, params []float32, prompt []int32, tokens int, temperature float64, rng *rand.Rand) ([]int32, error) {
	if len(m.Spec.Input) != 1 {
		return nil, fmt.Errorf("generate: the model's input is %v, not a token sequence [t]: only a sequence model generates text", m.Spec.Input)
	}
	t := m.InputSize
	if perPos := m.labelsPerExample(); perPos != t {
		return nil, fmt.Errorf("generate: the model has %d outputs per example, want one per input position (%d): its last layer must be applied per position", perPos, t)
	}
	switch {
	case len(params) != m.NumParams:
		return nil, fmt.Errorf("generate: %d parameters, the model has %d", len(params), m.NumParams)
	case len(prompt) == 0:
		return nil, errors.New("generate: the prompt is empty: give at least one token")
	case tokens < 0:
		return nil, fmt.Errorf("generate: tokens must be >= 0, got %d", tokens)
	case !(temperature >= 0) || math.IsInf(temperature, 0):
		return nil, fmt.Errorf("generate: temperature must be a finite number >= 0 (0 takes the most likely token), got %v", temperature)
	case temperature > 0 && rng == nil:
		return nil, errors.New("generate: sampling at a temperature above 0 needs a random source")
	case ws == nil || ws.maxBatch < 1:
		return nil, errors.New("generate: need a workspace for at least one example")
	}
	vocab := m.NumClasses
	for i, tok := range prompt {
		if tok < 0 || int(tok) >= vocab {
			return nil, fmt.Errorf("generate: prompt token %d is %d, outside the vocabulary 0..%d", i, tok, vocab-1)
		}
	}
	out := make([]int32, 0, tokens)
	x := make([]float32, t)
	for len(out) < tokens {
		// The context: the last ≤ t tokens of prompt followed by out.
		k := min(t, len(prompt)+len(out))
		for i := 0; i < k; i++ {
			j := len(prompt) + len(out) - k + i
			if j < len(prompt) {
				x[i] = float32(prompt[j])
			} else {
				x[i] = float32(out[j-len(prompt)])
			}
		}
		clear(x[k:])
		logits := m.Forward(ws, params, x)
		row := logits[(k-1)*vocab : k*vocab]
		out = append(out, pick(row, temperature, rng))
	}
	return out, nil
}

// labelsPerExample is how many rows of NumClasses logits Forward returns
// per example.
func (m *Model) labelsPerExample() int {
	return m.LabelsPerExample
}

// pick draws a token from logits at temperature (0: argmax).
func pick(logits []float32, temperature float64, rng *rand.Rand) int32 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	if temperature == 0 {
		return int32(best)
	}
	top := float64(logits[best])
	var sum float64
	for _, v := range logits {
		sum += math.Exp((float64(v) - top) / temperature)
	}
	u := rng.Float64() * sum
	for i, v := range logits {
		u -= math.Exp((float64(v) - top) / temperature)
		if u < 0 {
			return int32(i)
		}
	}
	return int32(best) // rounding left u at 0
}
