package nn

import "fmt"

// dropoutLayer is inverted dropout: while training (Gradient) each value is
// kept with probability 1-rate and scaled by 1/(1-rate), or zeroed; in
// Evaluate and Forward it is the identity. The mask is a function of the
// step's seed, the layer's depth-first index and the value's index in the
// batch (DropoutKeep), so every backend draws the same one.
type dropoutLayer struct {
	layerBase
	rate      float64
	threshold uint32 // keep when the 24 hash bits are >= threshold
	scale     float32
}

func init() {
	registerLayer(TypeDropout, []string{"rate"}, func(r *resolver, ls LayerSpec, cur shape) (Layer, error) {
		if err := needValues(cur); err != nil {
			return nil, err
		}
		if !(ls.Rate >= 0 && ls.Rate < 1) {
			return nil, fmt.Errorf("rate must be in [0, 1), got %g (the probability of dropping a value)", ls.Rate)
		}
		l := &dropoutLayer{rate: ls.Rate, threshold: dropoutThreshold(ls.Rate), scale: float32(1 / (1 - ls.Rate))}
		l.out = cur
		return l, nil
	})
}

func dropoutThreshold(rate float64) uint32 { return uint32(rate * (1 << 24)) }

func splitmix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

const golden64 = 0x9e3779b97f4a7c15

// dropoutKey is the per-step, per-layer key of the mask hash.
func dropoutKey(seed uint64, layer int) uint64 {
	return splitmix64(seed + uint64(layer)*golden64)
}

// dropoutBits are the 24 random bits of value i under key.
func dropoutBits(key uint64, i int) uint32 {
	return uint32(splitmix64(key+uint64(i)*golden64) >> 40)
}

// DropoutKeep reports whether the dropout layer with depth-first index layer
// (LayerPlan.Index) keeps value i of the batch (example e's value j is
// i = e*size + j) in the step with this seed:
//
//	key  = splitmix64(seed + layer*0x9e3779b97f4a7c15)
//	bits = splitmix64(key + i*0x9e3779b97f4a7c15) >> 40
//	keep = bits >= uint32(rate * 2^24)
//
// with splitmix64 the finaliser of SplitMix64 and arithmetic mod 2^64.
func DropoutKeep(seed uint64, layer, i int, rate float64) bool {
	return dropoutBits(dropoutKey(seed, layer), i) >= dropoutThreshold(rate)
}

type dropoutState struct{ mask []float32 } // 0 or the scale, per value

func (l *dropoutLayer) newState(b *wsBuilder, maxBatch int) any {
	return &dropoutState{mask: b.floats(maxBatch * l.outSize)}
}

func (l *dropoutLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	if !c.train || l.rate == 0 {
		copy(out, in)
		return
	}
	mask := st.(*dropoutState).mask[:len(in)]
	key := dropoutKey(c.seed, l.index)
	base := c.first * l.outSize // the batch's numbering, see SetFirstExample
	for i, v := range in {
		m := float32(0)
		if dropoutBits(key, base+i) >= l.threshold {
			m = l.scale
		}
		mask[i] = m
		out[i] = v * m
	}
}

func (l *dropoutLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	if dIn == nil {
		return
	}
	if !c.train || l.rate == 0 { // the forward pass let every value through
		copy(dIn, dOut)
		return
	}
	mask := st.(*dropoutState).mask[:len(dOut)]
	for i, g := range dOut {
		dIn[i] = g * mask[i]
	}
}

func (l *dropoutLayer) describe(p *LayerPlan) { p.Rate = l.rate }
