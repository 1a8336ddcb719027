package protocol

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// The sparse codec (CodecSparse), after SparseLoCo: the flattened update
// is cut into chunks of `chunk` values (the last one shorter); each chunk
// sends its k_c entries largest in magnitude, their offsets in the chunk
// packed in the fewest bits a chunk's offset needs, and their values
// quantised to 2 bits against the chunk's two magnitude levels. Layout
// (docs/PROTOCOL.md, Update codecs), little-endian:
//
//	uint32 chunk, uint32 k (the count of a full chunk), then per chunk:
//	float32 lo, float32 hi (0 <= lo <= hi, finite), then a bit stream,
//	least significant bit first: k_c offsets of bits.Len(chunk-1) bits,
//	strictly increasing, each < the chunk's length; then k_c 2-bit codes
//	(bit 0: the level, 1 = hi; bit 1: the sign, 1 = negative); then zero
//	bits up to the next byte.
//
// k_c = ceil(k·len/chunk) for a chunk of len values: k for a full chunk,
// proportionally fewer (at least 1) for the last.

// Sparse codec bounds and defaults: a chunk's offsets fit 16 bits, and a
// quarter of the entries is the most a sparse update sends (at a quarter
// it costs half of i8's bytes, which send every entry).
const (
	SparseMinChunk        = 64
	SparseMaxChunk        = 1 << 16
	SparseMaxFraction     = 0.25
	DefaultSparseChunk    = 4096
	DefaultSparseFraction = 0.01
	sparseHeader          = 8 // chunk, k
	sparseChunkHeader     = 8 // lo, hi
)

// SparseCount is the entries a full chunk of chunk values sends at
// fraction frac: max(1, ceil(frac·chunk)), at most chunk.
func SparseCount(chunk int, frac float64) int {
	return max(1, min(int(math.Ceil(frac*float64(chunk))), chunk))
}

// sparseChunkCount is k_c, the entries a chunk of length values sends
// when a full chunk sends k. In int64: k·length reaches 2^32 (a header's
// k may be its chunk, 2^16), past a 32-bit int.
func sparseChunkCount(length, chunk, k int) int {
	return int((int64(k)*int64(length) + int64(chunk) - 1) / int64(chunk))
}

// sparseOffsetBits is the bits of one offset in a chunk of chunk values.
func sparseOffsetBits(chunk int) int { return max(1, bits.Len(uint(chunk-1))) }

// sparseChunkLen is the bytes of one chunk of kc entries.
func sparseChunkLen(kc, offBits int) int { return sparseChunkHeader + (kc*(offBits+2)+7)/8 }

// SparseLen is the bytes of a sparse update of n values in chunks of
// chunk with k entries a full chunk.
func SparseLen(n, chunk, k int) int {
	full, rest := n/chunk, n%chunk
	b := sparseOffsetBits(chunk)
	size := sparseHeader + full*sparseChunkLen(k, b)
	if rest > 0 {
		size += sparseChunkLen(sparseChunkCount(rest, chunk, k), b)
	}
	return size
}

// SparseParams reads the chunk size and the full chunk's count from a
// sparse update's header; ok is false when packed is too short to hold
// one.
func SparseParams(packed []byte) (chunk, k int, ok bool) {
	if len(packed) < sparseHeader {
		return 0, 0, false
	}
	return int(binary.LittleEndian.Uint32(packed)), int(binary.LittleEndian.Uint32(packed[4:])), true
}

// CheckSparseParams says what is wrong with a sparse chunk size and
// fraction, or nil.
func CheckSparseParams(chunk int, frac float64) error {
	switch {
	case chunk < SparseMinChunk || chunk > SparseMaxChunk:
		return fmt.Errorf("update codec sparse: chunk %d is not in %d..%d", chunk, SparseMinChunk, SparseMaxChunk)
	case !(frac > 0 && frac <= SparseMaxFraction):
		return fmt.Errorf("update codec sparse: fraction %v is not in (0, %v]", frac, SparseMaxFraction)
	}
	return nil
}

