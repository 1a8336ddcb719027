package nn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Sample is a completion drawn by Decoder.Generate: the new tokens and the
// log-probability of each under the distribution it was drawn from.
type Sample struct {
	Tokens []int32
	// LogProbs[i] is log softmax(logits/temperature)[Tokens[i]] at the
	// position that chose Tokens[i] (temperature 0, greedy, counts as 1:
	// the model's own distribution), in float64 and then rounded: finite
	// and <= 0.
	LogProbs []float32
}

// Generate starts a new sequence (Reset), feeds prompt and draws up to
// maxTokens tokens after it, one Step each, stopping early after a token
// of stop (which is kept). Tokens are drawn as Model.Generate draws them
// from the same logits: the softmax of logits/temperature with one
// rng.Float64 per token, or at temperature 0 the argmax, so the same rng
// state gives the same tokens. The prompt and the tokens must fit the
// context: len(prompt)+maxTokens <= t.
func (d *Decoder) Generate(params []float32, prompt []int32, maxTokens int, temperature float64, rng *rand.Rand, stop []int32) (Sample, error) {
	t := d.m.InputSize
	switch {
	case len(prompt) == 0:
		return Sample{}, errors.New("generate: the prompt is empty: give at least one token")
	case maxTokens < 0:
		return Sample{}, fmt.Errorf("generate: maxTokens must be >= 0, got %d", maxTokens)
	case len(prompt)+maxTokens > t:
		return Sample{}, fmt.Errorf("generate: %d prompt tokens and %d new ones do not fit the model's context of %d tokens", len(prompt), maxTokens, t)
	case !(temperature >= 0) || math.IsInf(temperature, 0):
		return Sample{}, fmt.Errorf("generate: temperature must be a finite number >= 0 (0 takes the most likely token), got %v", temperature)
	case temperature > 0 && rng == nil:
		return Sample{}, errors.New("generate: sampling at a temperature above 0 needs a random source")
	}
	d.Reset()
	var logits []float32
	var err error
	for _, tok := range prompt {
		if logits, err = d.Step(params, tok); err != nil {
			return Sample{}, err
		}
	}
	s := Sample{Tokens: make([]int32, 0, maxTokens), LogProbs: make([]float32, 0, maxTokens)}
	for len(s.Tokens) < maxTokens {
		tok := pick(logits, temperature, rng)
		s.Tokens = append(s.Tokens, tok)
		s.LogProbs = append(s.LogProbs, float32(min(logProbAt(logits, tok, temperature), 0)))
		if slices.Contains(stop, tok) || len(s.Tokens) == maxTokens {
			break
		}
		if logits, err = d.Step(params, tok); err != nil {
			return Sample{}, err
		}
	}
	return s, nil
}
