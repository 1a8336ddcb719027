package tokenizer

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The classic example, cut into one piece: the most frequent pair first,
// the lower pair of ids on a tie, and no pair seen only once.
func TestTrainSmall(t *testing.T) {
	tok, err := Train(1000, []byte("aaabdaaabac"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Pair{{'a', 'a'}, {'a', 'b'}, {256, 257}}
	if !slices.Equal(tok.Merges(), want) || tok.VocabSize() != 259 || string(tok.Token(258)) != "aaab" {
		t.Fatalf("merges %v, vocabulary %d; want %v, 259 with token 258 \"aaab\"", tok.Merges(), tok.VocabSize(), want)
	}
	if got := tok.Encode([]byte("aaabdaaabac")); !slices.Equal(got, []int32{258, 'd', 258, 'a', 'c'}) {
		t.Fatalf("Encode = %v", got)
	}
	for _, v := range []int{255, MaxVocab + 1} {
		if _, err := Train(v, []byte("x")); err == nil || !strings.Contains(err.Error(), "want 256") {
			t.Errorf("Train(%d) = %v, want an error giving the range", v, err)
		}
	}
	if _, err := tok.Decode([]int32{'a', 259}); err == nil || !strings.Contains(err.Error(), "id 259 at position 1") {
		t.Errorf("Decode of id 259: %v", err)
	}
}

// sourceCorpus is this package's own Go files: code, comments and tests.
var sourceCorpus = sync.OnceValues(func() ([][]byte, error) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var docs [][]byte
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
	return docs, nil
})

// sourceTokenizer is a 1024-token tokenizer trained on sourceCorpus.
var sourceTokenizer = sync.OnceValues(func() (*Tokenizer, error) {
	docs, err := sourceCorpus()
	if err != nil {
		return nil, err
	}
	return Train(1024, docs...)
})

func mustSourceTokenizer(tb testing.TB) *Tokenizer {
	tb.Helper()
	tok, err := sourceTokenizer()
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func roundTrip(t *testing.T, tok *Tokenizer, text []byte) []int32 {
	t.Helper()
	ids := tok.Encode(text)
	for i, id := range ids {
		if id < 0 || int(id) >= tok.VocabSize() {
			t.Fatalf("Encode(%q)[%d] = %d, outside the vocabulary of %d", text, i, id, tok.VocabSize())
		}
	}
	back, err := tok.Decode(ids)
	if err != nil || !bytes.Equal(back, text) {
		t.Fatalf("Decode(Encode(%q)) = %q, %v", text, back, err)
	}
	return ids
}

// Any bytes encode, and decode to themselves: random bytes, text of mixed
// scripts, every byte value, code it was not trained on.
func TestRoundTrip(t *testing.T) {
	tok := mustSourceTokenizer(t)
	if tok.VocabSize() != 1024 {
		t.Fatalf("vocabulary %d, want 1024", tok.VocabSize())
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	roundTrip(t, tok, nil)
	roundTrip(t, tok, all)
	roundTrip(t, tok, []byte(strings.Repeat("\t", 1000)+"x"))
	rng := rand.New(rand.NewPCG(3, 4))
	words := []string{"func", " return", " err", "\n\t", "Καλημέρα", " 世界", "\xf0\x9f\x98", "😀", "\r\n", "  ", "123456", ":=", "\x00"}
	for range 500 {
		var b []byte
		for range rng.IntN(64) {
			if rng.IntN(3) == 0 {
				b = append(b, byte(rng.IntN(256)))
			} else {
				b = append(b, words[rng.IntN(len(words))]...)
			}
		}
		roundTrip(t, tok, b)
	}
	// Code it was trained on takes fewer tokens than bytes: the merges
	// compress.
	docs, err := sourceCorpus()
	if err != nil {
		t.Fatal(err)
	}
	ids := roundTrip(t, tok, docs[0])
	if r := float64(len(docs[0])) / float64(len(ids)); r < 2 {
		t.Errorf("%.2f bytes a token on training code; want at least 2", r)
	}
}

// Encoding a training piece gives the tokens training left it as: the
// per-piece encoder and the incremental trainer apply the same merges in
// the same order.
func TestEncodeMatchesTraining(t *testing.T) {
	docs, err := sourceCorpus()
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTrainer()
	for _, d := range docs {
		tr.Add(d)
	}
	merges, words := tr.learn(768)
	tok, err := New(merges)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range words {
		if got := tok.Encode([]byte(w.piece)); !slices.Equal(got, w.syms) {
			t.Fatalf("Encode(%q) = %v; training left it as %v", w.piece, got, w.syms)
		}
	}
}

// The same texts, in any order, give the same file.
func TestTrainIsDeterministic(t *testing.T) {
	docs, err := sourceCorpus()
	if err != nil {
		t.Fatal(err)
	}
	var first []byte
	for k := range 3 {
		d := slices.Clone(docs)
		rand.New(rand.NewPCG(uint64(k), 9)).Shuffle(len(d), func(i, j int) { d[i], d[j] = d[j], d[i] })
		tok, err := Train(700, d...)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if _, err := tok.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			first = b.Bytes()
		} else if !bytes.Equal(b.Bytes(), first) {
			t.Fatalf("training on the same texts in another order wrote another file")
		}
	}
}

// Concurrent encoders share the cache safely and agree.
func TestEncodeConcurrently(t *testing.T) {
	tok := mustSourceTokenizer(t)
	docs, err := sourceCorpus()
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := New(tok.Merges())
	if err != nil {
		t.Fatal(err)
	}
	want := fresh.Encode(docs[len(docs)-1])
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for _, d := range docs {
				tok.Encode(d)
			}
			if got := tok.Encode(docs[len(docs)-1]); !slices.Equal(got, want) {
				t.Error("concurrent Encode disagrees")
			}
		})
	}
	wg.Wait()
}
