package dataset

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Elem is how a Set stores its inputs, and how an input element becomes
// the float32 a model reads.
type Elem uint8

const (
	// Pixels are bytes 0..255; the model reads p/255.
	Pixels Elem = 1
	// Float32 features are read as they are.
	Float32 Elem = 2
	// Tokens8 are token ids 0..255 (text bytes); the model reads the id
	// as a float32 (an exact integer).
	Tokens8 Elem = 3
	// Tokens16 are token ids 0..65535.
	Tokens16 Elem = 4
)

// Size is the bytes one element takes (in a Set and in a shard).
func (e Elem) Size() int {
	switch e {
	case Float32:
		return 4
	case Tokens16:
		return 2
	}
	return 1
}

func (e Elem) String() string {
	switch e {
	case Pixels:
		return "uint8 pixels"
	case Float32:
		return "float32 features"
	case Tokens8:
		return "uint8 tokens"
	case Tokens16:
		return "uint16 tokens"
	}
	return "element type " + strconv.Itoa(int(e))
}

func (e Elem) valid() bool { return e >= Pixels && e <= Tokens16 }

// tokens reports whether e holds token ids.
func (e Elem) tokens() bool { return e == Tokens8 || e == Tokens16 }

// LabelKind says what an example's labels are.
type LabelKind uint8

const (
	// ClassLabels: one class id per example, in Set.Labels.
	ClassLabels LabelKind = 1
	// NextTokens: an example is a window of t+1 consecutive tokens; its
	// input is the first t, its labels the t that follow each (a language
	// model's targets). The labels are not stored apart from the tokens.
	NextTokens LabelKind = 2
)

func (k LabelKind) String() string {
	switch k {
	case ClassLabels:
		return "class labels"
	case NextTokens:
		return "next-token labels"
	}
	return "label kind " + strconv.Itoa(int(k))
}

// Limits of a Set, shared with the shard format so that every valid Set
// encodes and every decoded shard is a valid Set.
const (
	// MaxExampleSize bounds the input elements of one example (1 Mi:
	// 3x512x512 pixels fit).
	MaxExampleSize = 1 << 20
	// MaxRank is the most dimensions an example's shape may have.
	MaxRank = 4
	// MaxClasses bounds Classes (the vocabulary, for tokens).
	MaxClasses = 1 << 16
)

// Set is a data set split (train or test, or a shard's examples): N
// examples of one element type and shape, and their labels. It is the one
// container the loaders return, the coordinator cuts into shards and
// evaluates on, and a worker decodes a shard into.
//
// The inputs are in U8 (Pixels, Tokens8), U16 (Tokens16) or F32 (Float32).
// With ClassLabels, example i's inputs are elements [i*E, (i+1)*E) where E
// is ExampleSize(), channel-major then row-major for images, and
// Labels[i] is its class. With NextTokens, example i is the t+1 tokens
// starting at element i*Stride (t = Shape[0]): Stride is t when windows are
// cut from one text, so consecutive windows share a token, and t+1 in a
// shard.
type Set struct {
	Name    string
	Elem    Elem
	Shape   []int // one example's input: [c,h,w] images, [n] features, [t] tokens
	Kind    LabelKind
	Classes int // labels are 0..Classes-1; for tokens, the vocabulary
	N       int

	U8  []byte
	U16 []uint16
	F32 []float32

	Labels []int32 // ClassLabels: N class ids; NextTokens: nil
	Stride int     // NextTokens: elements between the starts of consecutive examples
}

