package nn

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The safetensors format (https://github.com/huggingface/safetensors, README
// "Format"):
//
//	8 bytes   N, the header length, a little-endian uint64
//	N bytes   a UTF-8 JSON object mapping each tensor name to
//	          {"dtype":"F32","shape":[...],"data_offsets":[begin,end]}, plus an
//	          optional "__metadata__" object of string to string; it may end
//	          with spaces (the reference writer pads N to a multiple of 8)
//	the rest  the byte buffer: tensor data, little-endian, row-major; offsets
//	          are relative to its start, and the tensors tile it exactly
//	          (sorted, contiguous from 0, no gaps, no overlaps, ending at its end)
//
// Only F32 is read and written here, the one dtype nn uses.

const (
	// safetensorsMaxHeader is the reference implementation's limit on N.
	safetensorsMaxHeader = 100_000_000
	safetensorsMetadata  = "__metadata__"
	safetensorsF32       = "F32"
)

// SafetensorsTensor is one tensor read back.
type SafetensorsTensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// WriteSafetensors writes params (len = sum of the layout's sizes) as one F32
// tensor per layout entry, in layout order, with metadata (may be nil) in
// "__metadata__". Errors (not panics) on a layout/params mismatch.
//
// The layout must tile params: entry i starts where entry i-1 ends (the first
// at 0), its Size is the product of its Shape, and names are unique, valid
// UTF-8 and not "__metadata__". A nil metadata map writes no "__metadata__"
// key; a non-nil one (even empty) writes it. Metadata keys are written sorted,
// so the output is a deterministic function of the arguments. The header is
// compact JSON padded with spaces to a multiple of 8 bytes, as the reference
// implementation writes it, so every tensor's data is 8-byte aligned in the file.
func WriteSafetensors(w io.Writer, layout []ParamTensor, params []float32, metadata map[string]string) error {
	header, err := safetensorsHeader(layout, len(params), metadata)
	if err != nil {
		return err
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(header); err != nil {
		return err
	}
	// The data is params itself in layout order (the layout tiles it), written
	// in bounded chunks so a large model needs no second full-size copy.
	const chunk = 16 << 10 // floats
	buf := make([]byte, 4*min(chunk, len(params)))
	for len(params) > 0 {
		k := min(chunk, len(params))
		for i, v := range params[:k] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		if _, err := w.Write(buf[:4*k]); err != nil {
			return err
		}
		params = params[k:]
	}
	return nil
}

// safetensorsHeader validates the layout against numParams and returns the
// padded JSON header.
func safetensorsHeader(layout []ParamTensor, numParams int, metadata map[string]string) ([]byte, error) {
	var h []byte
	h = append(h, '{')
	first := true
	comma := func() {
		if !first {
			h = append(h, ',')
		}
		first = false
	}
	if metadata != nil {
		keys := make([]string, 0, len(metadata))
		for k, v := range metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, fmt.Errorf("safetensors: metadata %q: key and value must be valid UTF-8", k)
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		comma()
		h = appendJSONString(h, safetensorsMetadata)
		h = append(h, ':', '{')
		for i, k := range keys {
			if i > 0 {
				h = append(h, ',')
			}
			h = appendJSONString(h, k)
			h = append(h, ':')
			h = appendJSONString(h, metadata[k])
		}
		h = append(h, '}')
	}
	seen := make(map[string]bool, len(layout))
	offset := 0 // in floats; never exceeds numParams
	for i, t := range layout {
		switch {
		case t.Name == safetensorsMetadata:
			return nil, fmt.Errorf("safetensors: layout[%d]: the name %q is reserved", i, t.Name)
		case !utf8.ValidString(t.Name):
			return nil, fmt.Errorf("safetensors: layout[%d]: name %q is not valid UTF-8", i, t.Name)
		case seen[t.Name]:
			return nil, fmt.Errorf("safetensors: layout[%d]: duplicate tensor name %q", i, t.Name)
		}
		seen[t.Name] = true
		elems, ok := shapeElems(t.Shape)
		if !ok {
			return nil, fmt.Errorf("safetensors: tensor %q: invalid shape %v (dimensions must be >= 0 and their product must not overflow)", t.Name, t.Shape)
		}
		if uint64(t.Size) != elems || t.Size < 0 {
			return nil, fmt.Errorf("safetensors: tensor %q: size %d does not match shape %v (%d elements)", t.Name, t.Size, t.Shape, elems)
		}
		if t.Offset != offset {
			return nil, fmt.Errorf("safetensors: tensor %q: offset %d, want %d (the layout must tile params in order, with no gaps or overlaps)", t.Name, t.Offset, offset)
		}
		if t.Size > numParams-offset {
			return nil, fmt.Errorf("safetensors: tensor %q: [%d, %d) is past the end of params (len %d)", t.Name, t.Offset, uint64(t.Offset)+uint64(t.Size), numParams)
		}
		begin := 4 * uint64(offset)
		offset += t.Size
		end := 4 * uint64(offset)

		comma()
		h = appendJSONString(h, t.Name)
		h = append(h, `:{"dtype":"F32","shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				h = append(h, ',')
			}
			h = strconv.AppendInt(h, int64(d), 10)
		}
		h = append(h, `],"data_offsets":[`...)
		h = strconv.AppendUint(h, begin, 10)
		h = append(h, ',')
		h = strconv.AppendUint(h, end, 10)
		h = append(h, ']', '}')
	}
	if offset != numParams {
		return nil, fmt.Errorf("safetensors: the layout covers %d parameters, but len(params) = %d", offset, numParams)
	}
	h = append(h, '}')
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	if len(h) > safetensorsMaxHeader {
		return nil, fmt.Errorf("safetensors: header is %d bytes, over the format's limit of %d", len(h), safetensorsMaxHeader)
	}
	return h, nil
}

// appendJSONString appends s (valid UTF-8) as a JSON string. '<', '>' and '&'
// are kept as they are, as serde_json writes them.
func appendJSONString(dst []byte, s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil { // cannot fail for a string
		panic(err)
	}
	return append(dst, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}

// shapeElems returns the number of elements of a tensor of shape s: the
// product of its dimensions, folded left to right with an overflow check at
// every step (as the reference implementation does), limited to math.MaxInt.
// ok is false for a negative dimension or an overflow.
func shapeElems(s []int) (n uint64, ok bool) {
	n = 1
	for _, d := range s {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// stEntry is one tensor of a header being read.
type stEntry struct {
	name       string
	shape      []int
	begin, end uint64
}

// ReadSafetensors parses a whole file held in memory. It validates everything
// and never panics on any input: header length bounds (the file holds the 8
// length bytes and the N header bytes, and N is at most 100 MB), valid UTF-8 and
// a valid JSON object with no duplicate keys at any level, only dtype F32
// supported (others get an error naming the tensor and dtype), shape dims >= 0
// and product*4 == end-begin (with overflow checks), offsets in range, sorted,
// contiguous from 0, covering exactly the data buffer, no duplicate names.
// Unknown keys in a tensor's entry are ignored, as the reference does.
//
// It returns the tensors sorted by data offset (ties, between empty tensors,
// by name), and the metadata: nil when the header has no "__metadata__" (or it
// is null), otherwise a non-nil map.
func ReadSafetensors(b []byte) ([]SafetensorsTensor, map[string]string, error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("safetensors: file is %d bytes, too short for the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > safetensorsMaxHeader {
		return nil, nil, fmt.Errorf("safetensors: header length %d is over the format's limit of %d bytes", n, safetensorsMaxHeader)
	}
	if n > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("safetensors: header length %d is past the end of the file (%d bytes after the length)", n, len(b)-8)
	}
	header, data := b[8:8+n], b[8+n:]
	entries, meta, err := parseSafetensorsHeader(header)
	if err != nil {
		return nil, nil, err
	}

	sort.Slice(entries, func(i, j int) bool {
		a, c := &entries[i], &entries[j]
		if a.begin != c.begin {
			return a.begin < c.begin
		}
		if a.end != c.end {
			return a.end < c.end
		}
		return a.name < c.name
	})
	var pos uint64
	for _, e := range entries {
		if e.begin != pos {
			if e.begin < pos {
				return nil, nil, fmt.Errorf("safetensors: tensor %q: data_offsets [%d, %d] overlap the previous tensor, which ends at %d", e.name, e.begin, e.end, pos)
			}
			return nil, nil, fmt.Errorf("safetensors: tensor %q: data_offsets [%d, %d] leave a gap after %d (tensors must be contiguous from 0)", e.name, e.begin, e.end, pos)
		}
		pos = e.end
	}
	if pos != uint64(len(data)) {
		return nil, nil, fmt.Errorf("safetensors: the tensors cover %d bytes, but the data buffer is %d bytes", pos, len(data))
	}

	// All offsets are now within data, so every size fits in an int.
	all := make([]float32, len(data)/4)
	for i := range all {
		all[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	out := make([]SafetensorsTensor, len(entries))
	for i, e := range entries {
		lo, hi := int(e.begin/4), int(e.end/4)
		out[i] = SafetensorsTensor{Name: e.name, Shape: e.shape, Data: all[lo:hi:hi]}
	}
	return out, meta, nil
}

// parseSafetensorsHeader checks and decodes the header's JSON. Each entry is
// checked on its own (dtype, shape against its offsets); how the entries tile
// the data buffer is left to the caller.
func parseSafetensorsHeader(h []byte) ([]stEntry, map[string]string, error) {
	if !utf8.Valid(h) {
		return nil, nil, errors.New("safetensors: header is not valid UTF-8")
	}
	if len(h) == 0 || h[0] != '{' {
		return nil, nil, errors.New("safetensors: header does not start with '{'")
	}
	if !json.Valid(h) {
		return nil, nil, errors.New("safetensors: header is not valid JSON")
	}
	var entries []stEntry
	var meta map[string]string
	err := jsonObject(h, "header", func(key string, val json.RawMessage) error {
		if key == safetensorsMetadata {
			m, err := parseSafetensorsMetadata(val)
			meta = m
			return err
		}
		e, err := parseSafetensorsEntry(key, val)
		if err != nil {
			return err
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return entries, meta, nil
}

func parseSafetensorsMetadata(val json.RawMessage) (map[string]string, error) {
	if string(val) == "null" {
		return nil, nil
	}
	m := map[string]string{}
	err := jsonObject(val, "__metadata__", func(k string, v json.RawMessage) error {
		s, err := jsonString(v)
		if err != nil {
			return fmt.Errorf("safetensors: __metadata__ %q: value must be a string, got %s", k, abbrev(v))
		}
		m[k] = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func parseSafetensorsEntry(name string, val json.RawMessage) (stEntry, error) {
	fail := func(format string, args ...any) (stEntry, error) {
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: %s", name, fmt.Sprintf(format, args...))
	}
	var dtype, shape, offsets json.RawMessage
	err := jsonObject(val, fmt.Sprintf("tensor %q", name), func(k string, v json.RawMessage) error {
		switch k {
		case "dtype":
			dtype = v
		case "shape":
			shape = v
		case "data_offsets":
			offsets = v
		}
		return nil
	})
	if err != nil {
		return stEntry{}, err
	}
	if dtype == nil || shape == nil || offsets == nil {
		return fail("entry needs dtype, shape and data_offsets, got %s", abbrev(val))
	}
	dt, err := jsonString(dtype)
	if err != nil {
		return fail("dtype must be a string, got %s", abbrev(dtype))
	}
	if dt != safetensorsF32 {
		return fail("dtype %q is not supported (only F32)", dt)
	}
	dims, err := jsonUints(shape)
	if err != nil {
		return fail("shape must be an array of integers >= 0, got %s", abbrev(shape))
	}
	offs, err := jsonUints(offsets)
	if err != nil || len(offs) != 2 {
		return fail("data_offsets must be [begin, end], integers >= 0, got %s", abbrev(offsets))
	}
	e := stEntry{name: name, shape: make([]int, len(dims)), begin: offs[0], end: offs[1]}
	if e.end < e.begin {
		return fail("data_offsets [%d, %d] end before they begin", e.begin, e.end)
	}
	for i, d := range dims {
		if d > math.MaxInt {
			return fail("shape %v: dimension %d is too large", dims, d)
		}
		e.shape[i] = int(d)
	}
	elems, ok := shapeElems(e.shape)
	if !ok || elems > math.MaxUint64/4 {
		return fail("shape %v: element count overflows", dims)
	}
	if nb := elems * 4; nb != e.end-e.begin {
		return fail("shape %v is %d bytes of F32, but data_offsets [%d, %d] span %d bytes", dims, nb, e.begin, e.end, e.end-e.begin)
	}
	return e, nil
}

// jsonObject calls fn for each member of the JSON object in raw (already
// known to be valid JSON), in order. It fails, naming where, if raw is not an
// object or has a duplicate key; errors from fn are returned as they are.
func jsonObject(raw []byte, where string, fn func(key string, val json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("safetensors: %s: %v", where, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("safetensors: %s: want a JSON object, got %s", where, abbrev(raw))
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("safetensors: %s: %v", where, err)
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("safetensors: %s: bad object key %v", where, tok)
		}
		if seen[key] {
			return fmt.Errorf("safetensors: %s: duplicate key %q", where, key)
		}
		seen[key] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return fmt.Errorf("safetensors: %s: %v", where, err)
		}
		if err := fn(key, val); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return fmt.Errorf("safetensors: %s: %v", where, err)
	}
	return nil
}

// jsonString decodes a JSON string (not null).
func jsonString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", errors.New("not a string")
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// jsonUints decodes a JSON array of non-negative integers (not null).
func jsonUints(raw json.RawMessage) ([]uint64, error) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, errors.New("not an array")
	}
	var v []uint64
	err := json.Unmarshal(raw, &v)
	return v, err
}

// abbrev shortens a JSON value for an error message.
func abbrev(raw []byte) string {
	const max = 60
	if len(raw) > max {
		return string(raw[:max]) + "..."
	}
	return string(raw)
}

// ParamsFromSafetensors fills params (len NumParams) from tensors, matching by
// name and shape against m.Layout; an error names any missing, extra or
// mis-shaped tensor. On error params is left unchanged.
func (m *Model) ParamsFromSafetensors(tensors []SafetensorsTensor, params []float32) error {
	if len(params) != m.NumParams {
		return fmt.Errorf("safetensors: len(params) = %d, want NumParams = %d", len(params), m.NumParams)
	}
	index := make(map[string]int, len(m.Layout))
	for i, t := range m.Layout {
		index[t.Name] = i
	}
	var problems []string
	found := make([]bool, len(m.Layout))
	seen := make(map[string]bool, len(tensors))
	for _, t := range tensors {
		if seen[t.Name] {
			problems = append(problems, fmt.Sprintf("duplicate tensor %q", t.Name))
			continue
		}
		seen[t.Name] = true
		i, ok := index[t.Name]
		if !ok {
			problems = append(problems, fmt.Sprintf("extra tensor %q (not in the model)", t.Name))
			continue
		}
		found[i] = true
		want := m.Layout[i]
		if !slices.Equal(t.Shape, want.Shape) {
			problems = append(problems, fmt.Sprintf("tensor %q has shape %v, want %v", t.Name, t.Shape, want.Shape))
		} else if len(t.Data) != want.Size {
			problems = append(problems, fmt.Sprintf("tensor %q has %d values, want %d for shape %v", t.Name, len(t.Data), want.Size, want.Shape))
		}
	}
	for i, t := range m.Layout {
		if !found[i] {
			problems = append(problems, fmt.Sprintf("missing tensor %q (shape %v)", t.Name, t.Shape))
		}
	}
	if len(problems) > 0 {
		const maxShown = 10
		if len(problems) > maxShown {
			problems = append(problems[:maxShown], fmt.Sprintf("and %d more", len(problems)-maxShown))
		}
		return fmt.Errorf("safetensors: tensors do not match the model: %s", strings.Join(problems, "; "))
	}
	for _, t := range tensors {
		l := m.Layout[index[t.Name]]
		copy(params[l.Offset:l.Offset+l.Size], t.Data)
	}
	return nil
}
