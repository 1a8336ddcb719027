package dataset

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

func TestMakeShards(t *testing.T) {
	const n, size = 1000, 64
	a := MakeShards(n, size, 7)
	if !reflect.DeepEqual(a, MakeShards(n, size, 7)) {
		t.Fatal("same (n, size, seed) gave different shards")
	}
	if len(a) != 16 {
		t.Fatalf("%d shards, want 16", len(a))
	}
	seen := make([]int, n)
	for i, s := range a {
		if s.ID != i {
			t.Errorf("shard %d has ID %d", i, s.ID)
		}
		want := size
		if i == len(a)-1 {
			want = n - 15*size
		}
		if len(s.Indices) != want {
			t.Errorf("shard %d has %d examples, want %d", i, len(s.Indices), want)
		}
		for _, ix := range s.Indices {
			seen[ix]++
		}
	}
	for ix, c := range seen {
		if c != 1 {
			t.Fatalf("index %d appears %d times", ix, c)
		}
	}
	if b := MakeShards(n, size, 8); reflect.DeepEqual(a, b) {
		t.Error("seed 8 gave the same order as seed 7")
	}
	if slices.IsSorted(a[0].Indices) {
		t.Error("shard 0 is sorted: not permuted")
	}
	// Appending to one shard must not overwrite the next (they share an array).
	next := a[1].Indices[0]
	_ = append(a[0].Indices, -1)
	if a[1].Indices[0] != next {
		t.Error("append to shard 0 overwrote shard 1")
	}

	if s := MakeShards(0, 10, 1); len(s) != 0 {
		t.Errorf("n=0: %d shards", len(s))
	}
	if s := MakeShards(5, 10, 1); len(s) != 1 || len(s[0].Indices) != 5 {
		t.Errorf("size > n: %+v", s)
	}
	if s := MakeShards(5, 1, 1); len(s) != 5 {
		t.Errorf("size 1: %d shards", len(s))
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "size 0") {
			t.Errorf("size 0: recovered %v, want a panic naming the size", r)
		}
	}()
	MakeShards(5, 0, 1)
}

// The permutation is part of the coordinator's persistent state (which
// examples shard k holds); pin it so a change to the shuffle is noticed.
func TestPermutationGolden(t *testing.T) {
	got := Permutation(10, 1)
	want := []int{6, 1, 5, 0, 8, 2, 9, 4, 3, 7}
	if !slices.Equal(got, want) {
		t.Errorf("Permutation(10, 1) = %v, want %v", got, want)
	}
	if got := Permutation(3, -5); len(got) != 3 {
		t.Errorf("negative seed: %v", got)
	}
}

// Every ordering of 3 elements is about equally likely across seeds: a
// check that the Fisher-Yates loop and bounded draw are unbiased.
func TestPermutationUniform(t *testing.T) {
	const seeds = 6000
	counts := map[[3]int]int{}
	for s := range int64(seeds) {
		p := Permutation(3, s)
		counts[[3]int(p)]++
	}
	if len(counts) != 6 {
		t.Fatalf("%d distinct orderings, want 6: %v", len(counts), counts)
	}
	for p, c := range counts {
		if c < 850 || c > 1150 { // mean 1000, sd about 29
			t.Errorf("ordering %v: %d of %d", p, c, seeds)
		}
	}
}

