package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Update codecs: how an update of n float32s travels in Result.Packed
// when the codec is not CodecF32. The byte layouts (docs/PROTOCOL.md,
// "Update codecs"); every number is little-endian:
//
//	f32   n float32s (as Result.Update; DecodeUpdate reads it for symmetry)
//	f16   n IEEE halves (uint16)
//	i8    ceil(n/256) blocks of I8Block values, the last one shorter; a
//	      block is float32 min, float32 step, then one uint8 code per
//	      value: value = min + float32(code*step) (the product rounded to
//	      float32 before the add: no fused multiply-add)
//	topk  uint32 k, k uint32 indices (strictly increasing, each < n),
//	      k float32 values; every other entry is 0
//	sparse per chunk, the largest entries' offsets in the fewest bits and
//	      2-bit codes against two float32 levels (sparse.go)
//
// i8, topk and sparse are lossy with error feedback: the sender keeps what
// it did not send (the residual) and adds it to its next update
// (UpdateEncoder).

// I8Block is how many values share an i8 block's min and step.
const I8Block = 256

// i8Header is the bytes of an i8 block before its codes: min and step.
const i8Header = 8

// TopKCount is how many entries a topk update of n values sends at
// fraction frac: max(1, ceil(frac*n)), at most n.
func TopKCount(n int, frac float64) int {
	k := int(math.Ceil(frac * float64(n)))
	return max(1, min(k, n))
}

// I8Len is the bytes of an i8 update of n values.
func I8Len(n int) int { return i8Header*((n+I8Block-1)/I8Block) + n }

// i8Value is the value code stands for in a block of min and step: the
// one formula encoder and decoder share. The explicit float32 conversion
// keeps the compiler from fusing the multiply and the add, so that every
// platform decodes the same bits.
func i8Value(lo, step float32, code byte) float32 { return lo + float32(float32(code)*step) }

// UpdateEncoder encodes updates in Codec, keeping the error-feedback
// residual of the lossy codecs (CodecI8, CodecTopK, CodecSparse) between
// calls. Its
// buffers are reused: once warm (one call at a given n), Encode allocates
// nothing beyond growing dst. The zero value with Codec set is ready; an
// encoder is not safe for concurrent use.
type UpdateEncoder struct {
	Codec string
	// TopKFraction is the share of entries CodecTopK sends (0: 0.01).
	TopKFraction float64
	// SparseChunk is the values per CodecSparse chunk (0: 4096), and
	// SparseFraction the share of each chunk it sends (0: 0.01).
	SparseChunk    int
	SparseFraction float64

	residual []float32 // what was not sent yet (i8, topk, sparse)
	acc      []float32 // scratch: update + residual, then the new residual
	keys     []uint64  // scratch: topk selection keys
	idx      []uint32  // scratch: topk indices, sparse offsets
	mags     []float64 // scratch: sparse kept magnitudes
}

// DefaultTopKFraction is the topk fraction when none is given.
const DefaultTopKFraction = 0.01

// Reset forgets the residual (a new job, or a new model).
func (e *UpdateEncoder) Reset() { clear(e.residual) }

// feedbackCodec reports whether codec keeps a residual.
func feedbackCodec(codec string) bool {
	return codec == CodecI8 || codec == CodecTopK || codec == CodecSparse
}

