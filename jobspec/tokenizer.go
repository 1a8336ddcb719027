package jobspec

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/tokenizer"
)

// TokenizerBPE is the `type` of a tokenizer trained for the job.
const TokenizerBPE = "bpe"

// MinTokenizerVocab is the smallest vocabulary a trained tokenizer may
// be asked for: the 256 bytes and at least one merge (a job on bytes
// alone needs no tokenizer).
const MinTokenizerVocab = 257

// Tokenizer is a text job's `tokenizer` key: a tokenizer File (as
// `crowdtrain tokenizer train` writes it) or {type: bpe, vocab: N},
// trained on the job's training split when the job is created. Either
// way the coordinator stores the tokenizer itself in Data when it
// creates the job, so a restarted coordinator (or a relay) cuts the same
// shards and decodes the same way without the file or a new training.
type Tokenizer struct {
	File  string `json:"file,omitempty"`
	Type  string `json:"type,omitempty"`
	Vocab int    `json:"vocab,omitempty"`
	// Data is the tokenizer in its file format (tokenizer.WriteTo).
	Data string `json:"data,omitempty"`
}

// tokenizerKeys are the keys of the mapping form.
var tokenizerKeys = []string{"type", "vocab"}

func decodeTokenizer(val *yaml.Node, s *Spec, _ given) error {
	switch val.Kind {
	case yaml.ScalarNode:
		if val.Value == "" {
			return Errorf("tokenizer", "want the path of a tokenizer file (crowdtrain tokenizer train writes one) or {type: bpe, vocab: N}")
		}
		s.Tokenizer = &Tokenizer{File: val.Value}
		return nil
	case yaml.MappingNode:
	default:
		return Errorf("tokenizer", "want the path of a tokenizer file or {type: bpe, vocab: N}")
	}
	if err := checkKeys("tokenizer.", val, tokenizerKeys); err != nil {
		return err
	}
	t := &Tokenizer{}
	for i := 0; i < len(val.Content); i += 2 {
		k, v := val.Content[i].Value, val.Content[i+1]
		var err error
		if k == "type" {
			err = decodeScalar(v, &t.Type)
		} else {
			err = decodeScalar(v, &t.Vocab)
		}
		if err != nil {
			return Errorf("tokenizer."+k, "%v", cleanYAMLError(err))
		}
	}
	if t.Type != TokenizerBPE {
		return Errorf("tokenizer.type", "%q is not a tokenizer type (want bpe; or give a tokenizer file's path instead of a mapping)", t.Type)
	}
	s.Tokenizer = t
	return nil
}

// validateTokenizer checks the tokenizer key against the data set and the
// model: text data only, a vocabulary in range, and the model's
// embedding reading exactly the tokenizer's ids.
func (s Spec) validateTokenizer() error {
	t := s.Tokenizer
	if t == nil {
		return nil
	}
	if !s.Dataset.IsText() {
		return Errorf("tokenizer", "only a text data set is tokenized, and %s is not text: leave tokenizer out", s.Dataset)
	}
	switch {
	case t.File != "" && t.Type != "":
		return Errorf("tokenizer", "give a tokenizer file or {type: bpe, vocab: N}, not both")
	case t.File == "" && t.Type == "" && t.Data == "":
		return Errorf("tokenizer", "want the path of a tokenizer file or {type: bpe, vocab: N}")
	case t.Type != "" && t.Type != TokenizerBPE:
		return Errorf("tokenizer.type", "%q is not a tokenizer type (want bpe)", t.Type)
	case t.Type != "" && (t.Vocab < MinTokenizerVocab || t.Vocab > tokenizer.MaxVocab):
		return Errorf("tokenizer.vocab", "must be in %d..%d (the 256 bytes and the merges learnt), got %d", MinTokenizerVocab, tokenizer.MaxVocab, t.Vocab)
	}
	if t.Vocab == 0 {
		return nil // a file not read yet: the coordinator checks it when it reads it
	}
	return s.CheckTokenizerVocab(t.Vocab)
}

// CheckTokenizerVocab checks that the model's embedding reads a
// vocabulary of exactly vocab token ids and its output scores as many.
func (s Spec) CheckTokenizerVocab(vocab int) error {
	emb, ok := EmbeddingVocab(s.Model)
	if !ok {
		return Errorf("model", "a tokenized text job's model starts with an embedding layer of vocab %d (the tokenizer's size); this one has none", vocab)
	}
	if emb != vocab {
		return Errorf("tokenizer", "the tokenizer has %d tokens but the model's embedding reads a vocab of %d: make them equal (model embedding vocab: %d, or a tokenizer of %d)", vocab, emb, vocab, emb)
	}
	// A tied output layer scores the embedding's rows: it has no units.
	if n := len(s.Model.Layers); n > 0 && s.Model.Layers[n-1].Type == nn.TypeDense && !s.Model.Layers[n-1].Tied && s.Model.Layers[n-1].Units != vocab {
		return Errorf("model", "the last layer scores %d tokens but the tokenizer has %d: give it units %d", s.Model.Layers[n-1].Units, vocab, vocab)
	}
	return nil
}

// EmbeddingVocab is the vocab of the model's first layer, when that is an
// embedding.
func EmbeddingVocab(m nn.ModelSpec) (int, bool) {
	if len(m.Layers) == 0 || m.Layers[0].Type != nn.TypeEmbedding {
		return 0, false
	}
	return m.Layers[0].Vocab, true
}

// Describe says which tokenizer, for logs and errors.
func (t *Tokenizer) Describe() string {
	switch {
	case t == nil:
		return "bytes"
	case t.File != "":
		return fmt.Sprintf("tokenizer file %s", t.File)
	}
	return fmt.Sprintf("bpe tokenizer of %d tokens trained on the job's training split", t.Vocab)
}
