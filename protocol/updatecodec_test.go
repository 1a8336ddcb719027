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

func randUpdate(r *rand.Rand, n int, scale float64) []float32 {
	u := make([]float32, n)
	for i := range u {
		u[i] = float32(r.NormFloat64() * scale)
	}
	return u
}

func encodeOnce(t testing.TB, codec string, u []float32) []byte {
	t.Helper()
	e := &UpdateEncoder{Codec: codec, TopKFraction: 0.05}
	b, err := e.Encode(nil, u, true)
	if err != nil {
		t.Fatalf("%s: encode: %v", codec, err)
	}
	return b
}

func TestUpdateCodecRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 255, 256, 257, 1000, 4097} {
		u := randUpdate(r, n, 0.1)
		u[0] = 3 // a value far from the rest in block 0
		t.Run("f32", func(t *testing.T) {
			b := encodeOnce(t, CodecF32, u)
			got, err := DecodeUpdate(CodecF32, b, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range u {
				if math.Float32bits(got[i]) != math.Float32bits(u[i]) {
					t.Fatalf("n=%d: value %d: %v, want %v", n, i, got[i], u[i])
				}
			}
		})
		t.Run("f16", func(t *testing.T) {
			b := encodeOnce(t, CodecF16, u)
			if len(b) != 2*n {
				t.Fatalf("%d bytes, want %d", len(b), 2*n)
			}
			got, err := DecodeUpdate(CodecF16, b, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range u {
				// Half has 11 significant bits: rounding is within 2^-11
				// relative, or half the smallest subnormal (2^-25).
				tol := max(math.Abs(float64(u[i]))/2048, math.Ldexp(1, -25))
				if d := math.Abs(float64(got[i]) - float64(u[i])); d > tol {
					t.Fatalf("n=%d: value %d: %v, want %v within %g", n, i, got[i], u[i], tol)
				}
			}
		})
		t.Run("i8", func(t *testing.T) {
			b := encodeOnce(t, CodecI8, u)
			if len(b) != I8Len(n) {
				t.Fatalf("%d bytes, want %d", len(b), I8Len(n))
			}
			got, err := DecodeUpdate(CodecI8, b, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range u {
				blk := b[(i/I8Block)*(i8Header+I8Block):]
				step := float64(math.Float32frombits(binary.LittleEndian.Uint32(blk[4:])))
				// step/2, plus the float32 rounding of the decode.
				tol := step/2 + 1e-6*math.Abs(float64(u[i])) + 1e-12
				if d := math.Abs(float64(got[i]) - float64(u[i])); d > tol {
					t.Fatalf("n=%d: value %d: %v, want %v within step/2 = %g", n, i, got[i], u[i], step/2)
				}
			}
		})
		t.Run("topk", func(t *testing.T) {
			b := encodeOnce(t, CodecTopK, u)
			k := TopKCount(n, 0.05)
			if len(b) != 4+8*k {
				t.Fatalf("%d bytes, want %d (k=%d)", len(b), 4+8*k, k)
			}
			got, err := DecodeUpdate(CodecTopK, b, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The k largest by magnitude, the lower index first on ties.
			order := make([]int, n)
			for i := range order {
				order[i] = i
			}
			slices.SortStableFunc(order, func(a, b int) int {
				x, y := math.Abs(float64(u[a])), math.Abs(float64(u[b]))
				switch {
				case x > y:
					return -1
				case x < y:
					return 1
				}
				return 0
			})
			want := make([]float32, n)
			for _, i := range order[:k] {
				want[i] = u[i]
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d k=%d: value %d: %v, want %v", n, k, i, got[i], want[i])
				}
			}
		})
	}
}

func TestTopKTiesAndCount(t *testing.T) {
	// Equal magnitudes: the lower indices win, whatever the sign.
	u := []float32{1, -2, 2, 0, -2, 2}
	e := &UpdateEncoder{Codec: CodecTopK, TopKFraction: 0.5}
	b, err := e.Encode(nil, u, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeUpdate(CodecTopK, b, len(u), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{0, -2, 2, 0, -2, 0}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, c := range []struct {
		n    int
		frac float64
		k    int
	}{{100, 0.01, 1}, {101, 0.01, 2}, {1, 0.01, 1}, {235146, 0.01, 2352}, {10, 1, 10}, {10, 0.0001, 1}} {
		if k := TopKCount(c.n, c.frac); k != c.k {
			t.Errorf("TopKCount(%d, %g) = %d, want %d", c.n, c.frac, k, c.k)
		}
	}
}

func TestI8ConstantBlockAndRange(t *testing.T) {
	u := make([]float32, 300)
	for i := range u {
		u[i] = 0.25
	}
	u[299] = 1e38 // a wide last block: the range overflows float32
	u[298] = -1e38
	b := encodeOnce(t, CodecI8, u)
	if step := math.Float32frombits(binary.LittleEndian.Uint32(b[4:])); step != 0 {
		t.Fatalf("constant block: step %v, want 0", step)
	}
	got, err := DecodeUpdate(CodecI8, b, len(u), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 256 {
		if got[i] != 0.25 {
			t.Fatalf("value %d: %v, want 0.25", i, got[i])
		}
	}
	if got[299] < 9.9e37 || got[298] > -9.9e37 {
		t.Fatalf("wide block: %v, %v", got[298], got[299])
	}
}

func TestF16ClampsFinite(t *testing.T) {
	u := []float32{1e6, -1e6, 0.5}
	got, err := DecodeUpdate(CodecF16, encodeOnce(t, CodecF16, u), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != MaxHalf || got[1] != -MaxHalf || got[2] != 0.5 {
		t.Fatalf("got %v", got)
	}
}

func norm(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

// Error feedback: what was sent, summed over many steps, tracks the sum of
// the true updates; the gap is the one residual still held.
func TestUpdateCodecErrorFeedback(t *testing.T) {
	const n, steps = 3000, 200
	for _, codec := range []string{CodecI8, CodecTopK, CodecSparse} {
		t.Run(codec, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 4))
			e := &UpdateEncoder{Codec: codec, TopKFraction: 0.05, SparseFraction: 0.05, SparseChunk: 256}
			sumTrue, sumSent := make([]float64, n), make([]float64, n)
			var buf []byte
			var dec []float32
			for s := range steps {
				// A drift every step shares, plus noise: the true sum grows.
				u := randUpdate(r, n, 0.01)
				for i := range u {
					u[i] += 0.002 * float32(i%7-3)
				}
				var err error
				if buf, err = e.Encode(buf, u, true); err != nil {
					t.Fatal(err)
				}
				if dec, err = DecodeUpdate(codec, buf, n, dec); err != nil {
					t.Fatal(err)
				}
				for i := range u {
					sumTrue[i] += float64(u[i])
					sumSent[i] += float64(dec[i])
				}
				// Σsent = Σtrue − residual, at every step.
				gap := make([]float64, n)
				for i := range gap {
					gap[i] = sumTrue[i] - sumSent[i] - float64(e.residual[i])
				}
				if g := norm(gap); g > 1e-3*norm(sumTrue)+1e-4 {
					t.Fatalf("step %d: Σtrue − Σsent − residual = %g", s, g)
				}
			}
			diff := make([]float64, n)
			for i := range diff {
				diff[i] = sumSent[i] - sumTrue[i]
			}
			res := make([]float64, n)
			for i, v := range e.residual {
				res[i] = float64(v)
			}
			d, tr, rn := norm(diff), norm(sumTrue), norm(res)
			t.Logf("‖Σsent−Σtrue‖ = %.4g, ‖residual‖ = %.4g, ‖Σtrue‖ = %.4g", d, rn, tr)
			if d > 1.01*rn+1e-3 {
				t.Errorf("‖Σsent−Σtrue‖ = %g, more than the one residual held (%g)", d, rn)
			}
			if d > 0.2*tr {
				t.Errorf("‖Σsent−Σtrue‖ = %g is not far below ‖Σtrue‖ = %g", d, tr)
			}
			// Without feedback the loss would accumulate: one step's error
			// times the steps, at least for topk. Check the residual is
			// bounded: no larger than a few steps' worth of updates.
			if rn > 0.5*tr {
				t.Errorf("residual %g grew with the sum %g", rn, tr)
			}
		})
	}
}

// A spot check's copy (feedback false) leaves the residual as it was.
func TestUpdateEncoderNoFeedback(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, codec := range []string{CodecI8, CodecTopK, CodecSparse} {
		e := &UpdateEncoder{Codec: codec}
		if _, err := e.Encode(nil, randUpdate(r, 1000, 1), true); err != nil {
			t.Fatal(err)
		}
		before := slices.Clone(e.residual)
		u := randUpdate(r, 1000, 1)
		b, err := e.Encode(nil, u, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(before, e.residual) {
			t.Fatalf("%s: a copy changed the residual", codec)
		}
		// And it encoded u alone: a fresh encoder says the same.
		if want := encodeWith(t, codec, u); !slices.Equal(b, want) {
			t.Fatalf("%s: a copy's encoding is not u's alone", codec)
		}
		// A non-finite value is an error, and the residual stays.
		u[3] = float32(math.NaN())
		if _, err := e.Encode(nil, u, true); err == nil {
			t.Fatalf("%s: NaN encoded", codec)
		}
		if !slices.Equal(before, e.residual) {
			t.Fatalf("%s: a failed encode changed the residual", codec)
		}
		e.Reset()
		if slices.ContainsFunc(e.residual, func(v float32) bool { return v != 0 }) {
			t.Fatalf("%s: Reset left a residual", codec)
		}
	}
}

func encodeWith(t *testing.T, codec string, u []float32) []byte {
	e := &UpdateEncoder{Codec: codec}
	b, err := e.Encode(nil, u, false)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUpdateEncoderNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	u := randUpdate(r, 5000, 1)
	for _, codec := range UpdateCodecs {
		e := &UpdateEncoder{Codec: codec}
		var buf []byte
		var dec []float32
		buf, _ = e.Encode(buf, u, true)
		dec, _ = DecodeUpdate(codec, buf, len(u), dec)
		allocs := testing.AllocsPerRun(10, func() {
			var err error
			if buf, err = e.Encode(buf, u, true); err != nil {
				t.Fatal(err)
			}
			if dec, err = DecodeUpdate(codec, buf, len(u), dec); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per encode and decode once warm", codec, allocs)
		}
	}
}

func le32(v uint32) []byte   { return binary.LittleEndian.AppendUint32(nil, v) }
func lef32(v float32) []byte { return le32(math.Float32bits(v)) }

func cat(parts ...[]byte) []byte { return slices.Concat(parts...) }

// malformedUpdates are packed updates of n = 4 values DecodeUpdate must
// refuse, with a word of the reason it must give.
var malformedUpdates = []struct {
	name, codec string
	packed      []byte
	reason      string
}{
	{"f16 truncated", CodecF16, []byte{0, 0, 0, 0, 0, 0}, "truncated"},
	{"f16 over-long", CodecF16, make([]byte, 10), "over-long"},
	{"f16 inf", CodecF16, []byte{0, 0, 0, 0x7c, 0, 0, 0, 0}, "+Inf"},
	{"f16 nan", CodecF16, []byte{0, 0, 0, 0, 0, 0x7e, 0, 0}, "NaN"},
	{"f32 truncated", CodecF32, make([]byte, 15), "truncated"},
	{"f32 nan", CodecF32, cat(lef32(1), lef32(float32(math.NaN())), lef32(1), lef32(1)), "NaN"},
	{"i8 truncated", CodecI8, cat(lef32(0), lef32(1), []byte{1, 2, 3}), "truncated"},
	{"i8 over-long", CodecI8, cat(lef32(0), lef32(1), []byte{1, 2, 3, 4, 5}), "over-long"},
	{"i8 nan min", CodecI8, cat(lef32(float32(math.NaN())), lef32(1), []byte{1, 2, 3, 4}), "min is NaN"},
	{"i8 inf step", CodecI8, cat(lef32(0), lef32(float32(math.Inf(1))), []byte{1, 2, 3, 4}), "step is +Inf"},
	{"i8 negative step", CodecI8, cat(lef32(0), lef32(-1), []byte{1, 2, 3, 4}), "negative"},
	{"i8 overflow", CodecI8, cat(lef32(3e38), lef32(3e38), []byte{0, 2, 3, 4}), "decodes to +Inf"},
	{"topk empty", CodecTopK, nil, "truncated"},
	{"topk k=0", CodecTopK, le32(0), "k = 0"},
	{"topk k>n", CodecTopK, cat(le32(5), make([]byte, 40)), "k = 5"},
	{"topk truncated", CodecTopK, cat(le32(2), le32(0), le32(1), lef32(1)), "truncated"},
	{"topk over-long", CodecTopK, cat(le32(1), le32(0), lef32(1), []byte{0}), "over-long"},
	{"topk index out of range", CodecTopK, cat(le32(1), le32(4), lef32(1)), "out of range"},
	{"topk index repeated", CodecTopK, cat(le32(2), le32(1), le32(1), lef32(1), lef32(1)), "repeated"},
	{"topk unsorted", CodecTopK, cat(le32(2), le32(2), le32(1), lef32(1), lef32(1)), "must increase"},
	{"topk nan value", CodecTopK, cat(le32(2), le32(0), le32(1), lef32(1), lef32(float32(math.NaN()))), "NaN"},
	{"topk inf value", CodecTopK, cat(le32(1), le32(2), lef32(float32(math.Inf(-1)))), "-Inf"},
	{"unknown codec", "zip", make([]byte, 16), "not an update codec"},
}

func TestDecodeUpdateMalformed(t *testing.T) {
	for _, c := range malformedUpdates {
		t.Run(c.name, func(t *testing.T) {
			out, err := DecodeUpdate(c.codec, c.packed, 4, make([]float32, 0, 4))
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
}

func TestUpdateSlack(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	u := randUpdate(r, 600, 1)
	b := encodeOnce(t, CodecI8, u)
	var sum float64
	p := b
	for start := 0; start < len(u); start += I8Block {
		count := min(I8Block, len(u)-start)
		step := float64(math.Float32frombits(binary.LittleEndian.Uint32(p[4:])))
		sum += float64(count) * step * step / 4
		p = p[i8Header+count:]
	}
	if got, want := UpdateSlack(CodecI8, b), 3*math.Sqrt(sum); math.Abs(got-want) > 1e-9*want || want == 0 {
		t.Fatalf("i8 slack %v, want %v", got, want)
	}
	// The slack covers one encode's error with room for the residual.
	dec, _ := DecodeUpdate(CodecI8, b, len(u), nil)
	var d float64
	for i := range u {
		d += (float64(dec[i]) - float64(u[i])) * (float64(dec[i]) - float64(u[i]))
	}
	if math.Sqrt(d) > UpdateSlack(CodecI8, b)/2 {
		t.Fatalf("one encode's error %v is over half the slack %v", math.Sqrt(d), UpdateSlack(CodecI8, b))
	}
	if s := UpdateSlack(CodecF32, nil); s != 0 {
		t.Fatalf("f32 slack %v", s)
	}
	if s := UpdateSlack(CodecF16, encodeOnce(t, CodecF16, u)); s != 0 {
		t.Fatalf("f16 slack %v", s)
	}
	if s := UpdateSlack(CodecTopK, encodeOnce(t, CodecTopK, u)); !math.IsInf(s, 1) {
		t.Fatalf("topk slack %v", s)
	}
	if s := UpdateSlack(CodecSparse, encodeOnce(t, CodecSparse, u)); !math.IsInf(s, 1) {
		t.Fatalf("sparse slack %v", s)
	}
	if s := UpdateSlack(CodecI8, []byte{1, 2, 3}); !math.IsInf(s, 1) {
		t.Fatalf("slack of a broken i8 update %v", s)
	}
}

func BenchmarkUpdateCodec(b *testing.B) {
	const n = 235146 // mnist-mlp
	r := rand.New(rand.NewPCG(11, 12))
	u := randUpdate(r, n, 0.01)
	for _, codec := range UpdateCodecs {
		e := &UpdateEncoder{Codec: codec}
		buf, _ := e.Encode(nil, u, true)
		b.Run("encode/"+codec, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				buf, _ = e.Encode(buf, u, true)
			}
			b.ReportMetric(float64(len(buf)), "bytes/update")
		})
		var dec []float32
		b.Run("decode/"+codec, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				var err error
				if dec, err = DecodeUpdate(codec, buf, n, dec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// All magnitudes equal (a zero update): topk sends the first k indices.
func TestTopKAllEqual(t *testing.T) {
	const n = 100000
	for _, u := range [][]float32{make([]float32, n), slices.Repeat([]float32{-0.5}, n)} {
		e := &UpdateEncoder{Codec: CodecTopK, TopKFraction: 0.01}
		b, err := e.Encode(nil, u, true)
		if err != nil {
			t.Fatal(err)
		}
		k := int(binary.LittleEndian.Uint32(b))
		if k != 1000 {
			t.Fatalf("k = %d, want 1000", k)
		}
		for i := range k {
			if j := binary.LittleEndian.Uint32(b[4+4*i:]); j != uint32(i) {
				t.Fatalf("index %d is %d, want %d", i, j, i)
			}
		}
	}
}