// Encode writes u in e.Codec into dst's storage (dst[:0], grown as
// needed) and returns it. With feedback, a lossy codec sends u plus the
// residual and keeps what that send missed as the new residual; without
// (a spot check's copy) it encodes u alone and leaves the residual as it
// was. A non-finite value in u (or in u plus the residual) is an error,
// and then the residual is untouched: the caller sends u as f32 instead.
func (e *UpdateEncoder) Encode(dst []byte, u []float32, feedback bool) ([]byte, error) {
	n := len(u)
	if n == 0 {
		return dst[:0], errors.New("update codec: empty update")
	}
	if i := Floats(u).FirstNonFinite(); i >= 0 {
		return dst[:0], fmt.Errorf("update codec: value %d is %v", i, u[i])
	}
	feedback = feedback && feedbackCodec(e.Codec)
	src := u
	if feedback {
		if len(e.residual) != n {
			e.residual = make([]float32, n)
		}
		if len(e.acc) != n {
			e.acc = make([]float32, n)
		}
		for i, v := range u {
			e.acc[i] = v + e.residual[i]
		}
		if i := Floats(e.acc).FirstNonFinite(); i >= 0 {
			return dst[:0], fmt.Errorf("update codec: value %d plus its residual is %v", i, e.acc[i])
		}
		src = e.acc
	}
	var out []byte
	var err error
	switch e.Codec {
	case CodecF32:
		out = appendF32(dst[:0], src)
	case CodecF16:
		out = appendF16(dst[:0], src)
	case CodecI8:
		out, err = e.appendI8(dst[:0], src, feedback)
	case CodecTopK:
		out, err = e.appendTopK(dst[:0], src, feedback)
	case CodecSparse:
		out, err = e.appendSparse(dst[:0], src, feedback)
	default:
		return dst[:0], fmt.Errorf("update codec %q is not one of %v", e.Codec, UpdateCodecs)
	}
	if err != nil {
		return out[:0], err
	}
	if feedback {
		// e.acc holds the new residual now: swap, no copy.
		e.residual, e.acc = e.acc, e.residual
	}
	return out, nil
}

func grow(dst []byte, n int) []byte {
	return slices.Grow(dst, n)[:len(dst)+n]
}

func appendF32(dst []byte, u []float32) []byte {
	b := grow(dst, 4*len(u))
	o := b[len(dst):]
	for i, v := range u {
		binary.LittleEndian.PutUint32(o[4*i:], math.Float32bits(v))
	}
	return b
}

func appendF16(dst []byte, u []float32) []byte {
	b := grow(dst, 2*len(u))
	putHalves(b[len(dst):], u)
	return b
}

// appendI8 quantises u block by block. With feedback, u is e.acc and
// becomes the residual: u minus what the receiver decodes.
func (e *UpdateEncoder) appendI8(dst []byte, u []float32, feedback bool) ([]byte, error) {
	n := len(u)
	b := grow(dst, I8Len(n))
	o := b[len(dst):]
	for start := 0; start < n; start += I8Block {
		blk := u[start:min(start+I8Block, n)]
		lo, hi := blk[0], blk[0]
		for _, v := range blk[1:] {
			lo, hi = min(lo, v), max(hi, v)
		}
		// The range in float64: hi-lo may overflow float32.
		step := float32((float64(hi) - float64(lo)) / 255)
		binary.LittleEndian.PutUint32(o, math.Float32bits(lo))
		binary.LittleEndian.PutUint32(o[4:], math.Float32bits(step))
		codes := o[i8Header : i8Header+len(blk)]
		var inv float64
		if step > 0 {
			inv = 1 / float64(step)
		}
		for i, v := range blk {
			// Round to nearest (ties up) of (v−min)/step, in float64; the
			// conversion rounds the product before the add, so no platform
			// fuses them: every encoder picks the same code. v >= min, so
			// truncation is the floor.
			c := byte(min(255, int(float64((float64(v)-float64(lo))*inv)+0.5)))
			codes[i] = c
			d := i8Value(lo, step, c)
			if math.IsInf(float64(d), 0) {
				return b, fmt.Errorf("update codec i8: value %d (%v) decodes to %v: the block's range is too wide", start+i, v, d)
			}
			if feedback {
				blk[i] = v - d
			}
		}
		o = o[i8Header+len(blk):]
	}
	return b, nil
}

