package nn

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// stFile builds a safetensors file by hand: the 8-byte little-endian header
// length, the header as given (no padding added), then data.
func stFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// f32le is the little-endian bytes of vs.
func f32le(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func writeST(t testing.TB, layout []ParamTensor, params []float32, meta map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSafetensors(&buf, layout, params, meta); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestSafetensorsPresetRoundTrip(t *testing.T) {
	for _, name := range []string{"mnist-cnn", "mnist-mlp"} {
		t.Run(name, func(t *testing.T) {
			m := mustPreset(t, name)
			params := make([]float32, m.NumParams)
			m.Init(params, 42)
			for i := range params { // Init zeroes the biases: give every value its own bits
				if params[i] == 0 {
					params[i] = float32(i) * 1e-3
				}
			}
			meta := map[string]string{"format": "pt", "model": name, "note": `<&> "quoted" ünïcode`}
			file := writeST(t, m.Layout, params, meta)

			// The header: its length first, 8-aligned, space-padded JSON.
			n := binary.LittleEndian.Uint64(file)
			if n%8 != 0 {
				t.Errorf("header length %d is not a multiple of 8", n)
			}
			if want := 8 + n + 4*uint64(m.NumParams); uint64(len(file)) != want {
				t.Fatalf("file is %d bytes, want 8 + %d + 4*%d = %d", len(file), n, m.NumParams, want)
			}
			header := file[8 : 8+n]
			trimmed := bytes.TrimRight(header, " ")
			if len(header)-len(trimmed) >= 8 || trimmed[len(trimmed)-1] != '}' {
				t.Errorf("header padding: %q", header[len(trimmed):])
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(header, &obj); err != nil {
				t.Fatalf("header is not a JSON object: %v", err)
			}
			if len(obj) != len(m.Layout)+1 {
				t.Errorf("header has %d keys, want %d tensors + __metadata__", len(obj), len(m.Layout))
			}
			var gotMeta map[string]string
			if err := json.Unmarshal(obj["__metadata__"], &gotMeta); err != nil || !maps.Equal(gotMeta, meta) {
				t.Errorf("__metadata__ = %s (%v), want %v", obj["__metadata__"], err, meta)
			}
			first := m.Layout[0]
			var info struct {
				Dtype       string   `json:"dtype"`
				Shape       []int    `json:"shape"`
				DataOffsets []uint64 `json:"data_offsets"`
			}
			if err := json.Unmarshal(obj[first.Name], &info); err != nil {
				t.Fatal(err)
			}
			if info.Dtype != "F32" || !slices.Equal(info.Shape, first.Shape) ||
				!slices.Equal(info.DataOffsets, []uint64{0, 4 * uint64(first.Size)}) {
				t.Errorf("first tensor %q: %+v, want F32 %v [0 %d]", first.Name, info, first.Shape, 4*first.Size)
			}
			// Tensors appear in layout order, with contiguous offsets.
			last := -1
			for _, l := range m.Layout {
				i := bytes.Index(header, []byte(`"`+l.Name+`":`))
				if i <= last {
					t.Errorf("tensor %q is out of layout order in the header", l.Name)
				}
				last = i
			}
			if !bytes.Equal(file[8+n:], f32le(params...)) {
				t.Error("data section is not params in little-endian order")
			}

			tensors, gotMeta2, err := ReadSafetensors(file)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(gotMeta2, meta) {
				t.Errorf("metadata = %v, want %v", gotMeta2, meta)
			}
			if len(tensors) != len(m.Layout) {
				t.Fatalf("read %d tensors, want %d", len(tensors), len(m.Layout))
			}
			for i, tt := range tensors {
				l := m.Layout[i]
				if tt.Name != l.Name || !slices.Equal(tt.Shape, l.Shape) || !sameBits(tt.Data, params[l.Offset:l.Offset+l.Size]) {
					t.Errorf("tensor %d = %q %v, want %q %v with the same data", i, tt.Name, tt.Shape, l.Name, l.Shape)
				}
			}
			got := make([]float32, m.NumParams)
			if err := m.ParamsFromSafetensors(tensors, got); err != nil {
				t.Fatal(err)
			}
			if !sameBits(got, params) {
				t.Error("params after the round trip are not bit-identical")
			}
			// Matching is by name: the order of the tensors does not matter.
			slices.Reverse(tensors)
			clear(got)
			if err := m.ParamsFromSafetensors(tensors, got); err != nil || !sameBits(got, params) {
				t.Errorf("reversed tensors: err %v, identical %v", err, sameBits(got, params))
			}
		})
	}
}

func TestSafetensorsGolden(t *testing.T) {
	// Built by hand from the spec: N = 141 bytes of JSON + 3 spaces = 144 = 0x90.
	const header = `{"__metadata__":{"format":"pt"},` +
		`"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` +
		`"b":{"dtype":"F32","shape":[1,1],"data_offsets":[8,12]}}`
	want := []byte{0x90, 0, 0, 0, 0, 0, 0, 0}
	want = append(want, header...)
	want = append(want, "   "...)
	want = append(want,
		0x00, 0x00, 0x80, 0x3f, // 1.0
		0x00, 0x00, 0x00, 0xc0, // -2.0
		0x00, 0x00, 0x00, 0x3f, // 0.5
	)
	if len(header) != 141 || len(want) != 8+144+12 {
		t.Fatalf("the golden file is miscounted: header %d bytes, file %d", len(header), len(want))
	}
	layout := []ParamTensor{
		{Name: "a", Shape: []int{2}, Offset: 0, Size: 2},
		{Name: "b", Shape: []int{1, 1}, Offset: 2, Size: 1},
	}
	params := []float32{1, -2, 0.5}
	got := writeST(t, layout, params, map[string]string{"format": "pt"})
	if !bytes.Equal(got, want) {
		t.Fatalf("WriteSafetensors:\n got %q\nwant %q", got, want)
	}
	tensors, meta, err := ReadSafetensors(want)
	if err != nil {
		t.Fatal(err)
	}
	wantT := []SafetensorsTensor{{"a", []int{2}, []float32{1, -2}}, {"b", []int{1, 1}, []float32{0.5}}}
	if !tensorsEqual(tensors, wantT) || !maps.Equal(meta, map[string]string{"format": "pt"}) {
		t.Fatalf("ReadSafetensors = %v %v", tensors, meta)
	}
}

// TestSafetensorsReferenceVectors checks byte-for-byte agreement with the
// files that the reference implementation (huggingface/safetensors,
// safetensors/src/tensor.rs tests) serializes.
func TestSafetensorsReferenceVectors(t *testing.T) {
	data := f32le(0, 1, 2, 3, 4, 5)
	cases := []struct {
		name   string
		layout []ParamTensor
		params []float32
		meta   map[string]string
		file   []byte
	}{
		{"one tensor", []ParamTensor{{Name: "attn.0", Shape: []int{1, 2, 3}, Size: 6}}, []float32{0, 1, 2, 3, 4, 5}, nil,
			append(stFile(`{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`, nil), data...)},
		{"forced alignment", []ParamTensor{{Name: "attn0", Shape: []int{1, 1, 2, 3}, Size: 6}}, []float32{0, 1, 2, 3, 4, 5}, nil,
			append(stFile(`{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       `, nil), data...)},
		{"empty", nil, nil, nil, stFile(`{}      `, nil)},
		{"empty with metadata", nil, nil, map[string]string{"framework": "pt"}, stFile(`{"__metadata__":{"framework":"pt"}}     `, nil)},
	}
	// The reference's own bytes for two of them, as its tests spell them.
	if !bytes.Equal(cases[2].file, []byte{8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32}) ||
		cases[0].file[0] != 64 || cases[1].file[0] != 72 || cases[3].file[0] != 40 {
		t.Fatal("reference vectors miscopied")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := writeST(t, c.layout, c.params, c.meta)
			if !bytes.Equal(got, c.file) {
				t.Errorf("WriteSafetensors:\n got %q\nwant %q", got, c.file)
			}
			tensors, meta, err := ReadSafetensors(c.file)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(meta, c.meta) || (meta == nil) != (c.meta == nil) {
				t.Errorf("metadata = %#v, want %#v", meta, c.meta)
			}
			if len(tensors) != len(c.layout) {
				t.Fatalf("read %d tensors, want %d", len(tensors), len(c.layout))
			}
			for i, l := range c.layout {
				if tensors[i].Name != l.Name || !slices.Equal(tensors[i].Shape, l.Shape) || !sameBits(tensors[i].Data, c.params) {
					t.Errorf("tensor %d = %+v", i, tensors[i])
				}
			}
		})
	}
}

func TestReadSafetensorsAccepts(t *testing.T) {
	cases := []struct {
		name string
		file []byte
		want []SafetensorsTensor
		meta map[string]string
	}{
		{"unpadded, any key order, sorted by offset",
			stFile(`{"b":{"data_offsets":[4,8],"shape":[1],"dtype":"F32"},"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, f32le(7, 8)),
			[]SafetensorsTensor{{"a", []int{}, []float32{7}}, {"b", []int{1}, []float32{8}}}, nil},
		{"whitespace, escapes, unknown keys, null metadata",
			stFile("{ \"__metadata__\" : null ,\n\t\"x\\u00e9\" : {\"dtype\":\"F32\",\"shape\":[ 2 ],\"data_offsets\":[0,8],\"extra\":[1,{}]} }\r\n  ", f32le(1, 2)),
			[]SafetensorsTensor{{"xé", []int{2}, []float32{1, 2}}}, nil},
		{"empty tensors share offsets, ordered by name",
			stFile(`{"z":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`, f32le(3)),
			[]SafetensorsTensor{{"e", []int{0}, []float32{}}, {"z", []int{0, 5}, []float32{}}, {"y", []int{1}, []float32{3}}}, nil},
		{"empty metadata", stFile(`{"__metadata__":{}}`, nil), nil, map[string]string{}},
		{"NaN and Inf kept bit for bit",
			stFile(`{"n":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}`, []byte{1, 0, 0xc0, 0x7f, 0, 0, 0x80, 0x7f, 0, 0, 0x80, 0xff}),
			[]SafetensorsTensor{{"n", []int{3}, []float32{math.Float32frombits(0x7fc00001), float32(math.Inf(1)), float32(math.Inf(-1))}}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tensors, meta, err := ReadSafetensors(c.file)
			if err != nil {
				t.Fatal(err)
			}
			if !tensorsEqual(tensors, c.want) {
				t.Errorf("tensors = %v, want %v", tensors, c.want)
			}
			if !maps.Equal(meta, c.meta) || (meta == nil) != (c.meta == nil) {
				t.Errorf("metadata = %#v, want %#v", meta, c.meta)
			}
		})
	}
}

func tensorsEqual(a, b []SafetensorsTensor) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !slices.Equal(a[i].Shape, b[i].Shape) || !sameBits(a[i].Data, b[i].Data) {
			return false
		}
	}
	return true
}

// badSafetensors are broken files, each with a piece of the error it must give.
func badSafetensors() []struct {
	name, want string
	file       []byte
} {
	valid := stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, f32le(1, 2))
	one := func(entry string, data []byte) []byte { return stFile(`{"a":`+entry+`}`, data) }
	huge := binary.LittleEndian.AppendUint64(nil, math.MaxUint64)
	overflows := "overflows"
	if strconv.IntSize == 32 { // these dims are already over MaxInt
		overflows = "too large"
	}
	return []struct {
		name, want string
		file       []byte
	}{
		{"empty file", "too short", nil},
		{"7 bytes", "too short", []byte{2, 0, 0, 0, 0, 0, 0}},
		{"truncated header", "past the end", valid[:20]},
		{"truncated data", "data buffer is 7 bytes", valid[:len(valid)-1]},
		{"trailing bytes", "data buffer is 9 bytes", append(slices.Clone(valid), 0)},
		{"header length huge", "over the format's limit", append(huge, "{}"...)},
		{"header length 100MB+1", "over the format's limit", append(binary.LittleEndian.AppendUint64(nil, 100_000_001), "{}"...)},
		{"header length past the end", "past the end", append(binary.LittleEndian.AppendUint64(nil, 3), "{}"...)},
		{"zero header length", "does not start with '{'", make([]byte, 8)},
		{"bad JSON", "not valid JSON", stFile(`{"a":`, nil)},
		{"bad JSON: trailing comma", "not valid JSON", stFile(`{"a":1,}`, nil)},
		{"two JSON values", "not valid JSON", stFile(`{} {}`, nil)},
		{"header not an object", "does not start with '{'", stFile(`[]`, nil)},
		{"leading space", "does not start with '{'", stFile(` {}`, nil)},
		{"padding with NUL", "not valid JSON", stFile("{}\x00\x00\x00\x00\x00\x00", nil)},
		{"invalid UTF-8", "not valid UTF-8", stFile("{\"\xff\":1}", nil)},
		{"F16 dtype", `tensor "w": dtype "F16" is not supported`, stFile(`{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4))},
		{"unknown dtype", `dtype "float"`, one(`{"dtype":"float","shape":[1],"data_offsets":[0,4]}`, make([]byte, 4))},
		{"dtype null", "dtype must be a string", one(`{"dtype":null,"shape":[1],"data_offsets":[0,4]}`, make([]byte, 4))},
		{"gap between tensors", `tensor "b": data_offsets [12, 16] leave a gap after 8`,
			stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}}`, make([]byte, 16))},
		{"first tensor not at 0", "leave a gap after 0", one(`{"dtype":"F32","shape":[1],"data_offsets":[4,8]}`, make([]byte, 8))},
		{"overlapping tensors", "overlap",
			stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8))},
		{"same offsets twice", "overlap",
			stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4))},
		{"offsets past the data", "cover 8 bytes, but the data buffer is 4", one(`{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`, make([]byte, 4))},
		{"shape/offset mismatch", "shape [3] is 12 bytes of F32, but data_offsets [0, 8] span 8", one(`{"dtype":"F32","shape":[3],"data_offsets":[0,8]}`, make([]byte, 8))},
		{"end before begin", "end before they begin", one(`{"dtype":"F32","shape":[0],"data_offsets":[8,4]}`, nil)},
		{"three offsets", "data_offsets must be [begin, end]", one(`{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}`, make([]byte, 4))},
		{"offsets null", "data_offsets must be", one(`{"dtype":"F32","shape":[1],"data_offsets":null}`, make([]byte, 4))},
		{"negative offset", "data_offsets must be", one(`{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}`, nil)},
		{"negative dim", "shape must be an array of integers >= 0", one(`{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}`, make([]byte, 4))},
		{"fractional dim", "shape must be", one(`{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}`, make([]byte, 4))},
		{"dim too large for uint64", "shape must be", one(`{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,0]}`, nil)},
		{"shape null", "shape must be", one(`{"dtype":"F32","shape":null,"data_offsets":[0,4]}`, make([]byte, 4))},
		{"shape product overflow", overflows, one(`{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}`, nil)},
		{"shape bytes overflow", overflows, one(`{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}`, nil)},
		{"dim over MaxInt", "too large", one(`{"dtype":"F32","shape":[9223372036854775808,0],"data_offsets":[0,0]}`, nil)},
		{"missing shape", "needs dtype, shape and data_offsets", one(`{"dtype":"F32","data_offsets":[0,4]}`, make([]byte, 4))},
		{"entry not an object", "want a JSON object", one(`[1]`, nil)},
		{"duplicate names", `header: duplicate key "a"`,
			stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8))},
		{"duplicate names, escaped", `duplicate key "a"`,
			stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"\u0061":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8))},
		{"duplicate field", `tensor "a": duplicate key "dtype"`, one(`{"dtype":"F16","dtype":"F32","shape":[1],"data_offsets":[0,4]}`, make([]byte, 4))},
		{"duplicate __metadata__", `duplicate key "__metadata__"`, stFile(`{"__metadata__":{},"__metadata__":{}}`, nil)},
		{"duplicate metadata key", `__metadata__: duplicate key "k"`, stFile(`{"__metadata__":{"k":"1","k":"2"}}`, nil)},
		{"metadata not an object", "__metadata__: want a JSON object", stFile(`{"__metadata__":"pt"}`, nil)},
		{"metadata value not a string", `__metadata__ "k": value must be a string`, stFile(`{"__metadata__":{"k":1}}`, nil)},
	}
}

func TestReadSafetensorsErrors(t *testing.T) {
	for _, c := range badSafetensors() {
		t.Run(c.name, func(t *testing.T) {
			tensors, meta, err := ReadSafetensors(c.file)
			if err == nil {
				t.Fatalf("no error; read %v %v", tensors, meta)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
			if tensors != nil || meta != nil {
				t.Errorf("returned %v %v with the error", tensors, meta)
			}
		})
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n <= 0 {
		return 0, errors.New("disk full")
	}
	w.n--
	return len(p), nil
}

func TestWriteSafetensorsErrors(t *testing.T) {
	good := []ParamTensor{{Name: "a", Shape: []int{2}, Offset: 0, Size: 2}, {Name: "b", Shape: []int{1}, Offset: 2, Size: 1}}
	p3 := []float32{1, 2, 3}
	cases := []struct {
		name   string
		layout []ParamTensor
		params []float32
		meta   map[string]string
		want   string
	}{
		{"params too long", good, []float32{1, 2, 3, 4}, nil, "covers 3 parameters, but len(params) = 4"},
		{"params too short", good, []float32{1, 2}, nil, `tensor "b": [2, 3) is past the end of params (len 2)`},
		{"no params", good, nil, nil, "past the end"},
		{"gap in layout", []ParamTensor{{Name: "a", Shape: []int{1}, Size: 1}, {Name: "b", Shape: []int{1}, Offset: 2, Size: 1}}, p3, nil, `tensor "b": offset 2, want 1`},
		{"overlap in layout", []ParamTensor{{Name: "a", Shape: []int{2}, Size: 2}, {Name: "b", Shape: []int{1}, Offset: 1, Size: 1}}, p3, nil, "offset 1, want 2"},
		{"size/shape mismatch", []ParamTensor{{Name: "a", Shape: []int{2}, Size: 3}}, p3, nil, `tensor "a": size 3 does not match shape [2]`},
		{"negative dim", []ParamTensor{{Name: "a", Shape: []int{-1, -3}, Size: 3}}, p3, nil, "invalid shape"},
		{"shape overflow", []ParamTensor{{Name: "a", Shape: []int{math.MaxInt, 2, 0}, Size: 0}}, nil, nil, "invalid shape"},
		{"negative size", []ParamTensor{{Name: "a", Shape: []int{1}, Size: -1}}, p3, nil, "size -1"},
		{"duplicate name", []ParamTensor{{Name: "a", Shape: []int{1}, Size: 1}, {Name: "a", Shape: []int{2}, Offset: 1, Size: 2}}, p3, nil, `duplicate tensor name "a"`},
		{"reserved name", []ParamTensor{{Name: "__metadata__", Shape: []int{3}, Size: 3}}, p3, nil, "reserved"},
		{"invalid UTF-8 name", []ParamTensor{{Name: "\xff", Shape: []int{3}, Size: 3}}, p3, nil, "not valid UTF-8"},
		{"invalid UTF-8 metadata", []ParamTensor{{Name: "a", Shape: []int{3}, Size: 3}}, p3, map[string]string{"k": "\xfe"}, "metadata"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := WriteSafetensors(&buf, c.layout, c.params, c.meta)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes before failing", buf.Len())
			}
		})
	}
	for n := range 3 { // fail at the length, the header, the data
		if err := WriteSafetensors(&failWriter{n: n}, good, p3, nil); err == nil || err.Error() != "disk full" {
			t.Errorf("write %d fails: error %v, want disk full", n, err)
		}
	}
}

func TestParamsFromSafetensorsErrors(t *testing.T) {
	m := mustModel(t, ModelSpec{Input: []int{1, 2, 2}, Layers: []LayerSpec{{Type: TypeDense, Units: 3}, {Type: TypeReLU}, {Type: TypeDense, Units: 2}}})
	params := make([]float32, m.NumParams)
	m.Init(params, 1)
	tensors, _, err := ReadSafetensors(writeST(t, m.Layout, params, nil))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(m.Layout))
	for i, l := range m.Layout {
		names[i] = l.Name
	}
	if want := []string{"0.dense.weight", "0.dense.bias", "2.dense.weight", "2.dense.bias"}; !slices.Equal(names, want) {
		t.Fatalf("layout names %v, want %v (the cases below use them)", names, want)
	}
	edit := func(f func([]SafetensorsTensor) []SafetensorsTensor) []SafetensorsTensor {
		c := make([]SafetensorsTensor, len(tensors))
		for i, t := range tensors {
			c[i] = SafetensorsTensor{t.Name, slices.Clone(t.Shape), slices.Clone(t.Data)}
		}
		return f(c)
	}
	cases := []struct {
		name    string
		tensors []SafetensorsTensor
		params  int
		want    []string
	}{
		{"missing tensor", edit(func(ts []SafetensorsTensor) []SafetensorsTensor { return slices.Delete(ts, 1, 2) }), m.NumParams,
			[]string{`missing tensor "0.dense.bias" (shape [3])`}},
		{"no tensors", nil, m.NumParams, []string{`missing tensor "0.dense.weight"`, `missing tensor "2.dense.bias"`}},
		{"extra tensor", edit(func(ts []SafetensorsTensor) []SafetensorsTensor {
			return append(ts, SafetensorsTensor{"9.dense.weight", []int{1}, []float32{1}})
		}), m.NumParams, []string{`extra tensor "9.dense.weight"`}},
		{"renamed tensor", edit(func(ts []SafetensorsTensor) []SafetensorsTensor { ts[3].Name = "2.dense.b"; return ts }), m.NumParams,
			[]string{`extra tensor "2.dense.b"`, `missing tensor "2.dense.bias"`}},
		{"wrong shape", edit(func(ts []SafetensorsTensor) []SafetensorsTensor { ts[0].Shape = []int{4, 3}; return ts }), m.NumParams,
			[]string{`tensor "0.dense.weight" has shape [4 3], want [3 4]`}},
		{"flattened shape", edit(func(ts []SafetensorsTensor) []SafetensorsTensor { ts[2].Shape = []int{6}; return ts }), m.NumParams,
			[]string{`tensor "2.dense.weight" has shape [6], want [2 3]`}},
		{"data length", edit(func(ts []SafetensorsTensor) []SafetensorsTensor { ts[1].Data = ts[1].Data[:2]; return ts }), m.NumParams,
			[]string{`tensor "0.dense.bias" has 2 values, want 3`}},
		{"duplicate tensor", edit(func(ts []SafetensorsTensor) []SafetensorsTensor { return append(ts, ts[0]) }), m.NumParams,
			[]string{`duplicate tensor "0.dense.weight"`}},
		{"many problems: the first 10 are named", edit(func([]SafetensorsTensor) []SafetensorsTensor {
			var ts []SafetensorsTensor
			for i := range 12 {
				ts = append(ts, SafetensorsTensor{Name: "x" + strconv.Itoa(i)})
			}
			return ts
		}), m.NumParams, []string{`extra tensor "x0"`, `extra tensor "x9" (not in the model); and 6 more`}},
		{"params length", tensors, m.NumParams + 1, []string{"len(params) = 24, want NumParams = 23"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := make([]float32, c.params)
			for i := range dst {
				dst[i] = 7
			}
			err := m.ParamsFromSafetensors(c.tensors, dst)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			for _, v := range dst {
				if v != 7 {
					t.Fatal("params changed on error")
				}
			}
		})
	}
}

// FuzzReadSafetensors: no input makes ReadSafetensors panic, and whatever it
// reads writes back (with a layout rebuilt from the tensors) to a file that
// reads back to the same tensors and metadata, and that is a fixed point of
// read-then-write.
func FuzzReadSafetensors(f *testing.F) {
	m, err := NewModel(ModelSpec{Input: []int{1, 2, 2}, Layers: []LayerSpec{{Type: TypeDense, Units: 3}, {Type: TypeReLU}, {Type: TypeDense, Units: 2}}})
	if err != nil {
		f.Fatal(err)
	}
	params := make([]float32, m.NumParams)
	m.Init(params, 3)
	f.Add(writeST(f, m.Layout, params, map[string]string{"format": "pt", "model": "tiny"}))
	f.Add(writeST(f, m.Layout, params, nil))
	f.Add(writeST(f, []ParamTensor{{Name: "a", Shape: []int{2}, Size: 2}, {Name: "b", Shape: []int{1, 1}, Offset: 2, Size: 1}}, []float32{1, -2, 0.5}, map[string]string{}))
	f.Add(writeST(f, []ParamTensor{{Name: "s", Shape: []int{}, Size: 1}, {Name: "e", Shape: []int{0, 3}, Offset: 1, Size: 0}}, []float32{float32(math.NaN())}, nil))
	f.Add(stFile(`{}`, nil))
	f.Add(stFile(`{"b":{"data_offsets":[4,8],"shape":[1],"dtype":"F32"},"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, f32le(7, 8)))
	f.Add(stFile("{ \"__metadata__\" : null ,\n\t\"x\\u00e9\\u2028<&>\" : {\"dtype\":\"F32\",\"shape\":[ 2 ],\"data_offsets\":[0,8],\"extra\":[1,{}]} }  ", f32le(1, 2)))
	for _, c := range badSafetensors() {
		f.Add(c.file)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tensors, meta, err := ReadSafetensors(b)
		if err != nil {
			return
		}
		layout, flat := layoutFromTensors(t, tensors)
		var buf bytes.Buffer
		if err := WriteSafetensors(&buf, layout, flat, meta); err != nil {
			t.Fatalf("re-writing what was read: %v", err)
		}
		file := buf.Bytes()
		tensors2, meta2, err := ReadSafetensors(file)
		if err != nil {
			t.Fatalf("reading the re-written file: %v", err)
		}
		if !tensorsEqual(tensors, tensors2) {
			t.Fatalf("tensors changed:\n%v\n%v", tensors, tensors2)
		}
		if !maps.Equal(meta, meta2) || (meta == nil) != (meta2 == nil) {
			t.Fatalf("metadata changed: %#v -> %#v", meta, meta2)
		}
		layout2, flat2 := layoutFromTensors(t, tensors2)
		if again := writeST(t, layout2, flat2, meta2); !bytes.Equal(again, file) {
			t.Fatalf("write(read(file)) is not a fixed point:\n%q\n%q", file, again)
		}
	})
}

func layoutFromTensors(t *testing.T, tensors []SafetensorsTensor) ([]ParamTensor, []float32) {
	var layout []ParamTensor
	var flat []float32
	for _, tt := range tensors {
		layout = append(layout, ParamTensor{Name: tt.Name, Shape: tt.Shape, Offset: len(flat), Size: len(tt.Data)})
		flat = append(flat, tt.Data...)
	}
	return layout, flat
}
