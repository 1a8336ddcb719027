package coordinator

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
)

// initTestModel is a model small enough to write every broken file of.
func initTestModel(t testing.TB) *nn.Model {
	t.Helper()
	m, err := nn.NewModel(nn.ModelSpec{Input: []int{1, 2, 2}, Layers: []nn.LayerSpec{{Type: nn.TypeDense, Units: 3}, {Type: nn.TypeReLU}, {Type: nn.TypeDense, Units: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// encodeTensors writes tensors as a safetensors file, in order.
func encodeTensors(t testing.TB, tensors []nn.SafetensorsTensor) []byte {
	t.Helper()
	var layout []nn.ParamTensor
	var params []float32
	for _, x := range tensors {
		layout = append(layout, nn.ParamTensor{Name: x.Name, Shape: x.Shape, Offset: len(params), Size: len(x.Data)})
		params = append(params, x.Data...)
	}
	var b bytes.Buffer
	if err := nn.WriteSafetensors(&b, layout, params, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// modelTensors is model's parameters params as tensors.
func modelTensors(m *nn.Model, params []float32) []nn.SafetensorsTensor {
	out := make([]nn.SafetensorsTensor, len(m.Layout))
	for i, l := range m.Layout {
		out[i] = nn.SafetensorsTensor{Name: l.Name, Shape: slices.Clone(l.Shape), Data: slices.Clone(params[l.Offset : l.Offset+l.Size])}
	}
	return out
}

func writeInitFile(t testing.TB, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "init.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// initProblem reads path as m's init and returns the problem, failing t
// unless it is a *jobspec.Error for the `init` key naming the file.
func initProblem(t *testing.T, path string, m *nn.Model) string {
	t.Helper()
	_, err := readInitFile(path, m)
	var se *jobspec.Error
	if !errors.As(err, &se) || se.Key != "init" {
		t.Fatalf("got %v (%T), want a spec error for the init key", err, err)
	}
	if !strings.Contains(se.Problem, path) {
		t.Errorf("%q does not name the file %s", se.Problem, path)
	}
	return se.Problem
}

// A file whose tensors are not exactly the model's is refused with every
// difference named: the tensor, and for a shape both shapes.
func TestInitFileMustHoldExactlyTheModelsTensors(t *testing.T) {
	m := initTestModel(t)
	params := make([]float32, m.NumParams)
	m.Init(params, 3)
	edit := func(f func([]nn.SafetensorsTensor) []nn.SafetensorsTensor) []byte {
		return encodeTensors(t, f(modelTensors(m, params)))
	}
	f16 := bytes.Replace(edit(func(ts []nn.SafetensorsTensor) []nn.SafetensorsTensor { return ts }), []byte(`"dtype":"F32"`), []byte(`"dtype":"F16"`), 1)
	for _, c := range []struct {
		name string
		file []byte
		want []string
	}{
		{"missing tensor", edit(func(ts []nn.SafetensorsTensor) []nn.SafetensorsTensor { return slices.Delete(ts, 1, 2) }),
			[]string{`missing tensor "0.dense.bias" (shape [3])`}},
		{"extra tensor", edit(func(ts []nn.SafetensorsTensor) []nn.SafetensorsTensor {
			return append(ts, nn.SafetensorsTensor{Name: "4.dense.weight", Shape: []int{2}, Data: []float32{1, 2}})
		}), []string{`extra tensor "4.dense.weight"`}},
		{"wrong shape", edit(func(ts []nn.SafetensorsTensor) []nn.SafetensorsTensor {
			ts[2] = nn.SafetensorsTensor{Name: ts[2].Name, Shape: []int{3, 2}, Data: ts[2].Data}
			return ts
		}), []string{`tensor "2.dense.weight" has shape [3 2], want [2 3]`}},
		{"wrong size", edit(func(ts []nn.SafetensorsTensor) []nn.SafetensorsTensor {
			ts[1] = nn.SafetensorsTensor{Name: ts[1].Name, Shape: []int{5}, Data: make([]float32, 5)}
			return ts
		}), []string{`tensor "0.dense.bias" has shape [5], want [3]`}},
		{"wrong dtype", f16, []string{`tensor "0.dense.weight"`, `dtype "F16"`}},
		{"non-finite value", edit(func(ts []nn.SafetensorsTensor) []nn.SafetensorsTensor {
			ts[3].Data[1] = float32(math.NaN())
			return ts
		}), []string{`tensor "2.dense.bias"`, "NaN at index 1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeInitFile(t, c.file)
			problem := initProblem(t, path, m)
			for _, w := range c.want {
				if !strings.Contains(problem, w) {
					t.Errorf("%q does not say %q", problem, w)
				}
			}
		})
	}
}

// What export writes, init reads back bit for bit (-0, subnormals and
// all), and records the file's SHA-256.
func TestInitFileRoundTripIsBitIdentical(t *testing.T) {
	m := initTestModel(t)
	params := make([]float32, m.NumParams)
	m.Init(params, 5)
	params[0], params[1], params[2] = float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, math.MaxFloat32
	var b bytes.Buffer
	spec := jobspec.Spec{Name: "src", Model: nn.ModelSpec{Input: []int{1, 2, 2}}}
	if err := nn.WriteSafetensors(&b, m.Layout, params, ExportMetadata("src-1", spec, 7, "test")); err != nil {
		t.Fatal(err)
	}
	src, err := readInitFile(writeInitFile(t, b.Bytes()), m)
	if err != nil {
		t.Fatal(err)
	}
	got, sum := src.params, src.sum
	if src.spec == nil || src.spec.Name != "src" {
		t.Errorf("the export's spec read back as %+v", src.spec)
	}
	for i := range params {
		if math.Float32bits(got[i]) != math.Float32bits(params[i]) {
			t.Fatalf("parameter %d: %v read back as %v", i, params[i], got[i])
		}
	}
	if want := sha256.Sum256(b.Bytes()); sum != hex.EncodeToString(want[:]) {
		t.Errorf("sha256 %s, want %x", sum, want)
	}
}

// corruptInitFiles are broken versions of a valid file: truncated at
// every part, with a bad length, header or data.
func corruptInitFiles(valid []byte) map[string][]byte {
	n := binary.LittleEndian.Uint64(valid)
	header := valid[8 : 8+n]
	withHeader := func(h []byte) []byte {
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		return append(append(out, h...), valid[8+n:]...)
	}
	huge := slices.Clone(valid)
	binary.LittleEndian.PutUint64(huge, math.MaxUint64)
	return map[string][]byte{
		"empty":                 {},
		"part of the length":    valid[:5],
		"length only":           valid[:8],
		"half the header":       valid[:8+n/2],
		"header, no data":       valid[:8+n],
		"one byte short":        valid[:len(valid)-1],
		"one byte over":         append(slices.Clone(valid), 0),
		"huge header length":    huge,
		"header not JSON":       withHeader(bytes.Repeat([]byte{'{'}, int(n))),
		"header not an object":  withHeader([]byte(`[1, 2, 3]`)),
		"header not UTF-8":      withHeader(append([]byte(`{"`), 0xff, '"', ':', '1', '}')),
		"offsets out of range":  withHeader(bytes.Replace(header, []byte(`"data_offsets":[0,`), []byte(`"data_offsets":[9,`), 1)),
		"negative shape":        withHeader(bytes.Replace(header, []byte(`"shape":[`), []byte(`"shape":[-`), 1)),
		"duplicate tensor name": withHeader(bytes.Replace(header, []byte(`"0.dense.bias"`), []byte(`"0.dense.weight"`), 1)),
	}
}

// A truncated or corrupt file is an error naming the file, never a panic.
func TestCorruptInitFileIsAnError(t *testing.T) {
	m := initTestModel(t)
	params := make([]float32, m.NumParams)
	m.Init(params, 1)
	valid := encodeTensors(t, modelTensors(m, params))
	if _, err := readInitFile(writeInitFile(t, valid), m); err != nil {
		t.Fatalf("the valid file: %v", err)
	}
	for name, b := range corruptInitFiles(valid) {
		t.Run(name, func(t *testing.T) {
			problem := initProblem(t, writeInitFile(t, b), m)
			if !strings.Contains(problem, "safetensors") && !strings.Contains(problem, "tensor") {
				t.Errorf("%q does not say what is wrong with the file", problem)
			}
		})
	}
	dir := t.TempDir()
	if problem := initProblem(t, filepath.Join(dir, "none.safetensors"), m); !strings.Contains(problem, "does not exist") {
		t.Errorf("a missing file: %q", problem)
	}
	if problem := initProblem(t, dir, m); !strings.Contains(problem, "not a regular file") {
		t.Errorf("a directory: %q", problem)
	}
}

// Whatever the bytes, reading them as an init file returns parameters
// that match the file or a spec error for the init key; it never panics.
func FuzzInitFile(f *testing.F) {
	m := initTestModel(f)
	params := make([]float32, m.NumParams)
	m.Init(params, 1)
	valid := encodeTensors(f, modelTensors(m, params))
	f.Add(valid)
	for _, b := range corruptInitFiles(valid) {
		f.Add(b)
	}
	path := filepath.Join(f.TempDir(), "init.safetensors")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		src, err := readInitFile(path, m)
		got := src.params
		if err != nil {
			var se *jobspec.Error
			if !errors.As(err, &se) || se.Key != "init" {
				t.Fatalf("got %v (%T), want a spec error for the init key", err, err)
			}
			return
		}
		tensors, _, rerr := nn.ReadSafetensors(b)
		if rerr != nil || len(got) != m.NumParams {
			t.Fatalf("accepted a file ReadSafetensors refuses (%v) or got %d parameters", rerr, len(got))
		}
		for _, x := range tensors {
			for _, l := range m.Layout {
				if l.Name == x.Name && !slices.Equal(got[l.Offset:l.Offset+l.Size], x.Data) {
					t.Fatalf("tensor %s read as %v, the file holds %v", x.Name, got[l.Offset:l.Offset+l.Size], x.Data)
				}
			}
		}
	})
}

// Parameters trained on another tokenizer's ids are refused though every
// shape fits; the same tokenizer, or bytes on both sides, are not.
func TestInitFromAnotherTokenizerIsRefused(t *testing.T) {
	tok := func(data string) *jobspec.Tokenizer {
		return &jobspec.Tokenizer{Type: jobspec.TokenizerBPE, Vocab: 300, Data: data}
	}
	for _, c := range []struct {
		name     string
		src, job *jobspec.Tokenizer
		refused  bool
	}{
		{"bytes on both sides", nil, nil, false},
		{"the same tokenizer", tok("merges A"), tok("merges A"), false},
		{"another tokenizer", tok("merges A"), tok("merges B"), true},
		{"a tokenizer, then bytes", tok("merges A"), nil, true},
		{"bytes, then a tokenizer", nil, tok("merges A"), true},
	} {
		src := initSource{spec: &jobspec.Spec{Tokenizer: c.src}, from: "job src at version 3"}
		err := checkSameTokenizer(jobspec.Spec{Tokenizer: c.job}, src)
		var se *jobspec.Error
		switch {
		case !c.refused && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.refused && (!errors.As(err, &se) || se.Key != "init" || !strings.Contains(se.Problem, "job src at version 3") || !strings.Contains(se.Problem, "embedding row")):
			t.Errorf("%s: %v; want an init error naming the source and why", c.name, err)
		}
	}
	// A file with no spec in its metadata is taken on its tensors alone.
	if err := checkSameTokenizer(jobspec.Spec{Tokenizer: tok("merges A")}, initSource{from: "f"}); err != nil {
		t.Errorf("a file without crowdtrain.spec: %v", err)
	}
}