// ExampleSize is the number of input values per example: the product of
// Shape (t for text windows).
func (s *Set) ExampleSize() int {
	n := 1
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

// LabelsPerExample is 1 for class labels, t for text windows.
func (s *Set) LabelsPerExample() int {
	if s.Kind == NextTokens && len(s.Shape) > 0 {
		return s.Shape[0]
	}
	return 1
}

// span is the elements stored per example: the input, plus the last
// window token for NextTokens.
func (s *Set) span() int {
	if s.Kind == NextTokens {
		return s.ExampleSize() + 1
	}
	return s.ExampleSize()
}

// stride is the elements between consecutive examples' starts.
func (s *Set) stride() int {
	if s.Kind == NextTokens {
		return s.Stride
	}
	return s.ExampleSize()
}

// elems is how many input elements the set holds.
func (s *Set) elems() int {
	switch s.Elem {
	case Float32:
		return len(s.F32)
	case Tokens16:
		return len(s.U16)
	}
	return len(s.U8)
}

// need is the elements N examples occupy.
func (s *Set) need() int {
	if s.N == 0 {
		return 0
	}
	return (s.N-1)*s.stride() + s.span()
}

// ShapeString is the example shape as [a,b,c].
func (s *Set) ShapeString() string { return shapeString(s.Shape) }

// ShapeString writes a shape as [a,b,c].
func ShapeString(shape []int) string { return shapeString(shape) }

func shapeString(shape []int) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.Itoa(d)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Describe says what the set holds, for logs and errors: "60000 examples
// of uint8 pixels [1,28,28], 10 classes".
func (s *Set) Describe() string {
	if s.Kind == NextTokens {
		return fmt.Sprintf("%d windows of %d %s (vocabulary %d)", s.N, s.ExampleSize(), s.Elem, s.Classes)
	}
	return fmt.Sprintf("%d examples of %s %s, %d classes", s.N, s.Elem, s.ShapeString(), s.Classes)
}

// checkLayout enforces the limits shared by Set and the shard format on
// everything but the data: element type, label kind, shape, classes.
func checkLayout(elem Elem, kind LabelKind, shape []int, classes int) error {
	if !elem.valid() {
		return fmt.Errorf("%s is not one of uint8 pixels (1), float32 features (2), uint8 tokens (3), uint16 tokens (4)", elem)
	}
	if kind != ClassLabels && kind != NextTokens {
		return fmt.Errorf("%s is not class labels (1) or next-token labels (2)", kind)
	}
	if len(shape) < 1 || len(shape) > MaxRank {
		return fmt.Errorf("example shape %s has %d dimensions; want 1 to %d", shapeString(shape), len(shape), MaxRank)
	}
	es := int64(1)
	for _, d := range shape {
		if d < 1 || d > math.MaxUint32 {
			return fmt.Errorf("example shape %s: every dimension must be >= 1", shapeString(shape))
		}
		// es <= MaxExampleSize and d < 2^32: no int64 overflow.
		if es *= int64(d); es > MaxExampleSize {
			return fmt.Errorf("example shape %s holds more than the limit of %d values", shapeString(shape), MaxExampleSize)
		}
	}
	if kind == NextTokens {
		if !elem.tokens() {
			return fmt.Errorf("next-token labels need token elements, not %s", elem)
		}
		if len(shape) != 1 {
			return fmt.Errorf("a text window's shape is [t], not %s", shapeString(shape))
		}
	}
	maxC := MaxClasses
	if elem == Tokens8 {
		maxC = 256
	}
	if classes < 2 || classes > maxC {
		return fmt.Errorf("classes is %d; must be 2..%d for %s", classes, maxC, elem)
	}
	return nil
}

// Validate checks that the fields agree with each other and with the shard
// format's limits: element type and label kind known, shape of 1..MaxRank
// dimensions each >= 1 holding at most MaxExampleSize values, Classes
// 2..MaxClasses (256 for Tokens8), the data as long as N examples need,
// every label and every text token below Classes, every feature finite. Loaders
// return valid sets; call it on a Set built by hand.
func (s *Set) Validate() error {
	if err := checkLayout(s.Elem, s.Kind, s.Shape, s.Classes); err != nil {
		return fmt.Errorf("dataset: set %q: %w", s.Name, err)
	}
	if s.N < 0 {
		return fmt.Errorf("dataset: set %q: N=%d", s.Name, s.N)
	}
	if s.Kind == NextTokens && s.Stride < 1 {
		return fmt.Errorf("dataset: set %q: stride %d; text windows need a stride >= 1", s.Name, s.Stride)
	}
	for _, o := range [...]struct {
		e Elem
		n int
	}{{Pixels, len(s.U8)}, {Float32, len(s.F32)}, {Tokens16, len(s.U16)}} {
		same := o.e == s.Elem || (o.e == Pixels && s.Elem == Tokens8)
		if !same && o.n != 0 {
			return fmt.Errorf("dataset: set %q holds %s but has %d elements in another type's slice", s.Name, s.Elem, o.n)
		}
	}
	need := s.need()
	if s.Kind == ClassLabels && s.elems() != need || s.Kind == NextTokens && s.elems() < need {
		return fmt.Errorf("dataset: set %q: N=%d examples need %d elements of %s, have %d", s.Name, s.N, need, s.Elem, s.elems())
	}
	switch s.Kind {
	case ClassLabels:
		if len(s.Labels) != s.N {
			return fmt.Errorf("dataset: set %q: N=%d but %d labels", s.Name, s.N, len(s.Labels))
		}
		for i, l := range s.Labels {
			if l < 0 || int(l) >= s.Classes {
				return fmt.Errorf("dataset: set %q: label %d of example %d is not in 0..%d", s.Name, l, i, s.Classes-1)
			}
		}
	case NextTokens:
		if s.Labels != nil {
			return fmt.Errorf("dataset: set %q: next-token labels come from the tokens; Labels must be nil", s.Name)
		}
	}
	if i, v, bad := s.badElem(); bad {
		return fmt.Errorf("dataset: set %q: element %d is %v: %s", s.Name, i, v, s.elemRule())
	}
	return nil
}

// badElem finds an input element outside its type's range: a text token
// at or above the vocabulary (Classes, with next-token labels), a
// non-finite feature.
func (s *Set) badElem() (int, any, bool) {
	switch {
	case s.Elem.tokens() && s.Kind != NextTokens:
	case s.Elem == Tokens8:
		if s.Classes < 256 {
			for i, v := range s.U8 {
				if int(v) >= s.Classes {
					return i, v, true
				}
			}
		}
	case s.Elem == Tokens16:
		for i, v := range s.U16 {
			if int(v) >= s.Classes {
				return i, v, true
			}
		}
	case s.Elem == Float32:
		for i, v := range s.F32 {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return i, v, true
			}
		}
	}
	return 0, nil, false
}