func TestShardRoundTripMNIST(t *testing.T) {
	train, _ := loadMNIST(t)
	shards := MakeShards(train.N, 1000, 42)
	sh := shards[3]
	b := EncodeShard(train, sh)
	if len(b) != ShardHeaderSize(3)+1000*785 {
		t.Fatalf("encoded %d bytes, want %d", len(b), ShardHeaderSize(3)+1000*785)
	}
	d, err := DecodeShard(b, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if d.N != 1000 || !slices.Equal(d.Shape, []int{1, 28, 28}) || d.Classes != 10 || d.Elem != Pixels || d.Kind != ClassLabels {
		t.Fatalf("header %s", d.Describe())
	}
	got := make([]float32, 784)
	want := make([]float32, 784)
	var gl, wl [1]int32
	for k, ix := range sh.Indices {
		if !bytes.Equal(d.U8[k*784:(k+1)*784], train.U8[ix*784:(ix+1)*784]) || d.Labels[k] != train.Labels[ix] {
			t.Fatalf("example %d (index %d) differs", k, ix)
		}
		if k < 50 {
			d.FillExample(got, gl[:], k)
			train.FillExample(want, wl[:], ix)
			if !slices.Equal(got, want) || gl != wl {
				t.Fatalf("example %d differs from the set's", k)
			}
		}
	}
	x := make([]float32, 10*784)
	lab := make([]int32, 10)
	d.Fill(x, lab, 990, 10)
	for i, l := range lab {
		if l != train.Labels[sh.Indices[990+i]] {
			t.Fatalf("Fill labels[%d]", i)
		}
	}
	if enc, err := EncodeSet(d); err != nil || !bytes.Equal(enc, b) {
		t.Errorf("EncodeSet does not reproduce the shard: %v", err)
	}
	// Streaming, one byte per Read: same result.
	d2, err := ReadShard(iotest.OneByteReader(bytes.NewReader(b)), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d, d2) {
		t.Error("ReadShard differs from DecodeShard")
	}
	// The short last shard too.
	last := shards[len(shards)-1]
	if d, err := DecodeShard(EncodeShard(train, last), 1000); err != nil || d.N != len(last.Indices) {
		t.Fatalf("last shard: %v", err)
	}
	// AppendShard appends.
	if b2, err := AppendShard([]byte("xyz"), train, sh); err != nil || string(b2[:3]) != "xyz" || !bytes.Equal(b2[3:], b) {
		t.Errorf("AppendShard: %v", err)
	}
}

// Text travels as one byte per token, t+1 per window (the labels are the
// window shifted), and decodes to the same inputs and labels as the set.
func TestShardRoundTripText(t *testing.T) {
	text := []byte(strings.Repeat("In the beginning God created the heaven and the earth. ", 40))
	train, val, err := TextSplits("t", "dataset.path", text, 16, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	if val.N < 1 || train.N != (len(text)-int(float64(len(text))*0.1)-1)/16 {
		t.Fatalf("train %s, val %s", train.Describe(), val.Describe())
	}
	sh := MakeShards(train.N, 7, 3)[1]
	b := EncodeShard(train, sh)
	if len(b) != ShardHeaderSize(1)+7*17 {
		t.Fatalf("text shard of 7 windows of 16 is %d bytes, want %d", len(b), ShardHeaderSize(1)+7*17)
	}
	d, err := DecodeShard(b, 100)
	if err != nil {
		t.Fatal(err)
	}
	if d.Elem != Tokens8 || d.Kind != NextTokens || d.LabelsPerExample() != 16 || d.Classes != 256 || d.Stride != 17 {
		t.Fatalf("decoded %s stride %d", d.Describe(), d.Stride)
	}
	x, lab := make([]float32, 7*16), make([]int32, 7*16)
	d.Fill(x, lab, 0, 7)
	for k, ix := range sh.Indices {
		win := text[ix*16 : ix*16+17]
		for p := range 16 {
			if x[k*16+p] != float32(win[p]) || lab[k*16+p] != int32(win[p+1]) {
				t.Fatalf("window %d position %d: x %v label %d, want %d and %d", k, p, x[k*16+p], lab[k*16+p], win[p], win[p+1])
			}
		}
	}
	if enc, err := EncodeSet(d); err != nil || !bytes.Equal(enc, b) {
		t.Errorf("EncodeSet does not reproduce the shard: %v", err)
	}
}

// Float32 features, uint16 tokens and more than 256 classes (2-byte
// labels) round-trip too.
func TestShardRoundTripWideTypes(t *testing.T) {
	f := &Set{Name: "f", Elem: Float32, Shape: []int{3}, Kind: ClassLabels, Classes: 300, N: 2,
		F32: []float32{0.5, -1e30, 3, 4, 5, -6}, Labels: []int32{299, 7}}
	tok := &Set{Name: "tok", Elem: Tokens16, Shape: []int{2, 2}, Kind: ClassLabels, Classes: 1000, N: 2,
		U16: []uint16{999, 0, 1, 2, 3, 4, 5, 6}, Labels: []int32{1, 0}}
	for _, s := range []*Set{f, tok} {
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		b, err := EncodeSet(s)
		if err != nil {
			t.Fatal(err)
		}
		d, err := DecodeShard(b, 10)
		if err != nil {
			t.Fatal(err)
		}
		d.Name = s.Name
		if !reflect.DeepEqual(d, s) {
			t.Errorf("%s: decoded %+v, want %+v", s.Name, d, s)
		}
	}
	x, lab := make([]float32, 6), make([]int32, 2)
	f.Fill(x, lab, 0, 2)
	if !slices.Equal(x, f.F32) || !slices.Equal(lab, f.Labels) {
		t.Errorf("float features filled as %v %v", x, lab)
	}
	tok.Fill(x[:4], lab[:1], 0, 1)
	if !slices.Equal(x[:4], []float32{999, 0, 1, 2}) {
		t.Errorf("uint16 tokens filled as %v", x[:4])
	}
}

// patch returns a copy of b changed by f.
func patch(b []byte, f func(b []byte)) []byte {
	c := bytes.Clone(b)
	f(c)
	return c
}

func TestDecodeShardRejects(t *testing.T) {
	s := smallSet()
	good := EncodeShard(s, Shard{ID: 0, Indices: []int{4, 0, 2}}) // 28 + 3*7 = 49 bytes
	if _, err := DecodeShard(good, 3); err != nil {
		t.Fatal(err)
	}
	text, _, err := TextSplits("t", "dataset.path", []byte("abcdefghijklmnopqrstuvwxyz"), 4, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	goodText := EncodeShard(text, Shard{Indices: []int{0, 1}}) // 20 + 2*5 = 30 bytes
	le := binary.LittleEndian
	cases := []struct {
		name string
		in   []byte
		max  int
		want error
		msg  []string
	}{
		{"empty", nil, 10, ErrShardFormat, []string{"truncated", "0 bytes"}},
		{"short header", good[:15], 10, ErrShardFormat, []string{"truncated", "15 bytes"}},
		{"short dims", good[:27], 10, ErrShardFormat, []string{"truncated", "27 bytes", "header alone is 28"}},
		{"header only", good[:28], 10, ErrShardFormat, []string{"truncated", "49 bytes, got 28"}},
		{"one short", good[:48], 10, ErrShardFormat, []string{"truncated", "3 examples of 6 uint8 pixels", "got 48"}},
		{"trailing", append(bytes.Clone(good), 0), 10, ErrShardFormat, []string{"1 trailing bytes"}},
		{"magic", patch(good, func(b []byte) { copy(b, "<htm") }), 10, ErrShardFormat, []string{`"<htm"`, "CTSH"}},
		{"version 1", patch(good, func(b []byte) { b[4] = 1 }), 10, ErrShardFormat, []string{"version 1", "reads version 2"}},
		{"elem 0", patch(good, func(b []byte) { b[5] = 0 }), 10, ErrShardFormat, []string{"element type 0"}},
		{"elem 9", patch(good, func(b []byte) { b[5] = 9 }), 10, ErrShardFormat, []string{"element type 9"}},
		{"kind 3", patch(good, func(b []byte) { b[6] = 3 }), 10, ErrShardFormat, []string{"label kind 3"}},
		{"next tokens of pixels", patch(good, func(b []byte) { b[6] = 2 }), 10, ErrShardFormat, []string{"token elements"}},
		{"rank 0", patch(good, func(b []byte) { b[7] = 0 }), 10, ErrShardFormat, []string{"0 dimensions"}},
		{"rank 5", patch(good, func(b []byte) { b[7] = 5 }), 10, ErrShardFormat, []string{"5 dimensions"}},
		{"zero dim", patch(good, func(b []byte) { le.PutUint32(b[16:], 0) }), 10, ErrShardFormat, []string{"dimension 0 is 0"}},
		{"huge example", patch(good, func(b []byte) { le.PutUint32(b[20:], 0xffff); le.PutUint32(b[24:], 0xffff) }), 10, ErrShardFormat, []string{"limit of"}},
		{"classes 1", patch(good, func(b []byte) { le.PutUint32(b[8:], 1) }), 10, ErrShardFormat, []string{"classes is 1"}},
		{"classes 2^16+1", patch(good, func(b []byte) { le.PutUint32(b[8:], 1<<16+1) }), 10, ErrShardFormat, []string{"classes is 65537"}},
		{"count 0", patch(good, func(b []byte) { le.PutUint32(b[12:], 0) }), 10, ErrShardFormat, []string{"0 examples"}},
		{"count over limit", good, 2, ErrShardLimit, []string{"3 examples", "limit of 2"}},
		{"huge count", patch(good, func(b []byte) { le.PutUint32(b[12:], 0xffffffff) }), 1000, ErrShardLimit, []string{"4294967295"}},
		{"huge count, no limit", patch(good, func(b []byte) { le.PutUint32(b[12:], 0x7fffffff) }), math.MaxInt32, ErrShardFormat, []string{"truncated"}},
		{"bad label", patch(good, func(b []byte) { b[len(b)-2] = 3 }), 10, ErrShardFormat, []string{"example 1 has label 3", "classes=3"}},
		{"label 255", patch(good, func(b []byte) { b[len(b)-1] = 255 }), 10, ErrShardFormat, []string{"label 255"}},
		{"text token over vocabulary", patch(goodText, func(b []byte) { le.PutUint32(b[8:], 123); b[len(b)-1] = 200 }), 10, ErrShardFormat, []string{"is 200", "vocabulary of 123"}},
		{"text rank 2", patch(goodText, func(b []byte) { b[7] = 2 }), 10, ErrShardFormat, []string{"dimension 1"}},
		{"text window short", goodText[:len(goodText)-1], 10, ErrShardFormat, []string{"2 examples of 5 uint8 tokens"}},
		{"uint8 tokens, 300 classes", patch(goodText, func(b []byte) { le.PutUint32(b[8:], 300) }), 10, ErrShardFormat, []string{"classes is 300", "2..256"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := DecodeShard(c.in, c.max)
			d2, err2 := ReadShard(bytes.NewReader(c.in), c.max)
			if err == nil || err2 == nil {
				t.Fatalf("DecodeShard: %+v, %v; ReadShard: %+v, %v; want errors", d, err, d2, err2)
			}
			want2 := c.want
			if c.name == "huge count, no limit" && strconv.IntSize == 32 {
				want2 = ErrShardLimit // 15 GB cannot be buffered there, so ReadShard refuses before reading
			}
			if !errors.Is(err, c.want) || !errors.Is(err2, want2) {
				t.Errorf("errors %q, %q do not wrap %q", err, err2, c.want)
			}
			for _, m := range c.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("DecodeShard error %q does not mention %q", err, m)
				}
			}
		})
	}
	if _, err := DecodeShard(good, 0); err == nil || !strings.Contains(err.Error(), "maxExamples") {
		t.Errorf("maxExamples 0: %v", err)
	}
}

// A header promising a huge shard must not make ReadShard allocate it up
// front: a worker would die on a malicious or broken body.
func TestReadShardDoesNotTrustHeaderSize(t *testing.T) {
	h := appendShardHeader(nil, &Set{Elem: Pixels, Kind: ClassLabels, Shape: []int{1, 28, 28}, Classes: 10, N: 1_000_000}) // claims 785 MB
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadShard(bytes.NewReader(append(h, make([]byte, 1000)...)), 1_000_000)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrShardFormat) || !strings.Contains(err.Error(), "got 1028") {
		t.Fatalf("err = %v, want truncation naming what arrived", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("allocated %d bytes for a 1 kB body", alloc)
	}
}

func TestEncodeShardRejects(t *testing.T) {
	for name, c := range map[string]struct {
		mut   func(*Set)
		shard Shard
	}{
		"empty shard":    {nil, Shard{}},
		"index past N":   {nil, Shard{Indices: []int{5}}},
		"negative index": {nil, Shard{Indices: []int{-1}}},
		"bad label":      {func(s *Set) { s.Labels[1] = 9 }, Shard{Indices: []int{1}}},
		"short images":   {func(s *Set) { s.U8 = s.U8[:6] }, Shard{Indices: []int{0}}},
		"classes 70000":  {func(s *Set) { s.Classes = 70000 }, Shard{Indices: []int{0}}},
		"rank 0":         {func(s *Set) { s.Shape = nil }, Shard{Indices: []int{0}}},
		"NaN feature":    {func(s *Set) { s.Elem, s.U8, s.F32 = Float32, nil, make([]float32, 30); s.F32[0] = float32(math.NaN()) }, Shard{Indices: []int{0}}},
	} {
		s := smallSet()
		if c.mut != nil {
			c.mut(s)
		}
		if _, err := AppendShard(nil, s, c.shard); err == nil {
			t.Errorf("%s: AppendShard = nil error", name)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: EncodeShard did not panic", name)
				}
			}()
			EncodeShard(s, c.shard)
		}()
	}
}