// bitWriter packs values least significant bit first into out.
type bitWriter struct {
	out   []byte
	acc   uint64
	nbits uint
}

func (w *bitWriter) write(v uint32, width uint) {
	w.acc |= uint64(v) << w.nbits
	w.nbits += width
	for w.nbits >= 8 {
		w.out = append(w.out, byte(w.acc))
		w.acc >>= 8
		w.nbits -= 8
	}
}

// flush writes the last partial byte, zero-padded.
func (w *bitWriter) flush() {
	if w.nbits > 0 {
		w.out = append(w.out, byte(w.acc))
	}
	w.acc, w.nbits = 0, 0
}

// bitReader reads what bitWriter wrote; the caller has checked the
// length, so in always holds the bits asked for.
type bitReader struct {
	in    []byte
	acc   uint64
	nbits uint
}

func (r *bitReader) read(width uint) uint32 {
	for r.nbits < width {
		r.acc |= uint64(r.in[0]) << r.nbits
		r.in = r.in[1:]
		r.nbits += 8
	}
	v := uint32(r.acc & (1<<width - 1))
	r.acc >>= width
	r.nbits -= width
	return v
}

// padding is the bits left in the last byte read (they must be zero).
func (r *bitReader) padding() uint64 {
	v := r.acc
	r.acc, r.nbits = 0, 0
	return v
}

// sparseLevels picks a chunk's two magnitude levels for the kept
// magnitudes mags: two-means (Lloyd's iteration from the smallest and the
// largest), so that each level is the mean of the magnitudes nearest it.
// A few iterations settle it; the error left goes to the residual anyway.
func sparseLevels(mags []float64) (lo, hi float64) {
	lo, hi = mags[0], mags[0]
	for _, m := range mags[1:] {
		lo, hi = min(lo, m), max(hi, m)
	}
	for range 8 {
		mid := (lo + hi) / 2
		var sumLo, sumHi float64
		var nLo, nHi int
		for _, m := range mags {
			if m > mid {
				sumHi += m
				nHi++
			} else {
				sumLo += m
				nLo++
			}
		}
		newLo, newHi := lo, hi
		if nLo > 0 {
			newLo = sumLo / float64(nLo)
		}
		if nHi > 0 {
			newHi = sumHi / float64(nHi)
		}
		if newLo == lo && newHi == hi {
			break
		}
		lo, hi = newLo, newHi
	}
	return lo, hi
}

// appendSparse encodes u chunk by chunk. With feedback, u is e.acc and
// becomes the residual: u minus what the receiver decodes (the entries not
// sent stay whole; the sent ones keep their quantisation error).
func (e *UpdateEncoder) appendSparse(dst []byte, u []float32, feedback bool) ([]byte, error) {
	chunk, frac := e.SparseChunk, e.SparseFraction
	if chunk == 0 {
		chunk = DefaultSparseChunk
	}
	if frac == 0 {
		frac = DefaultSparseFraction
	}
	if err := CheckSparseParams(chunk, frac); err != nil {
		return dst, err
	}
	n := len(u)
	k := SparseCount(chunk, frac)
	offBits := uint(sparseOffsetBits(chunk))
	w := bitWriter{out: slices.Grow(dst, SparseLen(n, chunk, k))}
	w.out = binary.LittleEndian.AppendUint32(w.out, uint32(chunk))
	w.out = binary.LittleEndian.AppendUint32(w.out, uint32(k))
	for start := 0; start < n; start += chunk {
		blk := u[start:min(start+chunk, n)]
		kc := sparseChunkCount(len(blk), chunk, k)
		e.keys = slices.Grow(e.keys[:0], len(blk))[:len(blk)]
		for i, v := range blk {
			// As topk: |v|'s bits order like |v|; ^i puts the lower
			// offset first among equal magnitudes.
			e.keys[i] = uint64(math.Float32bits(v)&0x7fffffff)<<32 | uint64(^uint32(i))
		}
		selectLargest(e.keys, kc)
		e.idx = slices.Grow(e.idx[:0], kc)[:kc]
		e.mags = slices.Grow(e.mags[:0], kc)[:kc]
		for i, key := range e.keys[:kc] {
			e.idx[i] = ^uint32(key)
		}
		slices.Sort(e.idx)
		for i, j := range e.idx {
			e.mags[i] = math.Abs(float64(blk[j]))
		}
		lo64, hi64 := sparseLevels(e.mags)
		lo, hi := float32(lo64), float32(hi64)
		w.out = binary.LittleEndian.AppendUint32(w.out, math.Float32bits(lo))
		w.out = binary.LittleEndian.AppendUint32(w.out, math.Float32bits(hi))
		for _, j := range e.idx {
			w.write(j, offBits)
		}
		for i, j := range e.idx {
			v, m := blk[j], e.mags[i]
			var code uint32
			q := lo
			if m-float64(lo) > float64(hi)-m {
				code, q = 1, hi
			}
			if v < 0 {
				code |= 2
				q = -q
			}
			w.write(code, 2)
			if feedback {
				blk[j] = v - q
			}
		}
		w.flush()
	}
	return w.out, nil
}