func (s *Set) elemRule() string {
	if s.Elem == Float32 {
		return "features must be finite (no NaN or Inf)"
	}
	return fmt.Sprintf("tokens must be below the vocabulary of %d", s.Classes)
}

// pixelScale[p] is p/255 in float32, computed once so every platform (and
// every call) produces bit-identical inputs.
var pixelScale = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(i) / 255
	}
	return t
}()

func checkRange(what string, start, n, count int) {
	if start < 0 || n < 0 || start > count || n > count-start {
		panic(fmt.Sprintf("dataset: %s: examples [%d, %d+%d) out of range [0, %d)", what, start, start, n, count))
	}
}

func checkDst(what string, have, need int) {
	if have < need {
		panic(fmt.Sprintf("dataset: %s: dst has %d elements, need %d", what, have, need))
	}
}

// Fill writes examples start..start+n-1 into x[:n*ExampleSize()] as the
// model reads them (pixels /255, features as they are, token ids as
// float32) and their labels into labels[:n*LabelsPerExample()]. It does not
// allocate. It panics if the range is outside 0..N or a buffer is short:
// callers size their buffers from ExampleSize and LabelsPerExample.
func (s *Set) Fill(x []float32, labels []int32, start, n int) {
	checkRange("Set.Fill", start, n, s.N)
	es, lpe := s.ExampleSize(), s.LabelsPerExample()
	checkDst("Set.Fill x", len(x), n*es)
	checkDst("Set.Fill labels", len(labels), n*lpe)
	if s.Kind == ClassLabels {
		// Class examples are contiguous: one pass over the range.
		s.convert(x[:n*es], start*es)
		copy(labels[:n], s.Labels[start:start+n])
		return
	}
	for k := range n {
		s.FillExample(x[k*es:(k+1)*es], labels[k*lpe:(k+1)*lpe], start+k)
	}
}

