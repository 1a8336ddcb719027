package jobspec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
)

// TestTransformerLayersInASpec: the sequence layers' keys, residual bodies
// and the float and bool fields decode into the model, and a key a nested
// layer does not know is named with its whole path.
func TestTransformerLayersInASpec(t *testing.T) {
	s, err := Parse([]byte(`name: lm
model:
  input: [16]
  layers:
    - {type: embedding, vocab: 256, units: 8, positions: 16}
    - type: residual
      layers:
        - {type: layernorm, eps: 1.0e-6}
        - {type: attention, heads: 2, causal: true}
        - {type: dropout, rate: 0.1}
    - {type: dense, tied: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := nn.ModelSpec{Input: []int{16}, Layers: []nn.LayerSpec{
		{Type: "embedding", Vocab: 256, Units: 8, Positions: 16},
		{Type: "residual", Layers: []nn.LayerSpec{
			{Type: "layernorm", Eps: 1e-6},
			{Type: "attention", Heads: 2, Causal: true},
			{Type: "dropout", Rate: 0.1},
		}},
		{Type: "dense", Tied: true},
	}}
	if !reflect.DeepEqual(s.Model, want) {
		t.Errorf("model %+v, want %+v", s.Model, want)
	}
	if _, err := nn.NewModel(s.Model); err != nil {
		t.Errorf("NewModel: %v", err)
	}
	_, err = Parse([]byte(`name: lm
model:
  input: [16]
  layers:
    - {type: embedding, vocab: 256, units: 8}
    - type: residual
      layers:
        - {type: attention, head: 2}
`))
	if err == nil || !strings.Contains(err.Error(), "model.layers[1].layers[0].head") {
		t.Errorf("unknown nested key: %v", err)
	}
}
