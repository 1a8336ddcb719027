package nn

import (
	"errors"
	"fmt"
	"math"
)

// Decoder runs a sequence model one token at a time for one sequence,
// keeping every attention layer's keys and values of the positions fed so
// far (a KV cache), so that each new token costs one position's work
// instead of a forward pass over the whole context. Position p's logits
// are those Forward computes at p for the same tokens (up to float32
// rounding), because every layer of a causal model works per position
// except attention, which at p reads only positions 0..p.
//
// A Decoder holds at most the model's context t (its input [t]) positions:
// with absolute position embeddings the window cannot slide, so a caller
// that needs more starts again (Reset). Not safe for concurrent use; one
// per goroutine.
type Decoder struct {
	m      *Model
	st     *stepStackState
	ctx    runCtx
	pos    int
	tokIn  []float32 // the one token fed to the embedding
	params []float32 // the parameters the cache was filled with
}

// stepLayer is a layer that runs one position of one sequence (in and out
// are that position's row), given what its state kept of the positions
// before (st, from newStepState).
type stepLayer interface {
	newStepState(b *wsBuilder) any
	step(c *runCtx, st any, params, in, out []float32, pos int)
}

// stepStackState is a stack's row buffers and its layers' step states.
type stepStackState struct {
	rows   [][]float32 // rows[i] is layer i's input row, rows[i+1] its output
	states []any
}

// NewDecoder returns a Decoder for the model, or an error if the model
// cannot be decoded one token at a time: it must read token ids [t] and
// output one row of scores per position, and every attention layer must
// be causal (a non-causal one lets early positions see later tokens,
// which a cache of earlier positions cannot give).
func (m *Model) NewDecoder() (*Decoder, error) {
	if len(m.Spec.Input) != 1 || m.LabelsPerExample != m.InputSize {
		return nil, fmt.Errorf("decoder: the model reads %v and outputs %d rows of scores; cached decoding needs token ids [t] in and one row per position out", m.Spec.Input, m.LabelsPerExample)
	}
	if err := checkSteppable(m.top, ""); err != nil {
		return nil, err
	}
	d := &Decoder{m: m, tokIn: make([]float32, 1)}
	b := &wsBuilder{}
	d.st = newStepStackState(m.top, b)
	b.allocShared()
	d.ctx.gemm = newGemmScratch()
	d.ctx.scratch = make([]float32, b.scratch)
	return d, nil
}

func checkSteppable(s *stack, prefix string) error {
	for i, l := range s.layers {
		lb := l.base()
		where := fmt.Sprintf("%s%d.%s", prefix, i, lb.typ)
		if _, ok := l.(stepLayer); !ok {
			return fmt.Errorf("decoder: layer %s does not work position by position, so it cannot be decoded with a cache", where)
		}
		if lb.index > 0 && lb.in.kind != shapeSeq {
			return fmt.Errorf("decoder: layer %s reads %v, not a sequence [t,d]; cached decoding needs every layer after the embedding to work per position", where, lb.in)
		}
		switch l := l.(type) {
		case *attentionLayer:
			if !l.causal {
				return fmt.Errorf("decoder: attention layer %s is not causal: its positions see later tokens, which a cache of earlier positions cannot give (set causal: true)", where)
			}
		case *residualLayer:
			if err := checkSteppable(l.body, where+"."); err != nil {
				return err
			}
		}
	}
	return nil
}

func newStepStackState(s *stack, b *wsBuilder) *stepStackState {
	st := &stepStackState{rows: make([][]float32, len(s.layers)+1), states: make([]any, len(s.layers))}
	for i, l := range s.layers {
		st.rows[i+1] = make([]float32, l.base().out.cols())
		st.states[i] = l.(stepLayer).newStepState(b)
	}
	return st
}

func (s *stack) step(c *runCtx, st *stepStackState, params, in []float32, pos int) []float32 {
	st.rows[0] = in
	for i, l := range s.layers {
		l.(stepLayer).step(c, st.states[i], params, st.rows[i], st.rows[i+1], pos)
	}
	return st.rows[len(s.layers)]
}

// Len is the number of positions fed since the last Reset.
func (d *Decoder) Len() int { return d.pos }

// Reset empties the cache for a new sequence.
func (d *Decoder) Reset() { d.pos, d.params = 0, nil }

// Step feeds token at the next position and returns the logits there (the
// scores of the token after it, NumClasses values), which belong to d and
// are overwritten by its next Step. Every Step of a sequence must use the
// same params: the cache holds keys and values computed with them.
func (d *Decoder) Step(params []float32, token int32) ([]float32, error) {
	m := d.m
	switch {
	case len(params) != m.NumParams:
		return nil, fmt.Errorf("decoder: %d parameters, the model has %d", len(params), m.NumParams)
	case d.pos >= m.InputSize:
		return nil, fmt.Errorf("decoder: the context of %d tokens is full; Reset and start a shorter sequence", m.InputSize)
	case token < 0 || int(token) >= m.embeddingVocab():
		return nil, fmt.Errorf("decoder: token %d is outside the vocabulary 0..%d", token, m.embeddingVocab()-1)
	case d.pos > 0 && &d.params[0] != &params[0]:
		return nil, errors.New("decoder: Step with other parameters than the sequence began with; Reset first")
	}
	d.params = params
	d.ctx.gemm.k = active.Load()
	d.tokIn[0] = float32(token)
	out := m.top.step(&d.ctx, d.st, params, d.tokIn, d.pos)
	d.pos++
	return out, nil
}

