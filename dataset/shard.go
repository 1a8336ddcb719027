package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
)

// Shard is a fixed set of examples handed to workers as one resource.
type Shard struct {
	ID      int
	Indices []int // example indices into the Set, len <= size; the last shard may be shorter
}

// pcgStream is the PCG's second seed word ("crowdtrn"); fixed so that
// (n, size, seed) alone determines the shards.
const pcgStream = 0x63726f776474726e

// Permutation returns a permutation of 0..n-1 from a PCG (math/rand/v2)
// seeded by seed. It shuffles with its own Fisher-Yates and bounded draw
// rather than rand.Rand.Perm so the result depends only on the PCG-DXSM
// output, which is specified, and not on how a Go release implements Perm:
// a restarted coordinator built with another Go must cut the same shards.
func Permutation(n int, seed int64) []int {
	if n <= 0 {
		return nil
	}
	src := rand.NewPCG(uint64(seed), pcgStream)
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := boundedUint64(src, uint64(i)+1)
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// boundedUint64 returns a uniform value in [0, n) by Lemire's
// multiply-and-reject method (no modulo bias).
func boundedUint64(src *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(src.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(src.Uint64(), n)
		}
	}
	return hi
}

// MakeShards permutes 0..n-1 (Permutation(n, seed)) and splits the
// permutation into shards of size examples, IDs 0, 1, ...; the last may be
// shorter. Same (n, size, seed) → same shards on every platform. n <= 0
// gives no shards; size < 1 panics (callers validate). The shards' Indices
// share one backing array, each capped so appending to one cannot overwrite
// the next.
func MakeShards(n, size int, seed int64) []Shard {
	if size < 1 {
		panic(fmt.Sprintf("dataset: MakeShards: shard size %d; must be >= 1", size))
	}
	perm := Permutation(n, seed)
	shards := make([]Shard, 0, (len(perm)+size-1)/size)
	for lo := 0; lo < len(perm); lo += size {
		hi := min(lo+size, len(perm))
		shards = append(shards, Shard{ID: len(shards), Indices: perm[lo:hi:hi]})
	}
	return shards
}

// Shard wire format constants; the format is documented on AppendShard.
const (
	ShardMagic   = "CTSH"
	ShardVersion = 2
	// ShardFixedHeader is the header before the dimensions; the whole
	// header is ShardFixedHeader + 4*rank bytes.
	ShardFixedHeader = 16
)

// ShardHeaderSize is the header's size for an example shape of rank
// dimensions.
func ShardHeaderSize(rank int) int { return ShardFixedHeader + 4*rank }

// Shard errors, for errors.Is. ErrShardLimit means the shard is well formed
// but has more examples than the caller allows; the others that it is not a
// valid shard.
var (
	ErrShardFormat = errors.New("bad shard")
	ErrShardLimit  = errors.New("shard over limit")
)

// labelWidth is the bytes a class label takes in a shard.
func labelWidth(classes int) int {
	if classes <= 256 {
		return 1
	}
	return 2
}

// EncodeShard encodes the examples shard.Indices of s, in that order, in
// the shard wire format (see AppendShard). It panics if s is inconsistent,
// the shard is empty or an index is out of range: shards come from the
// coordinator's own MakeShards over a validated Set. AppendShard returns
// those as errors.
func EncodeShard(s *Set, shard Shard) []byte {
	b, err := AppendShard(nil, s, shard)
	if err != nil {
		panic(err)
	}
	return b
}

// EncodeSet encodes every example of s, in order, as one shard.
func EncodeSet(s *Set) ([]byte, error) {
	all := make([]int, s.N)
	for i := range all {
		all[i] = i
	}
	return AppendShard(nil, s, Shard{Indices: all})
}

