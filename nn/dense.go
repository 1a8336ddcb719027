package nn

import (
	"fmt"
	"math"
)

// denseLayer is a fully connected layer, y = x·Wᵀ + b with weight
// [units, in] and bias [units]. On an image or a flat vector it flattens
// its input; on a sequence [t,d] it applies to each position, giving
// [t,units]. Tied (sequence only), it uses the first embedding's weight
// [vocab, d] as its own and has only a bias [vocab].
type denseLayer struct {
	layerBase
	wOff, wLen, bOff, bLen int
	rows                   int // rows per example: t on a sequence, else 1
	dIn, dOut              int // values per row
	tied                   bool
}

func init() {
	registerLayer(TypeDense, []string{"units", "tied"}, resolveDense)
}

func resolveDense(r *resolver, ls LayerSpec, cur shape) (Layer, error) {
	if err := needValues(cur); err != nil {
		return nil, err
	}
	l := &denseLayer{rows: cur.rows(), dIn: cur.cols(), tied: ls.Tied}
	if ls.Tied {
		e := r.embedding
		switch {
		case cur.kind != shapeSeq:
			return nil, fmt.Errorf("tied: true needs a sequence input [t,d] but gets %v", cur)
		case e == nil:
			return nil, fmt.Errorf("tied: true uses the first embedding layer's weight, but there is no embedding layer before it")
		case e.units != l.dIn:
			return nil, fmt.Errorf("tied: the embedding has %d units but this layer's input has %d values per position; they must be equal", e.units, l.dIn)
		case ls.Units != 0 && ls.Units != e.vocab:
			return nil, fmt.Errorf("tied: units is the embedding's vocab (%d), got %d (leave units out)", e.vocab, ls.Units)
		}
		l.dOut = e.vocab
		l.wOff, l.wLen = e.wOff, e.wLen
		// Its rows are output weights too: at unit scale the first
		// logits would be ±√d. GPT-2's 0.02, as for a tied lm_head.
		r.setInit(e.wOff, initUniform, tiedEmbedInit)
		l.accumulate = []span{{l.wOff, l.wLen}}
	} else {
		if ls.Units < 1 {
			return nil, fmt.Errorf("units must be >= 1, got %d (set units to the layer's output size)", ls.Units)
		}
		if int64(ls.Units)*int64(l.dIn) > maxParams-int64(r.offset) || ls.Units > maxActivation {
			return nil, fmt.Errorf("%d units on an input of %d values is too large (at most %d parameters in a model)", ls.Units, l.dIn, maxParams)
		}
		l.dOut = ls.Units
		bound := heUniform(l.dIn)
		if cur.kind == shapeSeq { // a transformer's projection
			bound = linearUniform(l.dIn)
		}
		var err error
		if l.wOff, l.wLen, err = r.tensor(&l.layerBase, "weight", []int{l.dOut, l.dIn}, initUniform, bound); err != nil {
			return nil, err
		}
	}
	var err error
	if l.bOff, l.bLen, err = r.tensor(&l.layerBase, "bias", []int{l.dOut}, initZero, 0); err != nil {
		return nil, err
	}
	if cur.kind == shapeSeq {
		l.out = seqShape(cur.t, l.dOut)
	} else {
		l.out = flatShape(l.dOut)
	}
	return l, nil
}

func (l *denseLayer) canFuseReLU() bool { return true }

func (l *denseLayer) newState(b *wsBuilder, maxBatch int) any {
	b.needScratch(l.wLen) // the transposed weight of the axpy formulation
	return nil
}

func (l *denseLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	denseForward(c.gemm, l, params, in, out, c.scratch, n)
	if l.fusedReLU {
		reluForward(out, out)
	}
}

func (l *denseLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	denseBackward(c.gemm, l, params, in, dOut, dIn, grad, n)
}

func (l *denseLayer) describe(p *LayerPlan) {
	p.WeightOffset, p.WeightSize, p.BiasOffset, p.BiasSize = l.wOff, l.wLen, l.bOff, l.bLen
	p.Units, p.Tied = l.dOut, l.tied
}

// denseForward computes out[n×O] = in[n×I] · Wᵀ + b (W is [O×I]) in one of
// two ways:
//
//   - dots: gemm(in, Wᵀ), one dot product of length I per output;
//   - axpys: W is transposed into wT[I×O] and gemm(in, wT) adds one row of wT
//     per input value, skipping the zeros. The transpose costs O*I copies,
//     against n*O*I multiply-adds.
//
// Which is faster depends on how many inputs are zero (relu outputs are about
// half zeros, MNIST pixels about 80%) and on the platform (see
// axpyZeroQuarters), so the input is counted on each call: a cheap pass next
// to the GEMM.
//
// On a sequence it runs on the n*t positions as rows.
func denseForward(s *gemmScratch, l *denseLayer, params, in, out, wT []float32, n int) {
	I, O := l.dIn, l.dOut
	n *= l.rows
	w := params[l.wOff : l.wOff+l.wLen]
	b := params[l.bOff : l.bOff+l.bLen]
	// Seed each row with the bias and let the GEMM accumulate into it (beta=1),
	// which saves a separate pass over the output.
	for e := 0; e < n; e++ {
		copy(out[e*O:(e+1)*O], b)
	}
	if !denseAxpys(s, in) {
		gemm(s, false, true, n, O, I, 1, in, I, w, I, 1, out, O)
		return
	}
	wT = wT[:I*O]
	transpose(w, O, I, wT)
	gemm(s, false, false, n, O, I, 1, in, I, wT, O, 1, out, O)
}

// denseForwardMode overrides denseAxpys when non-zero (tests use it to
// check both paths): 1 forces dots, 2 forces axpys.
var denseForwardMode = 0

// denseAxpys reports whether denseForward should use the axpy formulation
// for this input.
func denseAxpys(s *gemmScratch, in []float32) bool {
	if denseForwardMode != 0 {
		return denseForwardMode == 2
	}
	if !s.skipZeros() {
		// A packed kernel does the same work for zeros, so the
		// transpose would be pure cost.
		return false
	}
	// Count zeros in an evenly strided sample of at most about 4096 values,
	// without branches: x = bits<<1 drops the sign, and (x | -x) has its top
	// bit set exactly when x != 0.
	step := max(1, len(in)/4096)
	zeros, total := 0, 0
	for i := 0; i < len(in); i += step {
		x := math.Float32bits(in[i]) << 1
		zeros += int(1 - (x|-x)>>31)
		total++
	}
	return zeros*4 >= axpyZeroQuarters*total
}

func denseBackward(s *gemmScratch, l *denseLayer, params, in, dOut, dIn, grad []float32, n int) {
	I, O := l.dIn, l.dOut
	n *= l.rows
	// dW[O×I] = dOutᵀ · in (added to the embedding's gradient if tied)
	var beta float32
	if l.tied {
		beta = 1
	}
	gemm(s, true, false, O, I, n, 1, dOut, O, in, I, beta, grad[l.wOff:l.wOff+l.wLen], I)
	db := grad[l.bOff : l.bOff+l.bLen]
	copy(db, dOut[:O])
	for e := 1; e < n; e++ {
		addTo(db, dOut[e*O:(e+1)*O])
	}
	if dIn != nil {
		// dIn[n×I] = dOut · W
		gemm(s, false, false, n, I, O, 1, dOut, O, params[l.wOff:l.wOff+l.wLen], I, 0, dIn, I)
	}
}
