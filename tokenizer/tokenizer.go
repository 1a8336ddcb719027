package tokenizer

import (
	"fmt"
	"slices"
	"sync"
)

// MaxVocab is the largest vocabulary: ids fit in 16 bits, the width of a
// token shard's elements.
const MaxVocab = 1 << 16

// Pair is two adjacent tokens, left then right, that a merge joins.
type Pair struct{ Left, Right int32 }

func (p Pair) key() uint64 { return uint64(uint32(p.Left))<<32 | uint64(uint32(p.Right)) }

// Tokenizer is a byte-level BPE vocabulary: ids 0..255 are the bytes and
// id 256+i is Merges()[i] joined. It is safe for concurrent use.
type Tokenizer struct {
	merges []Pair
	tokens [][]byte         // the bytes of each id
	rank   map[uint64]int32 // pair key -> the id it merges into

	mu    sync.RWMutex
	cache map[string][]int32 // piece -> ids, emptied past maxCached pieces
}

// maxCached bounds the per-piece cache: past it the cache starts again,
// so a stream of unique pieces cannot grow it without bound.
const maxCached = 1 << 18

// New builds a tokenizer from its merges, in order: merge i joins two
// tokens of ids below 256+i into id 256+i. It refuses an id out of range,
// a repeated pair, or more than MaxVocab-256 merges.
func New(merges []Pair) (*Tokenizer, error) {
	if len(merges) > MaxVocab-256 {
		return nil, fmt.Errorf("tokenizer: %d merges make a vocabulary of %d, over the limit of %d", len(merges), 256+len(merges), MaxVocab)
	}
	t := &Tokenizer{merges: append([]Pair(nil), merges...), tokens: make([][]byte, 256, 256+len(merges)), rank: make(map[uint64]int32, len(merges))}
	for b := range 256 {
		t.tokens[b] = []byte{byte(b)}
	}
	for i, m := range merges {
		id := int32(256 + i)
		if m.Left < 0 || m.Left >= id || m.Right < 0 || m.Right >= id {
			return nil, fmt.Errorf("tokenizer: merge %d (id %d) joins %d and %d: ids must be in 0..%d, tokens made before it", i, id, m.Left, m.Right, id-1)
		}
		if prev, dup := t.rank[m.key()]; dup {
			return nil, fmt.Errorf("tokenizer: merge %d (id %d) repeats the pair %d %d of id %d", i, id, m.Left, m.Right, prev)
		}
		t.rank[m.key()] = id
		tok := make([]byte, 0, len(t.tokens[m.Left])+len(t.tokens[m.Right]))
		t.tokens = append(t.tokens, append(append(tok, t.tokens[m.Left]...), t.tokens[m.Right]...))
	}
	return t, nil
}

// VocabSize is 256 plus the number of merges.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// Equal reports whether t and u encode alike: the same merges in the same
// order (both nil is equal too).
func (t *Tokenizer) Equal(u *Tokenizer) bool {
	if t == nil || u == nil {
		return t == u
	}
	return slices.Equal(t.merges, u.merges)
}

// Merges returns the merges, in order (a copy).
func (t *Tokenizer) Merges() []Pair { return append([]Pair(nil), t.merges...) }

// Token returns the bytes of id (shared: do not modify), or nil when id is
// out of range.
func (t *Tokenizer) Token(id int32) []byte {
	if id < 0 || int(id) >= len(t.tokens) {
		return nil
	}
	return t.tokens[id]
}

// Encode returns the ids of text.
func (t *Tokenizer) Encode(text []byte) []int32 { return t.AppendEncode(nil, text) }

// AppendEncode appends the ids of text to dst.
func (t *Tokenizer) AppendEncode(dst []int32, text []byte) []int32 {
	var fresh map[string][]int32 // pieces first met in this call
	t.mu.RLock()
	for p := range Pieces(text) {
		if len(p) == 1 {
			dst = append(dst, int32(p[0]))
			continue
		}
		if ids, ok := t.cache[string(p)]; ok {
			dst = append(dst, ids...)
			continue
		}
		if ids, ok := fresh[string(p)]; ok {
			dst = append(dst, ids...)
			continue
		}
		ids := t.encodePiece(p)
		dst = append(dst, ids...)
		if fresh == nil {
			fresh = make(map[string][]int32)
		}
		fresh[string(p)] = ids
	}
	t.mu.RUnlock()
	if len(fresh) > 0 {
		t.mu.Lock()
		if t.cache == nil || len(t.cache)+len(fresh) > maxCached {
			t.cache = make(map[string][]int32, len(fresh))
		}
		for k, v := range fresh {
			t.cache[k] = v
		}
		t.mu.Unlock()
	}
	return dst
}

// encodePiece applies the merges to one piece as training did: the pair of
// lowest rank (earliest merge) first, each merge at every place it occurs
// from left to right. A piece has at most MaxPiece bytes, so this
// quadratic loop is bounded.
func (t *Tokenizer) encodePiece(p []byte) []int32 {
	ids := make([]int32, len(p))
	for i, b := range p {
		ids[i] = int32(b)
	}
	for len(ids) > 1 {
		best, bestPair := int32(-1), Pair{}
		for i := 0; i+1 < len(ids); i++ {
			pr := Pair{ids[i], ids[i+1]}
			if id, ok := t.rank[pr.key()]; ok && (best < 0 || id < best) {
				best, bestPair = id, pr
			}
		}
		if best < 0 {
			break
		}
		ids = mergePair(ids, bestPair, best)
	}
	return ids
}

// mergePair replaces each occurrence of p in ids, left to right and not
// overlapping, with id, in place.
func mergePair(ids []int32, p Pair, id int32) []int32 {
	out := ids[:0]
	for i := 0; i < len(ids); i++ {
		if i+1 < len(ids) && ids[i] == p.Left && ids[i+1] == p.Right {
			out = append(out, id)
			i++
			continue
		}
		out = append(out, ids[i])
	}
	return out
}

// Decode returns the bytes of ids; an id out of range is an error naming
// its position.
func (t *Tokenizer) Decode(ids []int32) ([]byte, error) {
	return t.AppendDecode(nil, ids)
}

// AppendDecode appends the bytes of ids to dst.
func (t *Tokenizer) AppendDecode(dst []byte, ids []int32) ([]byte, error) {
	for i, id := range ids {
		if id < 0 || int(id) >= len(t.tokens) {
			return dst, fmt.Errorf("tokenizer: id %d at position %d is not in the vocabulary 0..%d", id, i, len(t.tokens)-1)
		}
		dst = append(dst, t.tokens[id]...)
	}
	return dst, nil
}