// AppendShard appends the examples shard.Indices of s, in that order, to
// dst in the shard wire format, version 2. All integers are little-endian:
//
//	offset  size  field
//	0       4     magic "CTSH"
//	4       1     format version (2)
//	5       1     element type: 1 uint8 pixels, 2 float32 features, 3 uint8 tokens, 4 uint16 tokens
//	6       1     label kind: 1 class labels, 2 next-token labels
//	7       1     rank r of an example's shape (1..4)
//	8       4     classes (2..65536; 2..256 for uint8 tokens): every label and token is below it
//	12      4     count N (>= 1) examples
//	16      4*r   the example shape, one uint32 per dimension (each >= 1, product E <= MaxExampleSize)
//	16+4r   N*S*w inputs, example after example: S = E elements (S = t+1 for
//	              next-token labels: the window's t inputs and the token that
//	              follows the last), w = 1, 4, 1 or 2 bytes per element type
//	...     N*lw  class labels only: N labels, lw = 1 byte when classes <= 256, else 2
//
// With next-token labels (shape [t], token elements) example k's labels are
// its window's tokens 1..t: they are not stored twice. The body is exactly
// as long as the header says: trailing bytes are an error, so a
// concatenated or wrong body never decodes. Elements stay as they are
// stored (an MNIST shard is 1 byte per pixel, a text shard 1 byte per
// token), not widened to float32. There is no checksum: shards travel over
// HTTP/TCP as immutable resources.
func AppendShard(dst []byte, s *Set, shard Shard) ([]byte, error) {
	if err := checkLayout(s.Elem, s.Kind, s.Shape, s.Classes); err != nil {
		return dst, fmt.Errorf("dataset: encoding shard %d of set %q: %w", shard.ID, s.Name, err)
	}
	if s.N < 0 || s.elems() < s.need() || s.Kind == ClassLabels && len(s.Labels) != s.N || s.Kind == NextTokens && s.Stride < 1 {
		return dst, fmt.Errorf("dataset: encoding shard %d of set %q: N=%d but %d elements and %d labels",
			shard.ID, s.Name, s.N, s.elems(), len(s.Labels))
	}
	count := len(shard.Indices)
	if count == 0 || uint64(count) > math.MaxUint32 {
		return dst, fmt.Errorf("dataset: encoding shard %d of set %q: %d examples; must be 1..%d", shard.ID, s.Name, count, uint32(math.MaxUint32))
	}
	for _, ix := range shard.Indices {
		if ix < 0 || ix >= s.N {
			return dst, fmt.Errorf("dataset: encoding shard %d of set %q: index %d outside [0, %d)", shard.ID, s.Name, ix, s.N)
		}
		if s.Kind == ClassLabels && (s.Labels[ix] < 0 || int(s.Labels[ix]) >= s.Classes) {
			return dst, fmt.Errorf("dataset: encoding shard %d of set %q: example %d has label %d, not in 0..%d",
				shard.ID, s.Name, ix, s.Labels[ix], s.Classes-1)
		}
	}
	sub, err := s.Subset(s.Name, shard.Indices)
	if err != nil {
		return dst, err
	}
	if i, v, bad := sub.badElem(); bad {
		return dst, fmt.Errorf("dataset: encoding shard %d of set %q: element %d of the shard is %v: %s", shard.ID, s.Name, i, v, s.elemRule())
	}
	dst = appendShardHeader(dst, sub)
	le := binary.LittleEndian
	switch sub.Elem {
	case Float32:
		for _, v := range sub.F32 {
			dst = le.AppendUint32(dst, math.Float32bits(v))
		}
	case Tokens16:
		for _, v := range sub.U16 {
			dst = le.AppendUint16(dst, v)
		}
	default:
		dst = append(dst, sub.U8...)
	}
	if sub.Kind == ClassLabels {
		lw := labelWidth(sub.Classes)
		for _, l := range sub.Labels {
			if lw == 1 {
				dst = append(dst, byte(l))
			} else {
				dst = le.AppendUint16(dst, uint16(l))
			}
		}
	}
	return dst, nil
}

func appendShardHeader(dst []byte, s *Set) []byte {
	dst = append(dst, ShardMagic...)
	dst = append(dst, ShardVersion, byte(s.Elem), byte(s.Kind), byte(len(s.Shape)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(s.Classes))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(s.N))
	for _, d := range s.Shape {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(d))
	}
	return dst
}

// shardHeader is a parsed, validated header.
type shardHeader struct {
	elem    Elem
	kind    LabelKind
	shape   []int
	classes int
	count   int
	span    int    // elements per example
	body    uint64 // bytes after the header
}

