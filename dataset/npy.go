package dataset

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// NPY errors, for errors.Is.
var (
	ErrNPYFormat = errors.New("not a NumPy .npy file")
	ErrNPYDtype  = errors.New("unsupported .npy dtype")
	ErrNPYOrder  = errors.New("fortran-ordered .npy array")
)

// NPYFileMaxBytes is the data limit ReadNPYFile applies (2 GiB).
const NPYFileMaxBytes = 2 << 30

// npyMaxHeader bounds the header dictionary (numpy writes about 128 bytes).
const npyMaxHeader = 64 << 10

// NPY is a decoded .npy array: its dtype as numpy spells it without the
// byte-order mark ("u1", "f4", "i8", ...), its shape, and its data in C
// order, little-endian, as stored.
type NPY struct {
	Kind     byte // 'u' unsigned int, 'i' signed int, 'f' float, 'b' bool
	ItemSize int
	Shape    []int
	Data     []byte
}

// Dtype is the element type as numpy names it: "uint8", "float32".
func (a *NPY) Dtype() string {
	bits := strconv.Itoa(8 * a.ItemSize)
	switch a.Kind {
	case 'u':
		return "uint" + bits
	case 'i':
		return "int" + bits
	case 'f':
		return "float" + bits
	}
	return "bool"
}

// NPYHeader is the parsed header dictionary of a .npy file.
type NPYHeader struct {
	Descr        string
	FortranOrder bool
	Shape        []int
}

// ParseNPYHeader parses the dictionary literal numpy.save writes, such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }: a Python
// dict of exactly the keys descr (a string), fortran_order (True or False)
// and shape (a tuple of non-negative ints). It never panics.
func ParseNPYHeader(h string) (NPYHeader, error) {
	var out NPYHeader
	p := &pyLit{s: h}
	if !p.eat('{') {
		return out, fmt.Errorf("%w: header %q does not start with '{'", ErrNPYFormat, clip(h))
	}
	seen := map[string]bool{}
	for {
		if p.eat('}') {
			break
		}
		key, ok := p.str()
		if !ok {
			return out, fmt.Errorf("%w: header %q: want a quoted key at offset %d", ErrNPYFormat, clip(h), p.i)
		}
		if !p.eat(':') {
			return out, fmt.Errorf("%w: header %q: want ':' after key %q", ErrNPYFormat, clip(h), key)
		}
		if seen[key] {
			return out, fmt.Errorf("%w: header %q: key %q twice", ErrNPYFormat, clip(h), key)
		}
		seen[key] = true
		switch key {
		case "descr":
			v, ok := p.str()
			if !ok {
				return out, fmt.Errorf("%w: header %q: descr is not a string (a structured dtype? save a plain array)", ErrNPYFormat, clip(h))
			}
			out.Descr = v
		case "fortran_order":
			switch {
			case p.word("True"):
				out.FortranOrder = true
			case p.word("False"):
			default:
				return out, fmt.Errorf("%w: header %q: fortran_order is not True or False", ErrNPYFormat, clip(h))
			}
		case "shape":
			shape, err := p.tuple()
			if err != nil {
				return out, fmt.Errorf("%w: header %q: shape: %v", ErrNPYFormat, clip(h), err)
			}
			out.Shape = shape
		default:
			return out, fmt.Errorf("%w: header %q: unknown key %q (want descr, fortran_order, shape)", ErrNPYFormat, clip(h), key)
		}
		if !p.eat(',') {
			if !p.eat('}') {
				return out, fmt.Errorf("%w: header %q: want ',' or '}' at offset %d", ErrNPYFormat, clip(h), p.i)
			}
			break
		}
	}
	p.space()
	if p.i != len(p.s) {
		return out, fmt.Errorf("%w: header %q: %d bytes after the dictionary", ErrNPYFormat, clip(h), len(p.s)-p.i)
	}
	for _, k := range [...]string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return out, fmt.Errorf("%w: header %q has no %s", ErrNPYFormat, clip(h), k)
		}
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// pyLit scans the small Python literal subset of a .npy header.
type pyLit struct {
	s string
	i int
}

func (p *pyLit) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *pyLit) eat(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *pyLit) word(w string) bool {
	p.space()
	if strings.HasPrefix(p.s[p.i:], w) {
		p.i += len(w)
		return true
	}
	return false
}

// str reads a '...' or "..." string without escapes (numpy writes none).
func (p *pyLit) str() (string, bool) {
	p.space()
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", false
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", false
	}
	v := p.s[p.i+1 : p.i+1+end]
	if strings.ContainsRune(v, '\\') {
		return "", false
	}
	p.i += end + 2
	return v, true
}