// appendTopK sends the k entries of u largest in magnitude (ties: the
// lower index), by quickselect on keys that order exactly so. With
// feedback, u is e.acc and becomes the residual: u with the sent entries 0.
func (e *UpdateEncoder) appendTopK(dst []byte, u []float32, feedback bool) ([]byte, error) {
	frac := e.TopKFraction
	if frac == 0 {
		frac = DefaultTopKFraction
	}
	if !(frac > 0 && frac <= 1) {
		return dst, fmt.Errorf("update codec topk: fraction %v is not in (0, 1]", frac)
	}
	n := len(u)
	if uint64(n) > math.MaxUint32 {
		return dst, fmt.Errorf("update codec topk: %d values do not fit uint32 indices", n)
	}
	k := TopKCount(n, frac)
	e.keys = slices.Grow(e.keys[:0], n)[:n]
	for i, v := range u {
		// |v|'s bits order like |v| (finite, non-negative); ^i puts the
		// lower index first among equal magnitudes.
		e.keys[i] = uint64(math.Float32bits(v)&0x7fffffff)<<32 | uint64(^uint32(i))
	}
	selectLargest(e.keys, k)
	e.idx = slices.Grow(e.idx[:0], k)[:k]
	for i, key := range e.keys[:k] {
		e.idx[i] = ^uint32(key)
	}
	slices.Sort(e.idx)
	b := grow(dst, 4+8*k)
	o := b[len(dst):]
	binary.LittleEndian.PutUint32(o, uint32(k))
	vals := o[4+4*k:]
	for i, j := range e.idx {
		binary.LittleEndian.PutUint32(o[4+4*i:], j)
		binary.LittleEndian.PutUint32(vals[4*i:], math.Float32bits(u[j]))
		if feedback {
			u[j] = 0
		}
	}
	return b, nil
}

// selectLargest reorders keys so that keys[:k] are its k largest (in no
// order): quickselect, median-of-three pivots, expected O(len(keys)).
// The keys are distinct.
func selectLargest(keys []uint64, k int) {
	lo, hi := 0, len(keys)-1
	if k <= 0 || k >= len(keys) {
		return
	}
	target := k - 1 // the k-th largest lands here, the larger before it
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Median of three to keys[hi] as the pivot.
		if keys[mid] > keys[lo] {
			keys[mid], keys[lo] = keys[lo], keys[mid]
		}
		if keys[hi] > keys[lo] {
			keys[hi], keys[lo] = keys[lo], keys[hi]
		}
		if keys[mid] > keys[hi] {
			keys[mid], keys[hi] = keys[hi], keys[mid]
		}
		pivot := keys[hi]
		p := lo
		for i := lo; i < hi; i++ {
			if keys[i] > pivot { // descending
				keys[i], keys[p] = keys[p], keys[i]
				p++
			}
		}
		keys[p], keys[hi] = keys[hi], keys[p]
		switch {
		case p == target:
			return
		case p < target:
			lo = p + 1
		default:
			hi = p - 1
		}
	}
}