func mnistShard(b *testing.B) []byte {
	train, _ := loadMNIST(b)
	return EncodeShard(train, MakeShards(train.N, 1000, 1)[0])
}

func BenchmarkDecodeShard(b *testing.B) {
	enc := mnistShard(b)
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, err := DecodeShard(enc, 1000); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkShardFill(b *testing.B) {
	d, err := DecodeShard(mnistShard(b), 1000)
	if err != nil {
		b.Fatal(err)
	}
	x := make([]float32, d.N*d.ExampleSize())
	lab := make([]int32, d.N)
	b.SetBytes(int64(len(d.U8)))
	b.ReportAllocs()
	for b.Loop() {
		d.Fill(x, lab, 0, d.N)
	}
}

func BenchmarkEncodeShard(b *testing.B) {
	train, _ := loadMNIST(b)
	sh := MakeShards(train.N, 1000, 1)[0]
	buf := make([]byte, 0, ShardHeaderSize(3)+1000*785)
	b.SetBytes(int64(cap(buf)))
	for b.Loop() {
		if _, err := AppendShard(buf[:0], train, sh); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMakeShards(b *testing.B) {
	for b.Loop() {
		MakeShards(60000, 1000, 1)
	}
}

// Filling a batch allocates nothing, whatever the element type and label
// kind: it runs once per training step.
func TestFillDoesNotAllocate(t *testing.T) {
	text, _, err := TextSplits("t", "dataset.path", []byte(strings.Repeat("abcdefgh", 100)), 16, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	sets := []*Set{smallSet(), text,
		{Elem: Float32, Shape: []int{3}, Kind: ClassLabels, Classes: 4, N: 2, F32: make([]float32, 6), Labels: []int32{1, 3}},
		{Elem: Tokens16, Shape: []int{3}, Kind: NextTokens, Classes: 9, N: 2, U16: make([]uint16, 7), Stride: 3}}
	for _, s := range sets {
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		x := make([]float32, 2*s.ExampleSize())
		y := make([]int32, 2*s.LabelsPerExample())
		if n := testing.AllocsPerRun(100, func() { s.Fill(x, y, 0, 2) }); n != 0 {
			t.Errorf("%s: Fill allocates %v times per call", s.Describe(), n)
		}
	}
}