// embeddingVocab is the token ids the model's first layer reads.
func (m *Model) embeddingVocab() int {
	if e, ok := m.top.layers[0].(*embeddingLayer); ok {
		return e.vocab
	}
	return m.NumClasses
}

// ---- the layers' steps ----

func (l *embeddingLayer) newStepState(*wsBuilder) any { return nil }

func (l *embeddingLayer) step(c *runCtx, st any, params, in, out []float32, pos int) {
	D := l.units
	id := l.token(in[0], 0, pos)
	copy(out, params[l.wOff+id*D:l.wOff+(id+1)*D])
	if l.pLen > 0 {
		addTo(out, params[l.pOff+pos*D:l.pOff+(pos+1)*D])
	}
}

func (l *denseLayer) newStepState(*wsBuilder) any { return nil }

// step computes one row; a fused relu is left to the relu layer's own step.
func (l *denseLayer) step(c *runCtx, st any, params, in, out []float32, pos int) {
	copy(out, params[l.bOff:l.bOff+l.bLen])
	gemm(c.gemm, false, true, 1, l.dOut, l.dIn, 1, in, l.dIn, params[l.wOff:l.wOff+l.wLen], l.dIn, 1, out, l.dOut)
}

func (l *reluLayer) newStepState(*wsBuilder) any { return nil }

func (l *reluLayer) step(c *runCtx, st any, params, in, out []float32, pos int) {
	reluForward(in, out)
}

func (l *geluLayer) newStepState(*wsBuilder) any { return nil }

func (l *geluLayer) step(c *runCtx, st any, params, in, out []float32, pos int) {
	geluForward(in, out)
}

func (l *dropoutLayer) newStepState(*wsBuilder) any { return nil }

// step is the identity: decoding is inference, dropout is off.
func (l *dropoutLayer) step(c *runCtx, st any, params, in, out []float32, pos int) {
	copy(out, in)
}

func (l *layerNormLayer) newStepState(*wsBuilder) any { return nil }

func (l *layerNormLayer) step(c *runCtx, st any, params, in, out []float32, pos int) {
	l.normRow(params, in, out, nil)
}

func (l *residualLayer) newStepState(b *wsBuilder) any { return newStepStackState(l.body, b) }

func (l *residualLayer) step(c *runCtx, st any, params, in, out []float32, pos int) {
	y := l.body.step(c, st.(*stepStackState), params, in, pos)
	for i, v := range in {
		out[i] = v + y[i]
	}
}

// attentionCache is one attention layer's keys and values of the positions
// fed so far ([t, d] each, heads side by side as in q|k|v), and one
// position's buffers.
type attentionCache struct {
	k, v   []float32
	qkv    []float32 // [3d]: this position's q|k|v
	ctx    []float32 // [d]: the heads' outputs
	scores []float32 // [t]: one head's scores, then probabilities
}

func (l *attentionLayer) newStepState(*wsBuilder) any {
	return &attentionCache{
		k: make([]float32, l.t*l.d), v: make([]float32, l.t*l.d),
		qkv: make([]float32, 3*l.d), ctx: make([]float32, l.d), scores: make([]float32, l.t),
	}
}

// step projects the new position to q|k|v, appends k and v to the cache,
// and lets q attend to positions 0..pos, as forward's causal softmax does
// for row pos.
func (l *attentionLayer) step(c *runCtx, st any, params, in, out []float32, pos int) {
	s := st.(*attentionCache)
	D, Dh := l.d, l.dh
	copy(s.qkv, params[l.bqOff:l.bqOff+l.bqLen])
	gemm(c.gemm, false, true, 1, 3*D, D, 1, in, D, params[l.wqOff:l.wqOff+l.wqLen], D, 1, s.qkv, 3*D)
	copy(s.k[pos*D:(pos+1)*D], s.qkv[D:2*D])
	copy(s.v[pos*D:(pos+1)*D], s.qkv[2*D:])
	n := pos + 1
	p := s.scores[:n]
	for h := 0; h < l.heads; h++ {
		q := s.qkv[h*Dh : (h+1)*Dh]
		gemm(c.gemm, false, true, 1, n, Dh, l.scale, q, Dh, s.k[h*Dh:], D, 0, p, n)
		softmaxRows(p, 0, 1, n, false)
		gemm(c.gemm, false, false, 1, Dh, n, 1, p, n, s.v[h*Dh:], D, 0, s.ctx[h*Dh:], D)
	}
	copy(out, params[l.boOff:l.boOff+l.boLen])
	gemm(c.gemm, false, true, 1, D, D, 1, s.ctx, D, params[l.woOff:l.woOff+l.woLen], D, 1, out, D)
}

// logProbAt is log softmax(logits/temperature)[tok] in float64; a
// temperature of 0 (greedy) counts as 1, the model's own distribution.
func logProbAt(logits []float32, tok int32, temperature float64) float64 {
	if temperature == 0 {
		temperature = 1
	}
	top := math.Inf(-1)
	for _, v := range logits {
		top = max(top, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp((float64(v) - top) / temperature)
	}
	return (float64(logits[tok])-top)/temperature - math.Log(sum)
}
