package dataset

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
	"testing/iotest"

	"github.com/crowdtrain/crowdtrain/internal/testnpy"
)

// readers returns b as one stream in the ways a network or file hands it
// over: whole, in two halves, and one byte per Read. Decoders must not care.
func readers(b []byte) map[string]io.Reader {
	h := len(b) / 2
	return map[string]io.Reader{
		"whole":  bytes.NewReader(b),
		"halves": io.MultiReader(bytes.NewReader(b[:h]), bytes.NewReader(b[h:])),
		"1byte":  iotest.OneByteReader(bytes.NewReader(b)),
	}
}

func FuzzDecodeShard(f *testing.F) {
	s := smallSet()
	good := EncodeShard(s, Shard{Indices: []int{4, 0, 2}})
	f.Add(good)
	f.Add(EncodeShard(s, Shard{Indices: []int{1}}))
	test := loadMNISTTest(f)
	f.Add(EncodeShard(test, Shard{Indices: []int{0, 9999}}))
	f.Add([]byte{})
	f.Add([]byte("CTSH"))
	f.Add(good[:ShardHeaderSize(3)])
	f.Add(good[:len(good)-1])
	f.Add(append(bytes.Clone(good), 7))
	f.Add(patch(good, func(b []byte) { b[len(b)-1] = 3 }))                                   // label == classes
	f.Add(patch(good, func(b []byte) { binary.LittleEndian.PutUint32(b[12:], 0xffffffff) })) // huge count
	f.Add(patch(good, func(b []byte) { binary.LittleEndian.PutUint32(b[20:], 0xffff) }))     // wrong length
	f.Add(patch(good, func(b []byte) { b[4] = 1 }))                                          // version 1
	text, _, _ := TextSplits("t", "dataset.path", []byte("one two three four five six seven"), 5, 0.2)
	f.Add(EncodeShard(text, Shard{Indices: []int{2, 0}}))
	wide := &Set{Elem: Float32, Shape: []int{2}, Kind: ClassLabels, Classes: 300, N: 2, F32: []float32{1, -2, 3.5, 0}, Labels: []int32{299, 3}}
	f.Add(EncodeShard(wide, Shard{Indices: []int{1, 0}}))
	tok := &Set{Elem: Tokens16, Shape: []int{3}, Kind: NextTokens, Classes: 1000, N: 2, U16: []uint16{999, 1, 2, 3, 4, 5, 6}, Stride: 3}
	f.Add(EncodeShard(tok, Shard{Indices: []int{1, 0}}))
	f.Add([]byte("<html><body>502 Bad Gateway</body></html>"))

	const maxEx = 1 << 12
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeShard(b, maxEx)
		for name, r := range readers(b) {
			d2, err2 := ReadShard(r, maxEx)
			if (err == nil) != (err2 == nil) {
				t.Fatalf("ReadShard(%s) err %v, DecodeShard err %v", name, err2, err)
			}
			if err != nil && (errors.Is(err, ErrShardLimit) != errors.Is(err2, ErrShardLimit)) {
				t.Fatalf("ReadShard(%s) err %v, DecodeShard err %v: different kinds", name, err2, err)
			}
			if err == nil && !reflect.DeepEqual(d, d2) {
				t.Fatalf("ReadShard(%s) decoded differently", name)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrShardFormat) && !errors.Is(err, ErrShardLimit) {
				t.Fatalf("error %v wraps neither ErrShardFormat nor ErrShardLimit", err)
			}
			return
		}
		es, lpe := d.ExampleSize(), d.LabelsPerExample()
		if d.N < 1 || d.N > maxEx || es < 1 || es > MaxExampleSize {
			t.Fatalf("inconsistent shard: %s", d.Describe())
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("a decoded shard is not a valid set: %v", err)
		}
		// A valid shard re-encodes to the same bytes.
		if enc, err := EncodeSet(d); err != nil || !bytes.Equal(enc, b) {
			t.Fatalf("EncodeSet of the decoded shard: %v, or different bytes", err)
		}
		x := make([]float32, d.N*es)
		lab := make([]int32, d.N*lpe)
		d.Fill(x, lab, 0, d.N)
		for i, v := range x {
			if v != v || (d.Elem == Pixels && (v < 0 || v > 1)) || (d.Elem != Float32 && d.Elem != Pixels && (v < 0 || int(v) >= d.Classes)) {
				t.Fatalf("input %d = %v (%s)", i, v, d.Describe())
			}
		}
		for i, l := range lab {
			if l < 0 || int(l) >= d.Classes {
				t.Fatalf("label %d = %d, classes %d", i, l, d.Classes)
			}
		}
	})
}

