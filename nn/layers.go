package nn

import (
	"fmt"
	"math"
)

// Helpers shared by the layers. Activations are row-major per example;
// spatial tensors are channel-major (CHW). Each layer handles a batch of n
// examples.

// softmaxCE returns the summed cross-entropy of softmax(logits) against labels
// and the number of rows whose argmax equals the label. If dLogits is non-nil
// it receives (softmax - onehot) * scale. Sums run in float64; the max is
// subtracted before exponentiating so large logits cannot overflow.
func softmaxCE(logits []float32, labels []int32, classes int, dLogits []float32, scale float32) (lossSum float64, correct int) {
	for e, lab := range labels {
		if lab < 0 || int(lab) >= classes {
			panic(badLabel(e, lab, classes))
		}
		z := logits[e*classes : (e+1)*classes]
		mx, arg := z[0], 0
		for j, v := range z {
			if v > mx {
				mx, arg = v, j
			}
		}
		if arg == int(lab) {
			correct++
		}
		m64 := float64(mx)
		var s float64
		if dLogits == nil {
			for _, v := range z {
				s += math.Exp(float64(v) - m64)
			}
		} else {
			d := dLogits[e*classes : (e+1)*classes]
			for j, v := range z {
				ex := math.Exp(float64(v) - m64)
				d[j] = float32(ex)
				s += ex
			}
			inv := float64(scale) / s
			for j := range d {
				d[j] = float32(float64(d[j]) * inv)
			}
			d[lab] -= scale
		}
		lossSum += m64 + math.Log(s) - float64(z[lab])
	}
	return lossSum, correct
}

func fill(x []float32, v float32) {
	for i := range x {
		x[i] = v
	}
}

func addTo(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}

func sum(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += v
	}
	return s
}

// transpose writes the transpose of a (rows×cols, row-major) to t, in
// blocks so both sides stay in cache.
func transpose(a []float32, rows, cols int, t []float32) {
	const blk = 32
	for i0 := 0; i0 < rows; i0 += blk {
		i1 := min(i0+blk, rows)
		for j0 := 0; j0 < cols; j0 += blk {
			j1 := min(j0+blk, cols)
			for i := i0; i < i1; i++ {
				row := a[i*cols+j0 : i*cols+j1]
				for j, v := range row {
					t[(j0+j)*rows+i] = v
				}
			}
		}
	}
}

// kindName describes a shape's kind in errors.
func kindName(s shape) string {
	switch s.kind {
	case shapeFlat:
		return "a flat vector"
	case shapeTokens:
		return "token ids"
	case shapeSeq:
		return "a sequence"
	}
	return "an image"
}

// needValues rejects token ids as a layer's input: they are indices, not
// values to compute with.
func needValues(s shape) error {
	if s.kind == shapeTokens {
		return fmt.Errorf("gets token ids %v, which are indices, not values; put an embedding layer first", s)
	}
	return nil
}

// CheckInputs returns an error for the first input a forward pass would
// refuse: for a model on token ids, an id that is not an integer in
// [0, vocab). Gradient, Evaluate and Forward panic on such inputs, so
// callers that take inputs from untrusted data should check them once up
// front. Models on images accept any value.
func (m *Model) CheckInputs(x []float32) error {
	if m.top.in.kind != shapeTokens {
		return nil
	}
	e, ok := m.top.layers[0].(*embeddingLayer)
	if !ok {
		return nil
	}
	T := m.InputSize
	for i, v := range x {
		if id := int(v); float32(id) != v || id < 0 || id >= e.vocab {
			return fmt.Errorf("token %v at position %d of example %d is not an id in [0, %d): the data has more tokens than the model's embedding vocab", v, i%T, i/T, e.vocab)
		}
	}
	return nil
}

// InputVocab returns the number of token ids a model on token ids reads
// (its embedding's vocab), or 0 for a model on values.
func (m *Model) InputVocab() int {
	if m.top.in.kind != shapeTokens {
		return 0
	}
	if e, ok := m.top.layers[0].(*embeddingLayer); ok {
		return e.vocab
	}
	return 0
}