// DecodeUpdate decodes packed, an update of n values in codec, into dst's
// storage (grown as needed) and returns it. Whatever is malformed is an
// error wrapping ErrMalformed that says what: a wrong length, an i8 block
// with a non-finite min or step or a negative step, a topk k of 0 or over
// n, an index out of range or not strictly after the one before, a sparse
// chunk size or count out of bounds, a level not finite, negative or out of
// order, nonzero padding, and any value that is not finite.
func DecodeUpdate(codec string, packed []byte, n int, dst []float32) ([]float32, error) {
	if n <= 0 {
		return dst[:0], fmt.Errorf("%w: update of %d values", ErrMalformed, n)
	}
	bad := func(format string, a ...any) ([]float32, error) {
		return dst[:0], fmt.Errorf("%w: %s update: %s", ErrMalformed, codec, fmt.Sprintf(format, a...))
	}
	length := func(want int) ([]float32, error) {
		what := "truncated"
		if len(packed) > want {
			what = "over-long"
		}
		return bad("%s: %d bytes, want %d for %d values", what, len(packed), want, n)
	}
	switch codec {
	case CodecF32:
		if len(packed) != 4*n {
			return length(4 * n)
		}
		dst = slices.Grow(dst[:0], n)[:n]
		for i := range dst {
			v := math.Float32frombits(binary.LittleEndian.Uint32(packed[4*i:]))
			if !finite32(v) {
				return bad("value %d is %v", i, v)
			}
			dst[i] = v
		}
	case CodecF16:
		if len(packed) != 2*n {
			return length(2 * n)
		}
		dst = slices.Grow(dst[:0], n)[:n]
		if i := getHalves(dst, packed); i >= 0 {
			return bad("value %d is %v", i, Float32FromHalf(binary.LittleEndian.Uint16(packed[2*i:])))
		}
	case CodecI8:
		if len(packed) != I8Len(n) {
			return length(I8Len(n))
		}
		dst = slices.Grow(dst[:0], n)[:n]
		p := packed
		for start := 0; start < n; start += I8Block {
			out := dst[start:min(start+I8Block, n)]
			lo := math.Float32frombits(binary.LittleEndian.Uint32(p))
			step := math.Float32frombits(binary.LittleEndian.Uint32(p[4:]))
			blk := start / I8Block
			switch {
			case !finite32(lo):
				return bad("block %d: min is %v", blk, lo)
			case !finite32(step):
				return bad("block %d: step is %v", blk, step)
			case step < 0:
				return bad("block %d: step %v is negative", blk, step)
			}
			for i, c := range p[i8Header : i8Header+len(out)] {
				v := i8Value(lo, step, c)
				if !finite32(v) {
					return bad("value %d (block %d, code %d) decodes to %v", start+i, blk, c, v)
				}
				out[i] = v
			}
			p = p[i8Header+len(out):]
		}
	case CodecTopK:
		if len(packed) < 4 {
			return bad("truncated: %d bytes, want at least 4 (k)", len(packed))
		}
		k := binary.LittleEndian.Uint32(packed)
		if k == 0 || uint64(k) > uint64(n) {
			return bad("k = %d, want 1 to %d", k, n)
		}
		if want := 4 + 8*int(k); len(packed) != want {
			return length(want)
		}
		dst = slices.Grow(dst[:0], n)[:n]
		clear(dst)
		idx, vals := packed[4:4+4*k], packed[4+4*k:]
		prev := int64(-1)
		for i := range int(k) {
			j := binary.LittleEndian.Uint32(idx[4*i:])
			v := math.Float32frombits(binary.LittleEndian.Uint32(vals[4*i:]))
			switch {
			case uint64(j) >= uint64(n):
				return bad("index %d (entry %d) is out of range (%d values)", j, i, n)
			case int64(j) == prev:
				return bad("index %d (entry %d) is repeated", j, i)
			case int64(j) < prev:
				return bad("index %d (entry %d) comes after %d: indices must increase", j, i, prev)
			case !finite32(v):
				return bad("value at index %d is %v", j, v)
			}
			prev = int64(j)
			dst[j] = v
		}
	case CodecSparse:
		return decodeSparse(packed, n, dst, bad, length)
	default:
		return dst[:0], fmt.Errorf("%w: %q is not an update codec (want one of %v)", ErrMalformed, codec, UpdateCodecs)
	}
	return dst, nil
}

func finite32(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }

// UpdateSlack is the L2 allowance a spot check adds when it compares
// packed, an update in a lossy error-feedback codec, with an exact copy:
// the copy is u, the packed update is u plus the residual carried in
// minus the residual left now. For i8 that is 3·sqrt(Σ over blocks of
// count·(step/2)²); 0 for f32 and f16 (rounded alike on both sides); +Inf
// for topk, whose jobs run no spot checks, and for an i8 update that does
// not parse. Sparse jobs run no spot checks either: +Inf.
func UpdateSlack(codec string, packed []byte) float64 {
	switch codec {
	case CodecI8:
	case CodecTopK, CodecSparse:
		return math.Inf(1)
	default:
		return 0
	}
	// Every block but the last holds I8Block codes, the last 1 to I8Block:
	// the length tells the block count.
	const full = i8Header + I8Block
	blocks := (len(packed) + full - 1) / full
	n := len(packed) - i8Header*blocks
	if blocks == 0 || n <= 0 || I8Len(n) != len(packed) {
		return math.Inf(1)
	}
	var sum float64
	p := packed
	for start := 0; start < n; start += I8Block {
		count := min(I8Block, n-start)
		step := float64(math.Float32frombits(binary.LittleEndian.Uint32(p[4:])))
		if math.IsNaN(step) || math.IsInf(step, 0) || step < 0 {
			return math.Inf(1)
		}
		sum += float64(count) * (step / 2) * (step / 2)
		p = p[i8Header+count:]
	}
	return 3 * math.Sqrt(sum)
}
