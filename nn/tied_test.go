package nn

import (
	"strings"
	"testing"
)

// tinyGPT is a transformer small enough for the naive reference: every
// layer gpt-small has, with a vocabulary larger than the width.
var tinyGPT = TransformerConfig{Context: 6, Width: 8, Blocks: 2, Heads: 2, Vocab: 13, Tied: true}

// TestTiedTransformerGradients checks every parameter and input gradient of
// a tiny tied transformer against finite differences: the shared token
// table's gradient must be the embedding's scatter plus the output layer's
// product, or the tied rows disagree.
func TestTiedTransformerGradients(t *testing.T) {
	defer func() { denseForwardMode = 0 }()
	for _, mode := range []int{1, 2} {
		denseForwardMode = mode
		gradCheck(t, Transformer(tinyGPT), 3, 1<<30, 1<<30, uint64(40+mode))
	}
}

// TestTiedTransformerLayout: tying stores the token table once, so the
// tied model has vocab*d parameters fewer than the untied one and no
// output weight; the output layer reads the embedding's tensor.
func TestTiedTransformerLayout(t *testing.T) {
	tied := mustModel(t, Transformer(tinyGPT))
	untiedCfg := tinyGPT
	untiedCfg.Tied = false
	untied := mustModel(t, Transformer(untiedCfg))
	if d := untied.NumParams - tied.NumParams; d != tinyGPT.Vocab*tinyGPT.Width {
		t.Errorf("untied %d - tied %d = %d parameters, want vocab*d = %d", untied.NumParams, tied.NumParams, d, tinyGPT.Vocab*tinyGPT.Width)
	}
	last := tied.Layout[len(tied.Layout)-1]
	if !strings.HasSuffix(last.Name, ".dense.bias") || last.Size != tinyGPT.Vocab {
		t.Errorf("last tensor %v, want the tied output's bias [%d]", last, tinyGPT.Vocab)
	}
	for _, pt := range tied.Layout {
		if strings.HasSuffix(pt.Name, ".dense.weight") && pt.Shape[0] == tinyGPT.Vocab {
			t.Errorf("tied model has an output weight %v", pt)
		}
	}
	plan := tied.Plan()
	out := plan[len(plan)-1]
	if !out.Tied || out.WeightOffset != plan[0].WeightOffset || out.WeightSize != tinyGPT.Vocab*tinyGPT.Width {
		t.Errorf("output plan %+v does not use the embedding's weight at %d", out, plan[0].WeightOffset)
	}
	if tied.NumClasses != tinyGPT.Vocab || tied.LabelsPerExample != tinyGPT.Context || tied.InputVocab() != tinyGPT.Vocab {
		t.Errorf("tied model: %d classes, %d labels per example, input vocab %d", tied.NumClasses, tied.LabelsPerExample, tied.InputVocab())
	}
}

// TestTransformerPresets: charlm keeps its size and untied output;
// gpt-small has the documented size (docs/JOBS.md) and a tied output.
func TestTransformerPresets(t *testing.T) {
	charlm := mustPreset(t, "charlm")
	if charlm.NumParams != 875520 || charlm.InputVocab() != 256 || charlm.Plan()[len(charlm.Plan())-1].Tied {
		t.Errorf("charlm: %d parameters, vocab %d; want 875,520, 256, untied", charlm.NumParams, charlm.InputVocab())
	}
	gpt := mustPreset(t, "gpt-small")
	const d, vocab, ctx, blocks = 384, 4096, 256, 6
	block := 2*d + (3*d*d + 3*d + d*d + d) + 2*d + (4*d*d + 4*d + 4*d*d + d)
	want := vocab*d + ctx*d + blocks*block + 2*d + vocab
	if gpt.NumParams != want || want != 12322816 {
		t.Errorf("gpt-small: %d parameters, want %d (12,322,816)", gpt.NumParams, want)
	}
	if gpt.InputSize != ctx || gpt.NumClasses != vocab || gpt.InputVocab() != vocab || !gpt.Plan()[len(gpt.Plan())-1].Tied {
		t.Errorf("gpt-small: input %d, %d classes, vocab %d, output tied %v", gpt.InputSize, gpt.NumClasses, gpt.InputVocab(), gpt.Plan()[len(gpt.Plan())-1].Tied)
	}
	if mlp := mustPreset(t, "mnist-mlp"); mlp.InputVocab() != 0 {
		t.Errorf("mnist-mlp InputVocab %d, want 0", mlp.InputVocab())
	}
}
