package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/tokenizer"
)

// PrepareTokenizer makes a tokenized text job's tokenizer part of its
// spec: it reads the tokenizer file, or trains {type: bpe, vocab: N} on
// the job's training split (deterministic: the same text gives the same
// merges), and stores the result in spec.Tokenizer.Data, so the stored
// spec alone rebuilds the same shards and decodes the same way after a
// restart or on a relay. It then checks the tokenizer's size against the
// model's embedding. A spec whose tokenizer is already stored is checked
// only.
func PrepareTokenizer(spec *jobspec.Spec) error {
	if spec.Tokenizer == nil {
		return nil
	}
	// A copy: specs are values, and one copied from this one must not
	// change with it.
	t := new(jobspec.Tokenizer)
	*t = *spec.Tokenizer
	spec.Tokenizer = t
	if t.Data == "" {
		var tok *tokenizer.Tokenizer
		switch {
		case t.File != "":
			var err error
			if tok, err = tokenizer.Load(t.File); err != nil {
				problem := err.Error()
				if errors.Is(err, fs.ErrNotExist) {
					problem = t.File + " does not exist"
				}
				return &jobspec.Error{Key: "tokenizer", Problem: problem + ". Fix: name a file `crowdtrain tokenizer train` wrote"}
			}
		case t.Type == jobspec.TokenizerBPE:
			docs, desc, err := dataset.TrainingDocs(spec.Dataset)
			if err != nil {
				return specError(err, "dataset")
			}
			if tok, err = tokenizer.Train(t.Vocab, docs...); err != nil {
				return &jobspec.Error{Key: "tokenizer.vocab", Problem: err.Error()}
			}
			if tok.VocabSize() < t.Vocab {
				return &jobspec.Error{Key: "tokenizer.vocab", Problem: fmt.Sprintf(
					"the training split (%s) has pairs for only %d tokens of the %d asked: lower tokenizer.vocab (and the model's embedding vocab and output units) to %d, or use more text",
					desc, tok.VocabSize(), t.Vocab, tok.VocabSize())}
			}
		default:
			return &jobspec.Error{Key: "tokenizer", Problem: "want the path of a tokenizer file or {type: bpe, vocab: N}"}
		}
		var b strings.Builder
		if _, err := tok.WriteTo(&b); err != nil {
			return err
		}
		t.Data, t.Vocab = b.String(), tok.VocabSize()
	}
	tok, err := jobTokenizer(*spec)
	if err != nil {
		return err
	}
	if tok.VocabSize() != t.Vocab {
		return &jobspec.Error{Key: "tokenizer.vocab", Problem: fmt.Sprintf("is %d but the stored tokenizer has %d tokens", t.Vocab, tok.VocabSize())}
	}
	return spec.CheckTokenizerVocab(tok.VocabSize())
}

// jobTokenizer reads the tokenizer a prepared spec stores (nil: none).
func jobTokenizer(spec jobspec.Spec) (*tokenizer.Tokenizer, error) {
	t := spec.Tokenizer
	if t == nil {
		return nil, nil
	}
	if t.Data == "" {
		return nil, &jobspec.Error{Key: "tokenizer", Problem: "is not prepared: the coordinator reads or trains the tokenizer when it creates the job (PrepareTokenizer)"}
	}
	tok, err := tokenizer.Read(strings.NewReader(t.Data), "the job's tokenizer")
	if err != nil {
		return nil, &jobspec.Error{Key: "tokenizer", Problem: err.Error()}
	}
	return tok, nil
}

// tokenizerKey identifies a spec's tokenizer in the data sets' cache, so
// two jobs on the same text with different tokenizers never share shards.
func tokenizerKey(spec jobspec.Spec) string {
	if spec.Tokenizer == nil {
		return "bytes"
	}
	sum := sha256.Sum256([]byte(spec.Tokenizer.Data))
	return "bpe:" + hex.EncodeToString(sum[:12])
}

// resolveTokenizer confines a tokenizer file named by a spec submitted
// over the API to the coordinator's data root, as its data files are.
func resolveTokenizer(spec *jobspec.Spec, root string) error {
	t := spec.Tokenizer
	if t == nil || t.File == "" {
		return nil
	}
	p, err := dataset.ResolveFileUnder(root, "tokenizer", t.File, false)
	if err != nil {
		return specError(err, "tokenizer")
	}
	t.File = p
	return nil
}

// textBytes is how many bytes of text the label tokens of a tokenized
// set's windows stand for: bits per byte divide the evaluation's total
// nats by it.
func textBytes(set *dataset.Set, tok *tokenizer.Tokenizer) int64 {
	if tok == nil || set.Elem != dataset.Tokens16 || len(set.Shape) != 1 {
		return 0
	}
	t := set.Shape[0]
	var n int64
	for i := 0; i < set.N; i++ {
		start := i * set.Stride
		for _, id := range set.U16[start+1 : start+1+t] {
			n += int64(len(tok.Token(int32(id))))
		}
	}
	return n
}

// viewSpec is a spec as the API shows it: a tokenizer without its data
// (up to 700 KB, in every listing of the jobs); the stored spec and an
// exported model's metadata keep it.
func viewSpec(spec jobspec.Spec) jobspec.Spec {
	if spec.Tokenizer != nil {
		t := *spec.Tokenizer
		t.Data = ""
		spec.Tokenizer = &t
	}
	return spec
}
