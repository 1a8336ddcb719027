package dataset

import (
	"fmt"
)

// Set is a labelled image dataset held as bytes: Images has
// N*Channels*Rows*Cols pixels (0..255), Labels N class ids. Example i's
// pixels are Images[i*ExampleSize() : (i+1)*ExampleSize()], channel-major
// then row-major.
type Set struct {
	Name                 string
	N                    int
	Channels, Rows, Cols int
	Classes              int // max label + 1, at least 2
	Images               []byte
	Labels               []byte
}

// ExampleSize is the number of pixels per example: Channels*Rows*Cols.
func (s *Set) ExampleSize() int { return s.Channels * s.Rows * s.Cols }

// Validate checks that the fields agree with each other and with the shard
// format's limits (dims 1..65535, ExampleSize <= MaxExampleSize, Classes
// 2..256, every label < Classes). Loaders return valid sets; call it on a
// Set built by hand.
func (s *Set) Validate() error {
	if err := checkShape(s.Channels, s.Rows, s.Cols, s.Classes); err != nil {
		return fmt.Errorf("dataset: set %q: %w", s.Name, err)
	}
	es := s.ExampleSize()
	if s.N < 0 || len(s.Labels) != s.N || len(s.Images)/es != s.N || len(s.Images)%es != 0 {
		return fmt.Errorf("dataset: set %q: N=%d but %d labels and %d pixel bytes (want N and N*%d)",
			s.Name, s.N, len(s.Labels), len(s.Images), es)
	}
	for i, l := range s.Labels {
		if int(l) >= s.Classes {
			return fmt.Errorf("dataset: set %q: label %d of example %d is not below Classes=%d", s.Name, l, i, s.Classes)
		}
	}
	return nil
}

// checkShape enforces the limits shared by Set and the shard format, so
// every valid Set encodes and every decoded shard is a valid shape.
func checkShape(channels, rows, cols, classes int) error {
	for _, d := range [...]struct {
		name string
		v    int
	}{{"channels", channels}, {"rows", rows}, {"cols", cols}} {
		if d.v < 1 || d.v > 0xFFFF {
			return fmt.Errorf("%s is %d; must be 1..65535", d.name, d.v)
		}
	}
	// Each factor is <= 65535, so the product fits in int64; compare in
	// int64 so 32-bit targets cannot overflow.
	if es := int64(channels) * int64(rows) * int64(cols); es > MaxExampleSize {
		return fmt.Errorf("example size %dx%dx%d = %d pixels exceeds the limit of %d", channels, rows, cols, es, MaxExampleSize)
	}
	if classes < 2 || classes > 256 {
		return fmt.Errorf("classes is %d; must be 2..256 (labels are bytes)", classes)
	}
	return nil
}

// LoadIDXPair loads an images file (3 dims N,R,C) and a labels file (1 dim
// N), checking N matches. Classes is max label + 1, at least 2.
func LoadIDXPair(name, imagesPath, labelsPath string) (*Set, error) {
	img, err := ReadIDXFile(imagesPath)
	if err != nil {
		return nil, err
	}
	lab, err := ReadIDXFile(labelsPath)
	if err != nil {
		return nil, err
	}
	if len(img.Dims) != 3 {
		return nil, fmt.Errorf("dataset: %s: images file has dims %v; want 3 (count, rows, cols): is it a labels file?", imagesPath, img.Dims)
	}
	if len(lab.Dims) != 1 {
		return nil, fmt.Errorf("dataset: %s: labels file has dims %v; want 1 (count): is it an images file?", labelsPath, lab.Dims)
	}
	if img.Dims[0] != lab.Dims[0] {
		return nil, fmt.Errorf("dataset: %s has %d images but %s has %d labels; the files are not a pair",
			imagesPath, img.Dims[0], labelsPath, lab.Dims[0])
	}
	s := &Set{
		Name:     name,
		N:        img.Dims[0],
		Channels: 1,
		Rows:     img.Dims[1],
		Cols:     img.Dims[2],
		Classes:  2,
		Images:   img.Data,
		Labels:   lab.Data,
	}
	for _, l := range s.Labels {
		s.Classes = max(s.Classes, int(l)+1)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%w (loading %s)", err, imagesPath)
	}
	return s, nil
}

// pixelScale[p] is p/255 in float32, computed once so every platform (and
// every call) produces bit-identical inputs.
var pixelScale = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(i) / 255
	}
	return t
}()

// bytesToFloats writes pixel/255 for each byte of src into dst.
func bytesToFloats(dst []float32, src []byte) {
	dst = dst[:len(src)]
	for i, p := range src {
		dst[i] = pixelScale[p]
	}
}

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

// Floats writes examples start..start+n-1, pixel/255, into dst[:n*ExampleSize()].
// It panics if the range is outside 0..N or dst is short: callers size
// their buffers from N and ExampleSize.
func (s *Set) Floats(dst []float32, start, n int) {
	checkRange("Set.Floats", start, n, s.N)
	es := s.ExampleSize()
	checkDst("Set.Floats", len(dst), n*es)
	bytesToFloats(dst, s.Images[start*es:(start+n)*es])
}

// LabelsInt32 writes the labels of examples start..start+n-1 into dst[:n].
// It panics like Floats.
func (s *Set) LabelsInt32(dst []int32, start, n int) {
	checkRange("Set.LabelsInt32", start, n, s.N)
	checkDst("Set.LabelsInt32", len(dst), n)
	for i, l := range s.Labels[start : start+n] {
		dst[i] = int32(l)
	}
}

// Example writes example i's pixels, scaled to [0,1], into
// dst[:ExampleSize()] and returns its label.
func (s *Set) Example(dst []float32, i int) int {
	s.Floats(dst, i, 1)
	return int(s.Labels[i])
}