// tuple reads (a, b, ...), (a,) or ().
func (p *pyLit) tuple() ([]int, error) {
	if !p.eat('(') {
		return nil, errors.New("not a tuple")
	}
	shape := []int{}
	for {
		if p.eat(')') {
			return shape, nil
		}
		p.space()
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		if j == p.i || j-p.i > 12 {
			return nil, fmt.Errorf("want a dimension at offset %d", p.i)
		}
		d, _ := strconv.Atoi(p.s[p.i:j])
		p.i = j
		_ = p.word("L") // Python 2's long suffix
		shape = append(shape, d)
		if len(shape) > 32 {
			return nil, errors.New("more than 32 dimensions")
		}
		if !p.eat(',') {
			if !p.eat(')') {
				return nil, fmt.Errorf("want ',' or ')' at offset %d", p.i)
			}
			return shape, nil
		}
	}
}

// parseDescr turns a descr such as "<f4" or "|u1" into a kind and size,
// rejecting big-endian and every dtype but bool, integers and floats.
func parseDescr(descr string) (kind byte, size int, err error) {
	if len(descr) < 3 {
		return 0, 0, fmt.Errorf("%w %q", ErrNPYDtype, descr)
	}
	order, k, sz := descr[0], descr[1], descr[2:]
	n, convErr := strconv.Atoi(sz)
	if convErr != nil || !strings.ContainsRune("biuf", rune(k)) || !(n == 1 || n == 2 || n == 4 || n == 8) || (k == 'f' && n == 1) || (k == 'b' && n != 1) {
		return 0, 0, fmt.Errorf("%w %q: want bool, an integer or a float (float16 and other types: convert with .astype)", ErrNPYDtype, descr)
	}
	switch {
	case order == '>' && n > 1:
		return 0, 0, fmt.Errorf("%w %q: big-endian; save it little-endian (arr.astype('<%c%d'))", ErrNPYDtype, descr, k, n)
	case order != '<' && order != '|' && order != '=' && order != '>':
		return 0, 0, fmt.Errorf("%w %q: unknown byte order %q", ErrNPYDtype, descr, order)
	}
	return k, n, nil
}

// ReadNPY reads a .npy stream as numpy.save writes it (format 1.0, 2.0 or
// 3.0): little-endian (or single-byte) bool, integer or float data in C
// order. It checks the header before allocating: at most maxBytes of data,
// and the data must be complete with nothing after it.
func ReadNPY(r io.Reader, maxBytes int64) (*NPY, error) {
	br := bufio.NewReader(r)
	var pre [10]byte
	if n, err := io.ReadFull(br, pre[:8]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the file is empty", ErrNPYFormat)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %d bytes, shorter than the magic", ErrNPYFormat, n)
		}
		return nil, err
	}
	if string(pre[:6]) != "\x93NUMPY" {
		return nil, fmt.Errorf("%w: magic %q, want \"\\x93NUMPY\" (is it a .npz archive, a pickle, or text? save with numpy.save)", ErrNPYFormat, pre[:6])
	}
	major := pre[6]
	var hlen int
	switch major {
	case 1:
		if _, err := io.ReadFull(br, pre[8:10]); err != nil {
			return nil, fmt.Errorf("%w: truncated header", ErrNPYFormat)
		}
		hlen = int(binary.LittleEndian.Uint16(pre[8:10]))
	case 2, 3:
		var l [4]byte
		if _, err := io.ReadFull(br, l[:]); err != nil {
			return nil, fmt.Errorf("%w: truncated header", ErrNPYFormat)
		}
		v := binary.LittleEndian.Uint32(l[:])
		if v > npyMaxHeader {
			return nil, fmt.Errorf("%w: header of %d bytes, more than %d", ErrNPYFormat, v, npyMaxHeader)
		}
		hlen = int(v)
	default:
		return nil, fmt.Errorf("%w: format version %d.%d; this reads 1.0, 2.0 and 3.0", ErrNPYFormat, major, pre[7])
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(br, hb); err != nil {
		return nil, fmt.Errorf("%w: truncated header (%d bytes promised)", ErrNPYFormat, hlen)
	}
	h, err := ParseNPYHeader(strings.TrimRight(string(hb), " \n\x00"))
	if err != nil {
		return nil, err
	}
	if h.FortranOrder {
		return nil, fmt.Errorf("%w: fortran_order is True; save a C-ordered array (numpy.ascontiguousarray(a))", ErrNPYOrder)
	}
	kind, size, err := parseDescr(h.Descr)
	if err != nil {
		return nil, err
	}
	total := int64(size)
	maxBytes = min(maxBytes, math.MaxInt)
	for _, d := range h.Shape {
		if d == 0 {
			total = 0
			break
		}
		if int64(d) > maxBytes/total {
			return nil, fmt.Errorf("%w: shape %v of %s needs more than the limit of %d bytes", ErrIDXTooLarge, h.Shape, h.Descr, maxBytes)
		}
		total *= int64(d)
	}
	var data []byte
	if total > 0 {
		var got int
		data, got, err = readUpTo(br, int(total))
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%w: shape %v of %s promises %d data bytes, got %d; the file is incomplete", ErrIDXTruncated, h.Shape, h.Descr, total, got)
			}
			return nil, err
		}
	}
	var one [1]byte
	if n, _ := io.ReadFull(br, one[:]); n > 0 {
		return nil, fmt.Errorf("%w: bytes after the %d that shape %v of %s describes (several arrays in one file? save one per file)", ErrIDXTrailing, total, h.Shape, h.Descr)
	}
	return &NPY{Kind: kind, ItemSize: size, Shape: h.Shape, Data: data}, nil
}