// decodeSparse is DecodeUpdate's sparse case: bad formats its error.
func decodeSparse(packed []byte, n int, dst []float32, bad func(string, ...any) ([]float32, error), length func(int) ([]float32, error)) ([]float32, error) {
	chunk, k, ok := SparseParams(packed)
	switch {
	case !ok:
		return bad("truncated: %d bytes, want at least %d (chunk, k)", len(packed), sparseHeader)
	case chunk < SparseMinChunk || chunk > SparseMaxChunk:
		return bad("chunk = %d, want %d to %d", chunk, SparseMinChunk, SparseMaxChunk)
	case k < 1 || k > chunk:
		return bad("k = %d, want 1 to the chunk (%d)", k, chunk)
	}
	if want := SparseLen(n, chunk, k); len(packed) != want {
		return length(want)
	}
	dst = slices.Grow(dst[:0], n)[:n]
	clear(dst)
	offBits := uint(sparseOffsetBits(chunk))
	p := packed[sparseHeader:]
	for start := 0; start < n; start += chunk {
		c := start / chunk
		out := dst[start:min(start+chunk, n)]
		kc := sparseChunkCount(len(out), chunk, k)
		lo := math.Float32frombits(binary.LittleEndian.Uint32(p))
		hi := math.Float32frombits(binary.LittleEndian.Uint32(p[4:]))
		switch {
		case !finite32(lo) || !finite32(hi):
			return bad("chunk %d: levels %v and %v must be finite", c, lo, hi)
		case math.Signbit(float64(lo)) || math.Signbit(float64(hi)):
			return bad("chunk %d: levels %v and %v must not be negative (the sign is in the codes)", c, lo, hi)
		case lo > hi:
			return bad("chunk %d: level lo %v is above hi %v", c, lo, hi)
		}
		size := sparseChunkLen(kc, int(offBits))
		stream := p[sparseChunkHeader:size]
		offs := bitReader{in: stream}
		// The codes start right after the kc offsets, mid-byte perhaps.
		codeAt := uint(kc) * offBits
		codes := bitReader{in: stream[codeAt/8:]}
		codes.read(codeAt % 8)
		prev := -1
		for i := range kc {
			j := int(offs.read(offBits))
			switch {
			case j >= len(out):
				return bad("chunk %d: offset %d (entry %d) is out of range (%d values)", c, j, i, len(out))
			case j == prev:
				return bad("chunk %d: offset %d (entry %d) is repeated", c, j, i)
			case j < prev:
				return bad("chunk %d: offset %d (entry %d) comes after %d: offsets must increase", c, j, i, prev)
			}
			prev = j
			code := codes.read(2)
			v := lo
			if code&1 != 0 {
				v = hi
			}
			if code&2 != 0 {
				v = -v
			}
			out[j] = v
		}
		if codes.padding() != 0 {
			return bad("chunk %d: the padding bits after its codes are not zero", c)
		}
		p = p[size:]
	}
	return dst, nil
}
