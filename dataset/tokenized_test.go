package dataset

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/tokenizer"
)

// With a tokenizer, a text loads as its token ids: Tokens16 windows whose
// vocabulary is the tokenizer's, that decode to the text of the split; a
// shard of them round-trips, and one holding an id at or above the
// vocabulary is refused.
func TestTokenizedTextSplits(t *testing.T) {
	text := strings.Repeat("func main() {\n\tfmt.Println(\"hello, world\")\n}\n", 60)
	path := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Train(300, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	train, val, err := TextSource{Path: path, ValFraction: 0.2}.Load(Options{Context: 8, Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Set{train, val} {
		if s.Elem != Tokens16 || s.Classes != tok.VocabSize() || s.U8 != nil || s.Kind != NextTokens || s.Stride != 8 {
			t.Fatalf("%s: %s; want uint16 windows of 8 over %d tokens", s.Name, s.Describe(), tok.VocabSize())
		}
	}
	ids := make([]int32, len(train.U16))
	for i, v := range train.U16 {
		ids[i] = int32(v)
	}
	got, err := tok.Decode(ids)
	cut := trainCut(len(text), 0.2)
	if err != nil || string(got) != text[:cut] {
		t.Fatalf("the training tokens decode to %d bytes (%v), want the first %d of the text", len(got), err, cut)
	}
	if len(ids) >= cut/2 {
		t.Errorf("%d tokens for %d bytes: the tokenizer merged little", len(ids), cut)
	}
	b := EncodeShard(train, Shard{Indices: []int{0, 1}})
	back, err := DecodeShard(b, 10)
	if err != nil || back.Elem != Tokens16 || back.Classes != tok.VocabSize() {
		t.Fatalf("shard round trip: %v, %+v", err, back)
	}
	// The last token of the shard's body set to the vocabulary size.
	binary.LittleEndian.PutUint16(b[len(b)-2:], uint16(tok.VocabSize()))
	if _, err := DecodeShard(b, 10); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Fatalf("a shard with token %d of a %d-token vocabulary: %v; want it refused", tok.VocabSize(), tok.VocabSize(), err)
	}
}