// ReadNPYFile reads a .npy file with NPYFileMaxBytes as the limit.
func ReadNPYFile(path string) (*NPY, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadNPY(f, NPYFileMaxBytes)
}

// intAt returns integer element i of an integer or bool array.
func (a *NPY) intAt(i int) int64 {
	b := a.Data[i*a.ItemSize:]
	le := binary.LittleEndian
	switch {
	case a.Kind == 'i' && a.ItemSize == 1:
		return int64(int8(b[0]))
	case a.ItemSize == 1:
		return int64(b[0])
	case a.Kind == 'i' && a.ItemSize == 2:
		return int64(int16(le.Uint16(b)))
	case a.ItemSize == 2:
		return int64(le.Uint16(b))
	case a.Kind == 'i' && a.ItemSize == 4:
		return int64(int32(le.Uint32(b)))
	case a.ItemSize == 4:
		return int64(le.Uint32(b))
	case a.Kind == 'i':
		return int64(le.Uint64(b))
	}
	u := le.Uint64(b)
	if u > math.MaxInt64 {
		return -1 // out of range however it is read
	}
	return int64(u)
}

// npyInputs turns an inputs array (N, ...) into a Set's inputs: uint8 as
// pixels, float32 as features.
func npyInputs(a *NPY, s *Set) error {
	if len(a.Shape) < 1 {
		return errors.New("is a 0-d array; want (examples, ...) with one row per example")
	}
	s.N = a.Shape[0]
	s.Shape = append([]int(nil), a.Shape[1:]...)
	if len(s.Shape) == 0 {
		s.Shape = []int{1}
	}
	if len(s.Shape) > MaxRank {
		return fmt.Errorf("has shape %v: an example has %d dimensions, at most %d are supported; reshape it (x.reshape(len(x), -1))", a.Shape, len(s.Shape), MaxRank)
	}
	switch a.Dtype() {
	case "uint8":
		s.Elem, s.U8 = Pixels, a.Data
	case "float32":
		s.Elem = Float32
		s.F32 = make([]float32, len(a.Data)/4)
		for i := range s.F32 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("element %d (example %d) is %v; inputs must be finite", i, i/max(1, s.ExampleSize()), v)
			}
			s.F32[i] = v
		}
	default:
		return fmt.Errorf("has dtype %s; inputs must be uint8 (pixels, read as p/255) or float32 (features, read as they are): convert with x.astype('float32')", a.Dtype())
	}
	if s.N == 0 {
		return errors.New("has no examples (its first dimension is 0)")
	}
	if s.ExampleSize() > MaxExampleSize {
		return fmt.Errorf("has shape %v: %d values per example, more than the limit of %d", a.Shape, s.ExampleSize(), MaxExampleSize)
	}
	return nil
}

// npyLabels reads a labels array of shape (N,) or (N, 1), any integer
// dtype, into labels 0..MaxClasses-1, returning max+1.
func npyLabels(a *NPY, n int) ([]int32, int, error) {
	if a.Kind != 'i' && a.Kind != 'u' {
		return nil, 0, fmt.Errorf("has dtype %s; labels must be integers (class ids 0, 1, ...): convert with y.astype('int64')", a.Dtype())
	}
	if !(len(a.Shape) == 1 || len(a.Shape) == 2 && a.Shape[1] == 1) {
		return nil, 0, fmt.Errorf("has shape %v; labels must have shape (examples,) or (examples, 1)", a.Shape)
	}
	if a.Shape[0] != n {
		return nil, 0, fmt.Errorf("has %d labels but the inputs have %d examples; the files are not a pair", a.Shape[0], n)
	}
	labels := make([]int32, n)
	classes := 2
	for i := range labels {
		v := a.intAt(i)
		if v < 0 || v >= MaxClasses {
			return nil, 0, fmt.Errorf("label %d of example %d is out of range: labels must be class ids 0..%d", v, i, MaxClasses-1)
		}
		labels[i] = int32(v)
		classes = max(classes, int(v)+1)
	}
	return labels, classes, nil
}
