package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
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

// Shard wire format constants; the format is documented on EncodeShard.
const (
	ShardMagic      = "CTSH"
	ShardVersion    = 1
	ShardHeaderSize = 18
	// MaxExampleSize bounds channels*rows*cols (1 Mi pixels, e.g. 3x512x512 fits).
	MaxExampleSize = 1 << 20
)

// Shard errors, for errors.Is. ErrShardLimit means the shard is well formed
// but has more examples than the caller allows; the others that it is not a
// valid shard.
var (
	ErrShardFormat = errors.New("bad shard")
	ErrShardLimit  = errors.New("shard over limit")
)

// ShardData is a decoded shard.
type ShardData struct {
	Count, Channels, Rows, Cols, Classes int
	Pixels                               []byte // Count*Channels*Rows*Cols
	Labels                               []byte // Count
}

// ExampleSize is Channels*Rows*Cols.
func (d *ShardData) ExampleSize() int { return d.Channels * d.Rows * d.Cols }

// EncodeShard encodes the examples shard.Indices of s, in that order, in the
// shard wire format, version 1. All integers are little-endian:
//
//	offset  size  field
//	0       4     magic "CTSH"
//	4       1     format version (1)
//	5       1     reserved, 0
//	6       2     channels  (1..65535)
//	8       2     rows      (1..65535)
//	10      2     cols      (1..65535)
//	12      2     classes   (2..256; every label is < classes)
//	14      4     count     (>= 1) examples
//	18      count*channels*rows*cols   pixels, example-major, then as Set.Images
//	...     count                      labels, one byte each
//
// exampleSize = channels*rows*cols is at most MaxExampleSize, and the body is
// exactly ShardHeaderSize + count*(exampleSize+1) bytes: trailing bytes are
// an error, so a concatenated or wrong body never decodes. Pixels and labels
// stay bytes: a 1000-example MNIST shard is 785 kB, a quarter of its size as
// float32. There is no checksum: shards travel over HTTP/TCP and the coordinator
// addresses them as immutable resources; integrity beyond that is the
// transport's job.
//
// It panics if s is inconsistent, the shard is empty or an index is out of
// range: shards come from the coordinator's own MakeShards over a loaded
// Set. AppendShard returns those as errors.
func EncodeShard(s *Set, shard Shard) []byte {
	b, err := AppendShard(nil, s, shard)
	if err != nil {
		panic(err)
	}
	return b
}

// AppendShard appends EncodeShard's bytes to dst, returning an error instead
// of panicking.
func AppendShard(dst []byte, s *Set, shard Shard) ([]byte, error) {
	if err := checkShape(s.Channels, s.Rows, s.Cols, s.Classes); err != nil {
		return dst, fmt.Errorf("dataset: encoding shard %d of set %q: %w", shard.ID, s.Name, err)
	}
	es := s.ExampleSize()
	if s.N < 0 || len(s.Labels) != s.N || len(s.Images)/es != s.N || len(s.Images)%es != 0 {
		return dst, fmt.Errorf("dataset: encoding shard %d of set %q: N=%d but %d labels and %d pixel bytes",
			shard.ID, s.Name, s.N, len(s.Labels), len(s.Images))
	}
	count := len(shard.Indices)
	if count == 0 || uint64(count) > 0xFFFFFFFF {
		return dst, fmt.Errorf("dataset: encoding shard %d of set %q: %d examples; must be 1..%d", shard.ID, s.Name, count, uint32(0xFFFFFFFF))
	}
	for _, ix := range shard.Indices {
		if ix < 0 || ix >= s.N {
			return dst, fmt.Errorf("dataset: encoding shard %d of set %q: index %d outside [0, %d)", shard.ID, s.Name, ix, s.N)
		}
		if int(s.Labels[ix]) >= s.Classes {
			return dst, fmt.Errorf("dataset: encoding shard %d of set %q: example %d has label %d, not below Classes=%d",
				shard.ID, s.Name, ix, s.Labels[ix], s.Classes)
		}
	}
	dst = appendShardHeader(dst, s.Channels, s.Rows, s.Cols, s.Classes, count)
	dst = slices.Grow(dst, count*(es+1))
	px := dst[len(dst) : len(dst)+count*es]
	for k, ix := range shard.Indices {
		copy(px[k*es:(k+1)*es], s.Images[ix*es:(ix+1)*es])
	}
	dst = dst[:len(dst)+count*es]
	for _, ix := range shard.Indices {
		dst = append(dst, s.Labels[ix])
	}
	return dst, nil
}