// parseShardFixed validates the first ShardFixedHeader bytes of b and
// returns the rank.
func parseShardFixed(b []byte) (int, error) {
	if string(b[:4]) != ShardMagic {
		return 0, fmt.Errorf("dataset: %w: magic %q, want %q: the body is not a crowdtrain shard (an error page or the wrong resource?)",
			ErrShardFormat, b[:4], ShardMagic)
	}
	if b[4] != ShardVersion {
		return 0, fmt.Errorf("dataset: %w: format version %d; this build reads version %d, update the worker or coordinator so they match",
			ErrShardFormat, b[4], ShardVersion)
	}
	r := int(b[7])
	if r < 1 || r > MaxRank {
		return 0, fmt.Errorf("dataset: %w: header says the example shape has %d dimensions; want 1 to %d: the shard is corrupt", ErrShardFormat, r, MaxRank)
	}
	return r, nil
}

// parseShardHeader validates the whole header, b[:ShardHeaderSize(rank)].
func parseShardHeader(b []byte, rank, maxExamples int) (shardHeader, error) {
	le := binary.LittleEndian
	h := shardHeader{elem: Elem(b[5]), kind: LabelKind(b[6]), shape: make([]int, rank)}
	classes := le.Uint32(b[8:])
	count := le.Uint32(b[12:])
	for i := range h.shape {
		d := le.Uint32(b[ShardFixedHeader+4*i:])
		if d == 0 || d > MaxExampleSize {
			return h, fmt.Errorf("dataset: %w: header: example dimension %d is %d; must be 1..%d: the shard is corrupt", ErrShardFormat, i, d, MaxExampleSize)
		}
		h.shape[i] = int(d)
	}
	if classes > MaxClasses {
		return h, fmt.Errorf("dataset: %w: header: classes is %d; at most %d: the shard is corrupt", ErrShardFormat, classes, MaxClasses)
	}
	h.classes = int(classes)
	if err := checkLayout(h.elem, h.kind, h.shape, h.classes); err != nil {
		return h, fmt.Errorf("dataset: %w: header: %w: the shard is corrupt", ErrShardFormat, err)
	}
	if count == 0 {
		return h, fmt.Errorf("dataset: %w: header says 0 examples; a shard holds at least 1", ErrShardFormat)
	}
	if uint64(count) > uint64(maxExamples) {
		return h, fmt.Errorf("dataset: %w: %d examples, more than the limit of %d: raise the limit if this shard size is intended",
			ErrShardLimit, count, maxExamples)
	}
	h.count = int(count)
	es := 1
	for _, d := range h.shape {
		es *= d
	}
	h.span = es
	per := uint64(es) * uint64(h.elem.Size())
	if h.kind == NextTokens {
		h.span = es + 1
		per = uint64(h.span) * uint64(h.elem.Size())
	} else {
		per += uint64(labelWidth(h.classes))
	}
	// count < 2^32 and per <= 4*(2^20+1)+2: no overflow in uint64.
	h.body = uint64(count) * per
	return h, nil
}

func (h *shardHeader) size() string {
	return fmt.Sprintf("%d examples of %d %s", h.count, h.span, h.elem)
}

// finish decodes body (exactly h.body bytes) into a Set, checking every
// label and token against classes and every feature for finiteness. Byte
// elements alias body.
func (h *shardHeader) finish(body []byte) (*Set, error) {
	s := &Set{Elem: h.elem, Shape: h.shape, Kind: h.kind, Classes: h.classes, N: h.count}
	n := h.count * h.span
	le := binary.LittleEndian
	switch h.elem {
	case Float32:
		s.F32 = make([]float32, n)
		for i := range s.F32 {
			s.F32[i] = math.Float32frombits(le.Uint32(body[4*i:]))
		}
	case Tokens16:
		s.U16 = make([]uint16, n)
		for i := range s.U16 {
			s.U16[i] = le.Uint16(body[2*i:])
		}
	default:
		s.U8 = body[:n:n]
	}
	if i, v, bad := s.badElem(); bad {
		return nil, fmt.Errorf("dataset: %w: element %d is %v: %s: the shard is corrupt", ErrShardFormat, i, v, s.elemRule())
	}
	if h.kind == NextTokens {
		s.Stride = h.span
		return s, nil
	}
	lab := body[n*h.elem.Size():]
	s.Labels = make([]int32, h.count)
	lw := labelWidth(h.classes)
	for i := range s.Labels {
		var l int
		if lw == 1 {
			l = int(lab[i])
		} else {
			l = int(le.Uint16(lab[2*i:]))
		}
		if l >= h.classes {
			return nil, fmt.Errorf("dataset: %w: example %d has label %d, not below classes=%d: the shard is corrupt",
				ErrShardFormat, i, l, h.classes)
		}
		s.Labels[i] = int32(l)
	}
	return s, nil
}

