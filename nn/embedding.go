package nn

import (
	"fmt"
	"math"
)

// embeddingLayer maps a sequence of t token ids to t vectors of units
// values: out[p] = weight[x_p] + position[p], with weight [vocab, units]
// and position [positions, units] (no position table when positions is 0).
type embeddingLayer struct {
	layerBase
	vocab, units, positions int
	wOff, wLen, pOff, pLen  int
}

// embedInit is the bound of the embedding tables' uniform initialisation:
// standard deviation 1, as PyTorch's nn.Embedding. Against GPT-2's 0.02
// under projections at He's scale, a token's identity was a small part of
// the residual stream at first: charlm sat near 3.4 bits per character
// for twice PyTorch's steps, and far longer with two workers' stale
// results (docs/TRAINING.md, "A second worker on the transformer").
var embedInit = math.Sqrt(3)

// tiedEmbedInit is the bound of an embedding that is also the output
// layer (dense tied: true): standard deviation 0.02, as GPT-2's.
var tiedEmbedInit = math.Sqrt(3) * 0.02

func init() {
	registerLayer(TypeEmbedding, []string{"vocab", "units", "positions"}, resolveEmbedding)
}

func resolveEmbedding(r *resolver, ls LayerSpec, cur shape) (Layer, error) {
	if cur.kind != shapeTokens {
		return nil, fmt.Errorf("needs token ids (a model input [t]) but gets %s %v; put the embedding first and give the model input: [t]", kindName(cur), cur)
	}
	if ls.Vocab < 1 {
		return nil, fmt.Errorf("vocab must be >= 1, got %d (set vocab to the number of distinct tokens, 256 for bytes)", ls.Vocab)
	}
	if ls.Units < 1 {
		return nil, fmt.Errorf("units must be >= 1, got %d (set units to the model width)", ls.Units)
	}
	if ls.Positions != 0 && ls.Positions < cur.t {
		return nil, fmt.Errorf("positions %d is shorter than the input's %d tokens; set positions to the context (>= %d) or 0 for no position table", ls.Positions, cur.t, cur.t)
	}
	if ls.Units > maxActivation || int64(cur.t)*int64(ls.Units) > maxActivation {
		return nil, fmt.Errorf("%d units on %d positions is too large (at most %d values per example in one tensor)", ls.Units, cur.t, maxActivation)
	}
	l := &embeddingLayer{vocab: ls.Vocab, units: ls.Units, positions: ls.Positions}
	l.out = seqShape(cur.t, ls.Units)
	var err error
	if l.wOff, l.wLen, err = r.tensor(&l.layerBase, "weight", []int{ls.Vocab, ls.Units}, initUniform, embedInit); err != nil {
		return nil, err
	}
	l.accumulate = []span{{l.wOff, l.wLen}}
	if ls.Positions > 0 {
		if l.pOff, l.pLen, err = r.tensor(&l.layerBase, "position", []int{ls.Positions, ls.Units}, initUniform, embedInit); err != nil {
			return nil, err
		}
		l.accumulate = append(l.accumulate, span{l.pOff, l.pLen})
	}
	if r.embedding == nil {
		r.embedding = l
	}
	return l, nil
}

func (l *embeddingLayer) newState(*wsBuilder, int) any { return nil }

// token returns the id in v, panicking on anything but an integer in
// [0, vocab).
func (l *embeddingLayer) token(v float32, e, p int) int {
	id := int(v)
	if float32(id) != v || id < 0 || id >= l.vocab {
		panic(fmt.Sprintf("nn: token %v at position %d of example %d is not an id in [0, %d); check the data with Model.CheckInputs", v, p, e, l.vocab))
	}
	return id
}

func (l *embeddingLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	T, D := l.in.t, l.units
	w := params[l.wOff : l.wOff+l.wLen]
	var pos []float32
	if l.pLen > 0 {
		pos = params[l.pOff : l.pOff+T*D]
	}
	for e := 0; e < n; e++ {
		for p := 0; p < T; p++ {
			id := l.token(in[e*T+p], e, p)
			o := out[(e*T+p)*D : (e*T+p+1)*D]
			row := w[id*D : (id+1)*D]
			if pos == nil {
				copy(o, row)
				continue
			}
			pr := pos[p*D : (p+1)*D]
			for j := range o {
				o[j] = row[j] + pr[j]
			}
		}
	}
}

// backward adds each position's gradient to its token's row and its
// position's row (the model has cleared both tables' gradients, which a
// tied dense layer may have written to already). Token ids have no
// gradient: dIn, if asked for, is zero.
func (l *embeddingLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	T, D := l.in.t, l.units
	gw := grad[l.wOff : l.wOff+l.wLen]
	var gp []float32
	if l.pLen > 0 {
		gp = grad[l.pOff : l.pOff+T*D]
	}
	for e := 0; e < n; e++ {
		for p := 0; p < T; p++ {
			id := int(in[e*T+p])
			d := dOut[(e*T+p)*D : (e*T+p+1)*D]
			addTo(gw[id*D:(id+1)*D], d)
			if gp != nil {
				addTo(gp[p*D:(p+1)*D], d)
			}
		}
	}
	if dIn != nil {
		clear(dIn)
	}
}

func (l *embeddingLayer) describe(p *LayerPlan) {
	p.WeightOffset, p.WeightSize = l.wOff, l.wLen
	p.PositionOffset, p.PositionSize = l.pOff, l.pLen
	p.Units, p.Vocab, p.Positions = l.units, l.vocab, l.positions
}
