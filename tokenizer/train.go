package tokenizer

import (
	"fmt"
	"slices"
)

// MinPairCount is the fewest occurrences a pair needs to be merged: a pair
// seen once would only memorise the training text. Train stops early,
// with a smaller vocabulary, when no pair occurs this often.
const MinPairCount = 2

// Trainer counts the pieces (Pieces) of training text; Train learns the
// merges from the counts. The counts are all it keeps, so the texts added
// may be dropped after Add.
type Trainer struct {
	counts map[string]*int64 // a pointer: counting a known piece is a lookup, not an assignment
	bytes  int64
}

// NewTrainer returns a Trainer with no text.
func NewTrainer() *Trainer { return &Trainer{counts: make(map[string]*int64)} }

// Add counts the pieces of text, a document: no piece crosses from one
// document into the next.
func (tr *Trainer) Add(text []byte) {
	tr.bytes += int64(len(text))
	for p := range Pieces(text) {
		if c := tr.counts[string(p)]; c != nil {
			*c++
			continue
		}
		c := new(int64)
		*c = 1
		tr.counts[string(p)] = c
	}
}

// Bytes is the bytes of text added.
func (tr *Trainer) Bytes() int64 { return tr.bytes }

// UniquePieces is the number of distinct pieces counted.
func (tr *Trainer) UniquePieces() int { return len(tr.counts) }

// Train returns a tokenizer of vocab tokens (256..MaxVocab), or fewer when
// no pair occurs MinPairCount times before then. The result depends only
// on the counts: the same texts, in any order, give the same merges.
func (tr *Trainer) Train(vocab int) (*Tokenizer, error) {
	if vocab < 256 || vocab > MaxVocab {
		return nil, fmt.Errorf("tokenizer: a vocabulary of %d: want 256 (the bytes alone) to %d", vocab, MaxVocab)
	}
	merges, _ := tr.learn(vocab - 256)
	return New(merges)
}

// Train trains a tokenizer of vocab tokens on docs (Trainer).
func Train(vocab int, docs ...[]byte) (*Tokenizer, error) {
	tr := NewTrainer()
	for _, d := range docs {
		tr.Add(d)
	}
	return tr.Train(vocab)
}

// word is a distinct piece of the training text as its current tokens,
// and how often it occurs.
type word struct {
	piece string
	syms  []int32
	freq  int64
}

// learn finds up to n merges. It keeps, for every adjacent pair, its count
// over all words and the words it occurs in (a list that may hold words
// that no longer have it, checked on use), and a heap of counts. Each merge
// re-counts only the words that hold the merged pair, and pushes the pairs
// whose counts changed; heap entries whose count is out of date are
// skipped when they surface. It returns the merges and the words as the
// merges left them.
func (tr *Trainer) learn(n int) ([]Pair, []word) {
	pieces := make([]string, 0, len(tr.counts))
	for p := range tr.counts {
		pieces = append(pieces, p)
	}
	slices.Sort(pieces) // a fixed order of words, for reproducible work
	words := make([]word, 0, len(pieces))
	counts := make(map[uint64]int64)
	where := make(map[uint64][]int32)
	for _, p := range pieces {
		syms := make([]int32, len(p))
		for i := range len(p) {
			syms[i] = int32(p[i])
		}
		wi := int32(len(words))
		freq := *tr.counts[p]
		words = append(words, word{piece: p, syms: syms, freq: freq})
		for j := 0; j+1 < len(syms); j++ {
			k := Pair{syms[j], syms[j+1]}.key()
			counts[k] += freq
			where[k] = append(where[k], wi)
		}
	}
	h := make(pairHeap, 0, len(counts))
	for k, c := range counts {
		h = append(h, heapEntry{c, k})
	}
	h.init()
	stamp := make([]int32, len(words)) // the last merge that visited a word
	before := make(map[uint64]int64)   // counts as they were before this merge
	var merges []Pair
	for len(merges) < n && len(h) > 0 {
		e := h.pop()
		if counts[e.key] != e.count {
			continue // out of date: a fresher entry exists or the pair is gone
		}
		if e.count < MinPairCount {
			break
		}
		p := Pair{int32(e.key >> 32), int32(uint32(e.key))}
		id := int32(256 + len(merges))
		merges = append(merges, p)
		clear(before)
		add := func(k uint64, delta int64) {
			if _, ok := before[k]; !ok {
				before[k] = counts[k]
			}
			counts[k] += delta
		}
		for _, wi := range where[e.key] {
			if stamp[wi] == id {
				continue
			}
			stamp[wi] = id
			w := &words[wi]
			if !hasPair(w.syms, p) {
				continue
			}
			for j := 0; j+1 < len(w.syms); j++ {
				add(Pair{w.syms[j], w.syms[j+1]}.key(), -w.freq)
			}
			w.syms = mergePair(w.syms, p, id)
			for j := 0; j+1 < len(w.syms); j++ {
				k := Pair{w.syms[j], w.syms[j+1]}.key()
				add(k, w.freq)
				if w.syms[j] == id || w.syms[j+1] == id {
					where[k] = append(where[k], wi)
				}
			}
		}
		delete(where, e.key)
		for k, old := range before {
			switch c := counts[k]; {
			case c == 0:
				delete(counts, k)
				delete(where, k)
			case c != old:
				h.push(heapEntry{c, k})
			}
		}
	}
	return merges, words
}

func hasPair(syms []int32, p Pair) bool {
	for j := 0; j+1 < len(syms); j++ {
		if syms[j] == p.Left && syms[j+1] == p.Right {
			return true
		}
	}
	return false
}

// heapEntry is a pair's count when it was pushed.
type heapEntry struct {
	count int64
	key   uint64
}

// before orders the heap: the higher count first, then the lower pair
// (left id, then right id), a fixed order for ties.
func (a heapEntry) before(b heapEntry) bool {
	return a.count > b.count || a.count == b.count && a.key < b.key
}

// pairHeap is a binary heap of entries, the first by before at the top.
type pairHeap []heapEntry

func (h pairHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pairHeap) push(e heapEntry) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s[i].before(s[parent]) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *pairHeap) pop() heapEntry {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	h.down(0)
	return top
}

func (h pairHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].before(h[l]) {
			m = r
		}
		if !h[m].before(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
