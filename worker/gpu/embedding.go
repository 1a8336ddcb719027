package gpu

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/nn"
)

// embedding looks token ids up in a table [vocab, units] and adds the
// position table's row, when the layer has one.
type embedding struct{ *layer }

// gatherVocab is the largest vocabulary whose token table gradient is
// gathered in a fixed order (embedding_backward_gather, rows*vocab*d
// comparisons); larger ones go through embedding_backward_scatter (atomics
// in CUDA, a thread per column in WebGPU).
const gatherVocab = 1024

func init() {
	register(nn.TypeEmbedding, layerType{tokens: true, build: func(bl *builder, l *layer, _ bool) (layerOps, error) {
		if l.InKind != "tokens" || l.Units < 1 || l.Vocab < 1 {
			return nil, fmt.Errorf("layer %s: an embedding on %s input %v", l.name, l.InKind, l.InShape)
		}
		// backward adds into the table's gradient, which a tied output
		// layer wrote first: zeroed before each backward pass.
		bl.nt.clears = append(bl.nt.clears, [2]int{l.WeightOffset, l.WeightSize})
		return embedding{l}, nil
	}})
}

func (l embedding) forward(p *pass, st *stack, i int) error {
	t, d := l.InShape[0], l.Units
	var pos Ptr
	if l.PositionSize > 0 {
		pos = p.wAt(l.PositionOffset)
	}
	return p.dev.Launch("embedding_forward", p.n*t*d, st.acts[i], p.wAt(l.WeightOffset), pos, st.acts[i+1], p.n*t, t, d, l.Vocab)
}

func (l embedding) backward(p *pass, st *stack, i int) error {
	in, dOut := st.acts[i], st.dacts[i+1]
	t, d := l.InShape[0], l.Units
	rows := p.n * t
	kernel, total := "embedding_backward_gather", l.Vocab*d
	if l.Vocab > gatherVocab {
		kernel, total = "embedding_backward_scatter", rows*d
	}
	if err := p.dev.Launch(kernel, total, in, dOut, p.gAt(l.WeightOffset), rows, d, l.Vocab); err != nil {
		return err
	}
	if l.PositionSize == 0 {
		return nil
	}
	return p.dev.Launch("embedding_backward_positions", l.Positions*d, dOut, p.gAt(l.PositionOffset), p.n, t, l.Positions, d)
}