func checkMaxExamples(maxExamples int) error {
	if maxExamples < 1 {
		return fmt.Errorf("dataset: maxExamples is %d; pass the most examples a shard may hold (>= 1)", maxExamples)
	}
	return nil
}

// DecodeShard validates everything (magic, version, a known element type
// and label kind, shape within the limits, 1 <= count <= maxExamples,
// exact total length, every label and token below classes, every feature
// finite) and never panics. Byte elements alias b. Errors wrap
// ErrShardFormat or, for count > maxExamples, ErrShardLimit.
func DecodeShard(b []byte, maxExamples int) (*Set, error) {
	if err := checkMaxExamples(maxExamples); err != nil {
		return nil, err
	}
	if len(b) < ShardFixedHeader {
		return nil, fmt.Errorf("dataset: %w: truncated: %d bytes, the header alone is at least %d: fetch the shard again",
			ErrShardFormat, len(b), ShardFixedHeader)
	}
	rank, err := parseShardFixed(b)
	if err != nil {
		return nil, err
	}
	hs := ShardHeaderSize(rank)
	if len(b) < hs {
		return nil, fmt.Errorf("dataset: %w: truncated: %d bytes, the header alone is %d: fetch the shard again", ErrShardFormat, len(b), hs)
	}
	h, err := parseShardHeader(b, rank, maxExamples)
	if err != nil {
		return nil, err
	}
	body := b[hs:]
	if uint64(len(body)) < h.body {
		return nil, fmt.Errorf("dataset: %w: truncated: header promises %s = %d bytes, got %d: fetch the shard again",
			ErrShardFormat, h.size(), uint64(hs)+h.body, len(b))
	}
	if uint64(len(body)) > h.body {
		return nil, fmt.Errorf("dataset: %w: %d trailing bytes after the %d that the header describes: the body is not a single shard",
			ErrShardFormat, uint64(len(body))-h.body, uint64(hs)+h.body)
	}
	return h.finish(body)
}

// ReadShard reads one shard from r (an HTTP body, say) with the same checks
// as DecodeShard, reading r to EOF. It validates the header before
// allocating and grows its buffer as data arrives, so a lying header cannot
// make it allocate more than about twice what was sent.
func ReadShard(r io.Reader, maxExamples int) (*Set, error) {
	if err := checkMaxExamples(maxExamples); err != nil {
		return nil, err
	}
	var hb [ShardFixedHeader + 4*MaxRank]byte
	truncated := func(n, want int) error {
		return fmt.Errorf("dataset: %w: truncated: %d bytes, the header alone is %d: fetch the shard again", ErrShardFormat, n, want)
	}
	if n, err := io.ReadFull(r, hb[:ShardFixedHeader]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, truncated(n, ShardFixedHeader)
		}
		return nil, fmt.Errorf("dataset: reading shard header: %w", err)
	}
	rank, err := parseShardFixed(hb[:])
	if err != nil {
		return nil, err
	}
	hs := ShardHeaderSize(rank)
	if n, err := io.ReadFull(r, hb[ShardFixedHeader:hs]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, truncated(ShardFixedHeader+n, hs)
		}
		return nil, fmt.Errorf("dataset: reading shard header: %w", err)
	}
	h, err := parseShardHeader(hb[:hs], rank, maxExamples)
	if err != nil {
		return nil, err
	}
	// Refuse what int cannot hold (32-bit targets) rather than wrap.
	if h.body > uint64(math.MaxInt) {
		return nil, fmt.Errorf("dataset: %w: %d bytes do not fit in memory on this platform", ErrShardLimit, h.body)
	}
	body, got, err := readUpTo(r, int(h.body))
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("dataset: %w: truncated: header promises %s = %d bytes, got %d: fetch the shard again",
				ErrShardFormat, h.size(), uint64(hs)+h.body, hs+got)
		}
		return nil, fmt.Errorf("dataset: reading shard body: %w", err)
	}
	var one [1]byte
	switch n, err := io.ReadFull(r, one[:]); {
	case n > 0:
		return nil, fmt.Errorf("dataset: %w: trailing bytes after the %d that the header describes: the body is not a single shard",
			ErrShardFormat, uint64(hs)+h.body)
	case errors.Is(err, io.EOF):
	default:
		return nil, fmt.Errorf("dataset: reading shard end: %w", err)
	}
	return h.finish(body)
}
