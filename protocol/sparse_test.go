package protocol

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// sparseChunkSpec is one chunk of a hand-built sparse update.
type sparseChunkSpec struct {
	lo, hi float32
	offs   []uint32
	codes  []uint32
}

// sparsePacked builds a sparse update byte by byte, as the layout says,
// so that the tests can break any part of it.
func sparsePacked(chunk, k int, chunks ...sparseChunkSpec) []byte {
	w := bitWriter{}
	w.out = binary.LittleEndian.AppendUint32(w.out, uint32(chunk))
	w.out = binary.LittleEndian.AppendUint32(w.out, uint32(k))
	b := uint(sparseOffsetBits(chunk))
	for _, c := range chunks {
		w.out = binary.LittleEndian.AppendUint32(w.out, math.Float32bits(c.lo))
		w.out = binary.LittleEndian.AppendUint32(w.out, math.Float32bits(c.hi))
		for _, o := range c.offs {
			w.write(o, b)
		}
		for _, code := range c.codes {
			w.write(code, 2)
		}
		w.flush()
	}
	return w.out
}

// kept is the offsets a chunk keeps: the kc largest in magnitude, the
// lower offset first on ties, in increasing order.
func kept(blk []float32, kc int) []int {
	order := make([]int, len(blk))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := math.Abs(float64(blk[a])), math.Abs(float64(blk[b]))
		switch {
		case x > y:
			return -1
		case x < y:
			return 1
		}
		return 0
	})
	out := order[:kc]
	slices.Sort(out)
	return out
}

// The decoded update is exactly the kept entries' quantised values: per
// chunk, the k_c entries largest in magnitude, each the chunk's level
// nearest its magnitude with its sign, every other entry 0. With feedback
// the residual is the update minus that, to the bit.
func TestSparseRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct {
		n, chunk int
		frac     float64
	}{
		{1, 64, 0.01}, {63, 64, 0.25}, {64, 64, 0.05}, {100, 64, 0.05}, {4097, 4096, 0.01},
		{10000, 4096, 0.01}, {5000, 1000, 0.1}, {70000, 1 << 16, 0.001},
	} {
		u := randUpdate(r, c.n, 0.1)
		u[c.n/2] = 5 // one far from the rest
		e := &UpdateEncoder{Codec: CodecSparse, SparseChunk: c.chunk, SparseFraction: c.frac}
		b, err := e.Encode(nil, slices.Clone(u), true)
		if err != nil {
			t.Fatal(err)
		}
		k := SparseCount(c.chunk, c.frac)
		if len(b) != SparseLen(c.n, c.chunk, k) {
			t.Fatalf("n=%d chunk=%d: %d bytes, want %d", c.n, c.chunk, len(b), SparseLen(c.n, c.chunk, k))
		}
		got, err := DecodeUpdate(CodecSparse, b, c.n, nil)
		if err != nil {
			t.Fatalf("n=%d chunk=%d: %v", c.n, c.chunk, err)
		}
		p := b[sparseHeader:]
		sent := 0
		for start := 0; start < c.n; start += c.chunk {
			blk := u[start:min(start+c.chunk, c.n)]
			kc := sparseChunkCount(len(blk), c.chunk, k)
			lo := math.Float32frombits(binary.LittleEndian.Uint32(p))
			hi := math.Float32frombits(binary.LittleEndian.Uint32(p[4:]))
			p = p[sparseChunkLen(kc, sparseOffsetBits(c.chunk)):]
			want := make([]float32, len(blk))
			for _, j := range kept(blk, kc) {
				m := math.Abs(float64(blk[j]))
				q := lo
				if math.Abs(m-float64(hi)) < math.Abs(m-float64(lo)) {
					q = hi
				}
				want[j] = float32(math.Copysign(float64(q), float64(blk[j])))
			}
			sent += kc
			for j := range blk {
				if g := got[start+j]; g != want[j] {
					t.Fatalf("n=%d chunk=%d: value %d: %v, want %v (levels %v, %v)", c.n, c.chunk, start+j, g, want[j], lo, hi)
				}
				if res := e.residual[start+j]; res != blk[j]-got[start+j] {
					t.Fatalf("n=%d chunk=%d: residual %d: %v, want %v", c.n, c.chunk, start+j, res, blk[j]-got[start+j])
				}
			}
		}
		if want := max(1, int(math.Ceil(c.frac*float64(c.n)))); sent < want || sent > want+(c.n+c.chunk-1)/c.chunk {
			t.Fatalf("n=%d chunk=%d frac=%v: %d entries sent, want about %d", c.n, c.chunk, c.frac, sent, want)
		}
	}
}