func appendShardHeader(dst []byte, channels, rows, cols, classes, count int) []byte {
	dst = append(dst, ShardMagic...)
	dst = append(dst, ShardVersion, 0)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(channels))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(rows))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(cols))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(classes))
	return binary.LittleEndian.AppendUint32(dst, uint32(count))
}

// Encode returns d in the shard wire format: for a d from DecodeShard, the
// bytes it was decoded from. d must be valid (as DecodeShard returns).
func (d *ShardData) Encode() []byte {
	es := d.ExampleSize()
	b := make([]byte, 0, ShardHeaderSize+d.Count*(es+1))
	b = appendShardHeader(b, d.Channels, d.Rows, d.Cols, d.Classes, d.Count)
	b = append(b, d.Pixels[:d.Count*es]...)
	return append(b, d.Labels[:d.Count]...)
}

// shardHeader is a parsed, validated header.
type shardHeader struct {
	channels, rows, cols, classes, count int
	body                                 uint64 // count*(exampleSize+1)
}

func (h *shardHeader) exampleSize() int { return h.channels * h.rows * h.cols }

// parseShardHeader validates the 18 header bytes in b.
func parseShardHeader(b []byte, maxExamples int) (shardHeader, error) {
	var h shardHeader
	if string(b[:4]) != ShardMagic {
		return h, fmt.Errorf("dataset: %w: magic %q, want %q: the body is not a crowdtrain shard (an error page or the wrong resource?)",
			ErrShardFormat, b[:4], ShardMagic)
	}
	if b[4] != ShardVersion {
		return h, fmt.Errorf("dataset: %w: format version %d; this build reads version %d, update the worker or coordinator so they match",
			ErrShardFormat, b[4], ShardVersion)
	}
	if b[5] != 0 {
		return h, fmt.Errorf("dataset: %w: reserved header byte is %d, want 0: the shard is corrupt", ErrShardFormat, b[5])
	}
	le := binary.LittleEndian
	h.channels = int(le.Uint16(b[6:]))
	h.rows = int(le.Uint16(b[8:]))
	h.cols = int(le.Uint16(b[10:]))
	h.classes = int(le.Uint16(b[12:]))
	count := le.Uint32(b[14:])
	if err := checkShape(h.channels, h.rows, h.cols, h.classes); err != nil {
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
	// Both factors are bounded (count < 2^32, exampleSize+1 <= 2^20+1): no
	// overflow in uint64, whatever int's size.
	h.body = uint64(count) * uint64(h.exampleSize()+1)
	return h, nil
}

// finish checks the labels in body and builds the ShardData; the slices
// alias body.
func (h *shardHeader) finish(body []byte) (*ShardData, error) {
	np := h.count * h.exampleSize()
	labels := body[np : np+h.count : np+h.count]
	for i, l := range labels {
		if int(l) >= h.classes {
			return nil, fmt.Errorf("dataset: %w: example %d has label %d, not below classes=%d: the shard is corrupt",
				ErrShardFormat, i, l, h.classes)
		}
	}
	return &ShardData{
		Count: h.count, Channels: h.channels, Rows: h.rows, Cols: h.cols, Classes: h.classes,
		Pixels: body[:np:np],
		Labels: labels,
	}, nil
}

func checkMaxExamples(maxExamples int) error {
	if maxExamples < 1 {
		return fmt.Errorf("dataset: maxExamples is %d; pass the most examples a shard may hold (>= 1)", maxExamples)
	}
	return nil
}

// DecodeShard validates everything (magic, version, header sizes non-zero
// and bounded: exampleSize <= MaxExampleSize, 1 <= count <= maxExamples,
// exact total length, every label < classes) and never panics. The returned
// slices alias b. Errors wrap ErrShardFormat or, for count > maxExamples,
// ErrShardLimit.
func DecodeShard(b []byte, maxExamples int) (*ShardData, error) {
	if err := checkMaxExamples(maxExamples); err != nil {
		return nil, err
	}
	if len(b) < ShardHeaderSize {
		return nil, fmt.Errorf("dataset: %w: truncated: %d bytes, the header alone is %d: fetch the shard again",
			ErrShardFormat, len(b), ShardHeaderSize)
	}
	h, err := parseShardHeader(b, maxExamples)
	if err != nil {
		return nil, err
	}
	body := b[ShardHeaderSize:]
	if uint64(len(body)) < h.body {
		return nil, fmt.Errorf("dataset: %w: truncated: header promises %d examples of %d pixels = %d bytes, got %d: fetch the shard again",
			ErrShardFormat, h.count, h.exampleSize(), ShardHeaderSize+h.body, len(b))
	}
	if uint64(len(body)) > h.body {
		return nil, fmt.Errorf("dataset: %w: %d trailing bytes after the %d that the header describes: the body is not a single shard",
			ErrShardFormat, uint64(len(body))-h.body, ShardHeaderSize+h.body)
	}
	return h.finish(body)
}

// ReadShard reads one shard from r (an HTTP body, say) with the same checks
// as DecodeShard, reading r to EOF. It validates the header before
// allocating and grows its buffer as data arrives, so a lying header cannot
// make it allocate more than about twice what was sent.
func ReadShard(r io.Reader, maxExamples int) (*ShardData, error) {
	if err := checkMaxExamples(maxExamples); err != nil {
		return nil, err
	}
	var hb [ShardHeaderSize]byte
	if n, err := io.ReadFull(r, hb[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("dataset: %w: truncated: %d bytes, the header alone is %d: fetch the shard again",
				ErrShardFormat, n, ShardHeaderSize)
		}
		return nil, fmt.Errorf("dataset: reading shard header: %w", err)
	}
	h, err := parseShardHeader(hb[:], maxExamples)
	if err != nil {
		return nil, err
	}
	// h.body <= maxExamples*(MaxExampleSize+1); refuse what int cannot hold
	// (32-bit targets) rather than wrap.
	if h.body > uint64(math.MaxInt) {
		return nil, fmt.Errorf("dataset: %w: %d bytes do not fit in memory on this platform", ErrShardLimit, h.body)
	}
	body, got, err := readUpTo(r, int(h.body))
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("dataset: %w: truncated: header promises %d examples of %d pixels = %d bytes, got %d: fetch the shard again",
				ErrShardFormat, h.count, h.exampleSize(), ShardHeaderSize+h.body, ShardHeaderSize+got)
		}
		return nil, fmt.Errorf("dataset: reading shard body: %w", err)
	}
	var one [1]byte
	switch n, err := io.ReadFull(r, one[:]); {
	case n > 0:
		return nil, fmt.Errorf("dataset: %w: trailing bytes after the %d that the header describes: the body is not a single shard",
			ErrShardFormat, ShardHeaderSize+h.body)
	case errors.Is(err, io.EOF):
	default:
		return nil, fmt.Errorf("dataset: reading shard end: %w", err)
	}
	return h.finish(body)
}

// Floats writes examples start..start+n-1, pixel/255, into
// dst[:n*ExampleSize()]. It panics if the range is outside 0..Count or dst
// is short.
func (d *ShardData) Floats(dst []float32, start, n int) {
	checkRange("ShardData.Floats", start, n, d.Count)
	es := d.ExampleSize()
	checkDst("ShardData.Floats", len(dst), n*es)
	bytesToFloats(dst, d.Pixels[start*es:(start+n)*es])
}

// LabelsInt32 writes the labels of examples start..start+n-1 into dst[:n].
// It panics like Floats.
func (d *ShardData) LabelsInt32(dst []int32, start, n int) {
	checkRange("ShardData.LabelsInt32", start, n, d.Count)
	checkDst("ShardData.LabelsInt32", len(dst), n)
	for i, l := range d.Labels[start : start+n] {
		dst[i] = int32(l)
	}
}

// Example writes example i's pixels, scaled to [0,1], into
// dst[:ExampleSize()] and returns its label.
func (d *ShardData) Example(dst []float32, i int) int {
	d.Floats(dst, i, 1)
	return int(d.Labels[i])
}