// FillExample writes example i's input into x[:ExampleSize()] and its
// labels into labels[:LabelsPerExample()]. It panics like Fill.
func (s *Set) FillExample(x []float32, labels []int32, i int) {
	checkRange("Set.FillExample", i, 1, s.N)
	es, lpe := s.ExampleSize(), s.LabelsPerExample()
	checkDst("Set.FillExample x", len(x), es)
	checkDst("Set.FillExample labels", len(labels), lpe)
	off := i * s.stride()
	s.convert(x[:es], off)
	if s.Kind == ClassLabels {
		labels[0] = s.Labels[i]
		return
	}
	labels = labels[:lpe]
	if s.Elem == Tokens16 {
		for p, v := range s.U16[off+1 : off+1+lpe] {
			labels[p] = int32(v)
		}
		return
	}
	for p, v := range s.U8[off+1 : off+1+lpe] {
		labels[p] = int32(v)
	}
}

// convert writes len(dst) input values starting at element off.
func (s *Set) convert(dst []float32, off int) {
	switch s.Elem {
	case Pixels:
		for i, p := range s.U8[off : off+len(dst)] {
			dst[i] = pixelScale[p]
		}
	case Tokens8:
		for i, p := range s.U8[off : off+len(dst)] {
			dst[i] = float32(p)
		}
	case Tokens16:
		for i, p := range s.U16[off : off+len(dst)] {
			dst[i] = float32(p)
		}
	case Float32:
		copy(dst, s.F32[off:off+len(dst)])
	}
}

// Subset returns the examples idx of s, in that order, as a new set whose
// storage is its own (text windows are copied out with Stride t+1, as in a
// shard). Indices must be in 0..N-1.
func (s *Set) Subset(name string, idx []int) (*Set, error) {
	for _, ix := range idx {
		if ix < 0 || ix >= s.N {
			return nil, fmt.Errorf("dataset: subset of set %q: index %d outside [0, %d)", s.Name, ix, s.N)
		}
	}
	out := &Set{Name: name, Elem: s.Elem, Shape: append([]int(nil), s.Shape...), Kind: s.Kind, Classes: s.Classes, N: len(idx)}
	span, stride := s.span(), s.stride()
	if s.Kind == NextTokens {
		out.Stride = span
	}
	total := len(idx) * span
	switch s.Elem {
	case Float32:
		out.F32 = make([]float32, 0, total)
		for _, ix := range idx {
			out.F32 = append(out.F32, s.F32[ix*stride:ix*stride+span]...)
		}
	case Tokens16:
		out.U16 = make([]uint16, 0, total)
		for _, ix := range idx {
			out.U16 = append(out.U16, s.U16[ix*stride:ix*stride+span]...)
		}
	default:
		out.U8 = make([]byte, 0, total)
		for _, ix := range idx {
			out.U8 = append(out.U8, s.U8[ix*stride:ix*stride+span]...)
		}
	}
	if s.Kind == ClassLabels {
		out.Labels = make([]int32, len(idx))
		for k, ix := range idx {
			out.Labels[k] = s.Labels[ix]
		}
	}
	return out, nil
}

// Spread returns at most n example indices of s spread evenly over it (all
// of them when N <= n): a fixed, cheap evaluation subset.
func (s *Set) Spread(n int) []int {
	if n <= 0 {
		return nil
	}
	m := min(n, s.N)
	idx := make([]int, m)
	for k := range idx {
		idx[k] = int(int64(k) * int64(s.N) / int64(m))
	}
	return idx
}
