package worker

import (
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
)

// A shard of token ids the model's embedding cannot read is refused,
// naming the shard, before any forward pass could panic on it.
func TestShardFitsChecksTheEmbeddingVocabulary(t *testing.T) {
	// An embedding of 300 token ids scoring 1024 (a model a coordinator
	// should never send; a hostile one might).
	m, err := nn.NewModel(nn.ModelSpec{Input: []int{4}, Layers: []nn.LayerSpec{
		{Type: nn.TypeEmbedding, Vocab: 300, Units: 8, Positions: 4},
		{Type: nn.TypeDense, Units: 1024},
	}})
	if err != nil {
		t.Fatal(err)
	}
	shard := func(classes int) *dataset.Set {
		return &dataset.Set{Name: "s", Elem: dataset.Tokens16, Shape: []int{4}, Kind: dataset.NextTokens, Classes: classes, N: 1, U16: make([]uint16, 5), Stride: 5}
	}
	if err := shardFits(shard(300), m, "/shards/j/3"); err != nil {
		t.Fatalf("a shard of the embedding's vocabulary: %v", err)
	}
	err = shardFits(shard(1024), m, "/shards/j/3")
	if err == nil || !strings.Contains(err.Error(), "/shards/j/3") || !strings.Contains(err.Error(), "embedding vocabulary of 300") {
		t.Fatalf("a shard of 1024 tokens for an embedding of 300: %v; want it refused, naming the shard", err)
	}
}