// Two levels fit a chunk better than one: an update whose kept entries
// come in two magnitudes decodes exactly.
func TestSparseTwoLevels(t *testing.T) {
	u := make([]float32, 256)
	for i := range 8 {
		u[i*30] = 0.5
		u[i*30+1] = -2
	}
	e := &UpdateEncoder{Codec: CodecSparse, SparseChunk: 256, SparseFraction: 16.0 / 256}
	b, err := e.Encode(nil, u, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeUpdate(CodecSparse, b, len(u), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, u) {
		t.Fatalf("got %v, want %v", got, u)
	}
	// A zero update sends the first offsets at level 0.
	zero := make([]float32, 300)
	b, err = e.Encode(nil, zero, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = DecodeUpdate(CodecSparse, b, len(zero), nil); err != nil || slices.ContainsFunc(got, func(v float32) bool { return v != 0 }) {
		t.Fatalf("zero update: %v, %v", got, err)
	}
}

// Error feedback at the defaults (1% of each 4096-value chunk): what was
// sent, summed over rounds, is the true sum less the one residual held,
// and that residual stays a small part of the sum.
func TestSparseErrorFeedbackOverRounds(t *testing.T) {
	const n, rounds = 3 * 4096, 300
	r := rand.New(rand.NewPCG(23, 24))
	e := &UpdateEncoder{Codec: CodecSparse}
	sumTrue, sumSent := make([]float64, n), make([]float64, n)
	var buf []byte
	var dec []float32
	for range rounds {
		u := randUpdate(r, n, 0.01)
		for i := range u {
			u[i] += 0.002 * float32(i%7-3) // a drift every round shares
		}
		var err error
		if buf, err = e.Encode(buf, u, true); err != nil {
			t.Fatal(err)
		}
		if dec, err = DecodeUpdate(CodecSparse, buf, n, dec); err != nil {
			t.Fatal(err)
		}
		for i := range u {
			sumTrue[i] += float64(u[i])
			sumSent[i] += float64(dec[i])
		}
	}
	gap, diff, res := make([]float64, n), make([]float64, n), make([]float64, n)
	for i := range gap {
		diff[i] = sumSent[i] - sumTrue[i]
		res[i] = float64(e.residual[i])
		gap[i] = diff[i] + res[i]
	}
	tr := norm(sumTrue)
	t.Logf("after %d rounds: ‖Σsent−Σtrue‖ = %.4g, ‖residual‖ = %.4g, ‖Σtrue‖ = %.4g", rounds, norm(diff), norm(res), tr)
	if g := norm(gap); g > 1e-3*tr {
		t.Fatalf("Σsent − Σtrue + residual = %g, want ~0 (float32 rounding)", g)
	}
	if norm(diff) > 0.25*tr {
		t.Fatalf("‖Σsent−Σtrue‖ = %g, not well below ‖Σtrue‖ = %g: the residual is not being sent", norm(diff), tr)
	}
}

// At the defaults (1% of 4096-value chunks) an update costs at least 50
// times fewer bytes than f32: per chunk 8 bytes of levels and 41 entries
// of 12 + 2 bits.
func TestSparseBytesPerValue(t *testing.T) {
	const n = 4096 * 64
	u := randUpdate(rand.New(rand.NewPCG(25, 26)), n, 1)
	e := &UpdateEncoder{Codec: CodecSparse}
	b, err := e.Encode(nil, u, true)
	if err != nil {
		t.Fatal(err)
	}
	perChunk := 8 + (41*(12+2)+7)/8
	if want := 8 + 64*perChunk; len(b) != want {
		t.Fatalf("%d bytes, want %d", len(b), want)
	}
	ratio := float64(4*n) / float64(len(b))
	t.Logf("sparse at 1%% of 4096-value chunks: %d bytes for %d values, %.4f bytes a value, %.0fx fewer than f32 (topk at 1%%: %.0fx)",
		len(b), n, float64(len(b))/n, ratio, float64(4*n)/float64(4+8*TopKCount(n, 0.01)))
	if ratio < 50 {
		t.Fatalf("%.1fx smaller than f32, want at least 50x", ratio)
	}
}

func TestSparseCount(t *testing.T) {
	for _, c := range []struct {
		chunk int
		frac  float64
		k     int
	}{{4096, 0.01, 41}, {64, 0.01, 1}, {64, 0.25, 16}, {1 << 16, 0.25, 1 << 14}, {100, 0.015, 2}} {
		if k := SparseCount(c.chunk, c.frac); k != c.k {
			t.Errorf("SparseCount(%d, %v) = %d, want %d", c.chunk, c.frac, k, c.k)
		}
	}
	// The last, shorter chunk sends its share, at least 1.
	for _, c := range []struct{ length, chunk, k, kc int }{{36, 64, 4, 3}, {1, 4096, 41, 1}, {4096, 4096, 41, 41}, {2048, 4096, 41, 21}} {
		if kc := sparseChunkCount(c.length, c.chunk, c.k); kc != c.kc {
			t.Errorf("sparseChunkCount(%d, %d, %d) = %d, want %d", c.length, c.chunk, c.k, kc, c.kc)
		}
	}
	if err := CheckSparseParams(32, 0.01); err == nil || !strings.Contains(err.Error(), "chunk 32") {
		t.Errorf("chunk 32: %v", err)
	}
	if err := CheckSparseParams(4096, 0.3); err == nil || !strings.Contains(err.Error(), "fraction 0.3") {
		t.Errorf("fraction 0.3: %v", err)
	}
	e := &UpdateEncoder{Codec: CodecSparse, SparseChunk: 1 << 20}
	if _, err := e.Encode(nil, []float32{1}, true); err == nil {
		t.Error("a chunk of 2^20 values encoded")
	}
}

// sparseN is the update length of the malformed cases: chunks of 64
// (offsets of 6 bits) with k = 4 hold 64 values (4 entries) and 36 (3).
const sparseN = 100

func sparseGood() []sparseChunkSpec {
	return []sparseChunkSpec{
		{0.5, 1, []uint32{1, 7, 30, 63}, []uint32{0, 1, 2, 3}},
		{0.25, 0.25, []uint32{0, 2, 35}, []uint32{1, 3, 0}},
	}
}

// edit is sparseGood with f applied.
func sparseEdit(f func(c []sparseChunkSpec)) []byte {
	c := sparseGood()
	f(c)
	return sparsePacked(64, 4, c...)
}

var malformedSparse = []struct {
	name   string
	packed []byte
	reason string
}{
	{"empty", nil, "truncated: 0 bytes, want at least 8"},
	{"chunk too small", sparsePacked(32, 4), "chunk = 32"},
	{"chunk too large", sparsePacked(1<<17, 4), "chunk = 131072"},
	{"k = 0", sparsePacked(64, 0), "k = 0"},
	{"k > chunk", sparsePacked(64, 65), "k = 65"},
	{"truncated", sparsePacked(64, 4, sparseGood()...)[:30], "truncated: 30 bytes, want 31"},
	{"over-long", append(sparsePacked(64, 4, sparseGood()...), 0), "over-long: 32 bytes, want 31"},
	{"NaN level", sparseEdit(func(c []sparseChunkSpec) { c[1].hi = float32(math.NaN()) }), "chunk 1: levels 0.25 and NaN must be finite"},
	{"Inf level", sparseEdit(func(c []sparseChunkSpec) { c[0].lo = float32(math.Inf(1)) }), "chunk 0: levels +Inf and 1 must be finite"},
	{"negative level", sparseEdit(func(c []sparseChunkSpec) { c[0].lo = -0.5 }), "must not be negative"},
	{"negative zero level", sparseEdit(func(c []sparseChunkSpec) { c[0].lo = float32(math.Copysign(0, -1)) }), "must not be negative"},
	{"levels out of order", sparseEdit(func(c []sparseChunkSpec) { c[0].lo = 2 }), "chunk 0: level lo 2 is above hi 1"},
	{"offset out of range", sparseEdit(func(c []sparseChunkSpec) { c[1].offs[2] = 36 }), "chunk 1: offset 36 (entry 2) is out of range (36 values)"},
	{"offset repeated", sparseEdit(func(c []sparseChunkSpec) { c[0].offs[2] = 7 }), "offset 7 (entry 2) is repeated"},
	{"offsets unsorted", sparseEdit(func(c []sparseChunkSpec) { c[0].offs[1], c[0].offs[2] = 30, 7 }), "offset 7 (entry 2) comes after 30"},
}

func TestDecodeSparseMalformed(t *testing.T) {
	good := sparsePacked(64, 4, sparseGood()...)
	got, err := DecodeUpdate(CodecSparse, good, sparseN, nil)
	if err != nil {
		t.Fatalf("the good update: %v", err)
	}
	want := make([]float32, sparseN)
	want[1], want[7], want[30], want[63] = 0.5, 1, -0.5, -1
	want[64], want[66], want[99] = 0.25, -0.25, 0.25
	if !slices.Equal(got, want) {
		t.Fatalf("the good update decodes to %v, want %v", got, want)
	}
	for _, c := range malformedSparse {
		t.Run(c.name, func(t *testing.T) {
			out, err := DecodeUpdate(CodecSparse, c.packed, sparseN, make([]float32, 0, 4))
			if err == nil {
				t.Fatalf("accepted: %v", out)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Errorf("error %q does not say %q", err, c.reason)
			}
		})
	}
	// Padding: entries of 6 + 2 bits (chunks of 64) fill whole bytes; 100
	// values in one chunk of 128 (offsets of 7 bits) at k = 6 send 5
	// entries of 9 bits, 45 bits: 3 bits of padding.
	pad := sparsePacked(128, 6, sparseChunkSpec{0, 1, []uint32{0, 1, 2, 3, 4}, []uint32{1, 1, 1, 1, 1}})
	if _, err := DecodeUpdate(CodecSparse, pad, sparseN, nil); err != nil {
		t.Fatalf("padded update: %v", err)
	}
	pad[len(pad)-1] |= 0x80
	if _, err := DecodeUpdate(CodecSparse, pad, sparseN, nil); err == nil || !strings.Contains(err.Error(), "chunk 0: the padding bits after its codes are not zero") {
		t.Fatalf("nonzero padding: %v", err)
	}
}

// FuzzDecodeSparse: whatever the bytes, DecodeSparse never panics; what it
// accepts has the exact length for its header, n finite values, at most
// the header's count of entries per chunk set, each ± a level of its
// chunk. The seeds are in testdata/fuzz/FuzzDecodeSparse and below.
func FuzzDecodeSparse(f *testing.F) {
	r := rand.New(rand.NewPCG(27, 28))
	for _, c := range []struct {
		n, chunk int
		frac     float64
	}{{1, 64, 0.01}, {100, 64, 0.05}, {300, 128, 0.25}, {5000, 4096, 0.01}} {
		e := &UpdateEncoder{Codec: CodecSparse, SparseChunk: c.chunk, SparseFraction: c.frac}
		b, err := e.Encode(nil, randUpdate(r, c.n, 1), true)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint16(c.n), b)
	}
	for _, c := range malformedSparse {
		f.Add(uint16(sparseN), c.packed)
	}
	f.Fuzz(func(t *testing.T, n16 uint16, packed []byte) {
		n := int(n16)
		out, err := DecodeUpdate(CodecSparse, packed, n, make([]float32, 0, 3))
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		chunk, k, ok := SparseParams(packed)
		if !ok || len(packed) != SparseLen(n, chunk, k) {
			t.Fatalf("accepted %d bytes, want %d for chunk %d, k %d", len(packed), SparseLen(n, chunk, k), chunk, k)
		}
		if len(out) != n {
			t.Fatalf("%d values decoded, want %d", len(out), n)
		}
		p := packed[sparseHeader:]
		for start := 0; start < n; start += chunk {
			blk := out[start:min(start+chunk, n)]
			kc := sparseChunkCount(len(blk), chunk, k)
			lo := math.Float32frombits(binary.LittleEndian.Uint32(p))
			hi := math.Float32frombits(binary.LittleEndian.Uint32(p[4:]))
			p = p[sparseChunkLen(kc, sparseOffsetBits(chunk)):]
			set := 0
			for i, v := range blk {
				a := float32(math.Abs(float64(v)))
				if !finite32(v) || (v != 0 && a != lo && a != hi) {
					t.Fatalf("value %d = %v, not ± a level (%v, %v)", start+i, v, lo, hi)
				}
				if v != 0 {
					set++
				}
			}
			if set > kc {
				t.Fatalf("chunk at %d: %d entries set, want at most %d", start, set, kc)
			}
		}
	})
}