func FuzzReadIDX(f *testing.F) {
	small := mustEncodeIDX(f, &IDX{Dims: []int{2, 3}, Data: []byte{0, 1, 2, 253, 254, 255}})
	f.Add(small)
	f.Add(gzipBytes(f, small))
	f.Add(mustEncodeIDX(f, &IDX{Dims: []int{1, 1, 1, 1}, Data: []byte{9}}))
	f.Add(mustEncodeIDX(f, &IDX{Dims: []int{3, 2, 2}, Data: make([]byte, 12)}))
	f.Add([]byte{})
	f.Add([]byte{0x1f, 0x8b})
	f.Add(small[:len(small)-1])
	f.Add(append(bytes.Clone(small), 0))
	f.Add(gzipBytes(f, small)[:20])
	f.Add(idxHeader(0x08, 1, 1, 1, 1, 1))
	f.Add(idxHeader(0x0D, 1))
	f.Add(idxHeader(0x08, 0xffffffff, 0xffffffff))
	f.Add(idxHeader(0x08, 0))
	f.Add(gzipBytes(f, idxHeader(0x08, 1<<15, 1<<15)))
	f.Add([]byte("\x00\x00\x08\x01\x00\x00\x00\x02ab"))

	const maxBytes = 1 << 16
	f.Fuzz(func(t *testing.T, b []byte) {
		var first *IDX
		var firstErr error
		for i, name := range []string{"whole", "halves", "1byte"} {
			x, err := ReadIDX(readers(b)[name], maxBytes)
			if i == 0 {
				first, firstErr = x, err
				continue
			}
			if (err == nil) != (firstErr == nil) || (err != nil && err.Error() != firstErr.Error()) {
				t.Fatalf("%s: err %v; whole: err %v", name, err, firstErr)
			}
			if err == nil && !reflect.DeepEqual(x, first) {
				t.Fatalf("%s decoded differently", name)
			}
		}
		if firstErr != nil {
			return
		}
		x := first
		total := 1
		for _, d := range x.Dims {
			if d < 1 {
				t.Fatalf("dims %v", x.Dims)
			}
			total *= d
		}
		if len(x.Dims) < 1 || len(x.Dims) > IDXMaxDims || total != len(x.Data) || total > maxBytes {
			t.Fatalf("dims %v with %d data bytes", x.Dims, len(x.Data))
		}
		enc, err := EncodeIDX(x)
		if err != nil {
			t.Fatalf("EncodeIDX of a decoded IDX: %v", err)
		}
		if len(b) > 0 && b[0] == 0 && !bytes.Equal(enc, b) {
			t.Fatal("re-encoding a valid raw IDX gives different bytes")
		}
		x2, err := ReadIDX(bytes.NewReader(enc), maxBytes)
		if err != nil || !reflect.DeepEqual(x2, x) {
			t.Fatalf("re-encoded IDX does not read back: %v", err)
		}
	})
}

// The .npy header parser never panics, and what it accepts has the keys
// numpy writes, with a shape of non-negative dimensions.
func FuzzParseNPYHeader(f *testing.F) {
	for _, h := range []string{
		"{'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }",
		"{'descr': '|u1', 'fortran_order': False, 'shape': (10,), }",
		"{'descr': '<i8', 'fortran_order': True, 'shape': (), }",
		`{"descr": "<f8", "fortran_order": False, "shape": (3L, 4L)}`,
		"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}",
		"{'descr': '<f4'", "{", "", "{}", "{'shape': (99999999999999999999,)}",
	} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, h string) {
		got, err := ParseNPYHeader(h)
		if err != nil {
			if !errors.Is(err, ErrNPYFormat) {
				t.Fatalf("error %v does not wrap ErrNPYFormat", err)
			}
			return
		}
		for _, d := range got.Shape {
			if d < 0 {
				t.Fatalf("negative dimension in %v", got.Shape)
			}
		}
	})
}

// ReadNPY never panics on any bytes, never allocates from a lying header,
// and what it accepts has exactly the data its shape and dtype describe.
func FuzzReadNPY(f *testing.F) {
	f.Add(testnpy.Encode("<f4", []int{3, 2}, f32Bytes(1, 2, 3, 4, 5, 6)))
	f.Add(testnpy.Encode("|u1", []int{2, 2}, []byte{1, 2, 3, 4}))
	f.Add(testnpy.Encode("<i8", []int{2}, i64Bytes(5, -1)))
	f.Add(testnpy.Encode("<i8", []int{0}, nil))
	f.Add(testnpy.Encode(">f4", []int{1}, f32Bytes(1)))
	f.Add(testnpy.Encode("<f4", []int{1 << 30, 1 << 30}, nil))
	f.Add([]byte("\x93NUMPY\x02\x00\xff\xff\xff\xff"))
	f.Add([]byte("\x93NUMPY"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ReadNPY(bytes.NewReader(b), 1<<20)
		if err != nil {
			return
		}
		n := a.ItemSize
		for _, d := range a.Shape {
			n *= d
		}
		if len(a.Data) != n {
			t.Fatalf("shape %v of %s with %d data bytes", a.Shape, a.Dtype(), len(a.Data))
		}
		// Inputs and labels built from it are either refused or valid.
		s := &Set{Kind: ClassLabels}
		if npyInputs(a, s) == nil {
			s.Labels, s.Classes = make([]int32, s.N), 2
			if err := s.Validate(); err != nil {
				t.Fatalf("npyInputs made an invalid set: %v", err)
			}
		}
		if labels, classes, err := npyLabels(a, len(a.Data)/max(1, a.ItemSize)); err == nil {
			for _, l := range labels {
				if l < 0 || int(l) >= classes || classes > MaxClasses {
					t.Fatalf("label %d of %d classes", l, classes)
				}
			}
		}
	})
}
