package coordinator

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
)

// A text job's embedding reads the data's tokens: gpt-small (a 4096-token
// vocabulary) on text read as bytes is refused, naming the tokenizer it
// needs; a too small vocabulary is refused naming the right one; charlm's
// 256 fits.
func TestTextJobVocabularyMustBeTheData(t *testing.T) {
	text := bytes.Repeat([]byte("func main() { println(\"hello\") }\n"), 400)
	load := func(ctx int) *dataset.Set {
		train, _, err := dataset.TextSplits("text", "dataset", text, ctx, 0.1)
		if err != nil {
			t.Fatal(err)
		}
		return train
	}

	gpt, err := jobspec.Load("gpt-small")
	if err != nil {
		t.Fatal(err)
	}
	if gpt.Dataset.Name != dataset.GoSource {
		t.Errorf("gpt-small's data set is %q, want %q", gpt.Dataset.Name, dataset.GoSource)
	}
	err = CheckData(&gpt, load(256))
	var se *jobspec.Error
	if !errors.As(err, &se) || se.Key != "model" || !strings.Contains(err.Error(), "vocabulary of 4096") || !strings.Contains(err.Error(), "give the job a tokenizer of 4096 tokens") {
		t.Errorf("gpt-small on bytes: %v, want a model error naming the tokenizer", err)
	}

	small := gpt
	small.Model = nn.Transformer(nn.TransformerConfig{Context: 16, Width: 8, Blocks: 1, Heads: 2, Vocab: 64, Tied: true})
	if err := CheckData(&small, load(16)); err == nil || !strings.Contains(err.Error(), "vocabulary of 64 tokens but text-train has 256: give the embedding vocab: 256") {
		t.Errorf("vocab 64 on bytes: %v", err)
	}

	bytesTied := small
	bytesTied.Model = nn.Transformer(nn.TransformerConfig{Context: 16, Width: 8, Blocks: 1, Heads: 2, Vocab: 256, Tied: true})
	if err := CheckData(&bytesTied, load(16)); err != nil {
		t.Errorf("a tied byte model: %v", err)
	}
	charlm, err := jobspec.Load("charlm")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckData(&charlm, load(128)); err != nil {
		t.Errorf("charlm: %v", err)
	}
}
