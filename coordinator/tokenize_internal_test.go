package coordinator

import (
	"testing"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
)

// Two jobs on the same text share a load only when they tokenize it
// alike: bytes, or the same merges.
func TestDataKeySeparatesTokenizers(t *testing.T) {
	text := dataset.Spec{Type: dataset.TypeText, Path: "/data/src", Glob: "**/*.go", ValFraction: 0.1}
	spec := func(data string) jobspec.Spec {
		s := jobspec.Spec{Dataset: text}
		if data != "" {
			s.Tokenizer = &jobspec.Tokenizer{Type: jobspec.TokenizerBPE, Vocab: 1024, Data: data}
		}
		return s
	}
	bytes, a, a2, b := jobDataKey(spec(""), 64), jobDataKey(spec("merges a"), 64), jobDataKey(spec("merges a"), 64), jobDataKey(spec("merges b"), 64)
	if bytes == a || a == b || a != a2 {
		t.Fatalf("keys: bytes %q, a %q, a again %q, b %q; want the same only for the same tokenizer", bytes, a, a2, b)
	}
	if bytes != dataKey(text, 64) {
		t.Errorf("a byte-level job's key %q changed from %q", bytes, dataKey(text, 64))
	}
}
