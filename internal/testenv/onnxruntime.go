package testenv

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// ONNXRuntimeDir is where `make onnxruntime` (which .ci/run runs) installs
// ONNX Runtime for Node.js (onnxruntime-node, pinned by the package-lock
// there) beside logits.js, the script that runs a model with it; relative
// to the repository's root.
const ONNXRuntimeDir = "internal/testenv/testdata/onnxruntime"

// NeedONNXRuntime returns Node.js's path and that of logits.js (see its
// header for its arguments), or skips t (fails it under RequireVar) when
// Node.js or the installed onnxruntime-node is missing.
func NeedONNXRuntime(t testing.TB) (node, script string) {
	t.Helper()
	node = NeedNode(t, "ONNX Runtime on the exported model")
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testenv: cannot find its own source file")
	}
	dir := filepath.Join(filepath.Dir(self), "testdata", "onnxruntime")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "onnxruntime-node", "package.json")); err != nil {
		Missing(t, "onnxruntime-node is not installed in "+ONNXRuntimeDir+": run `make onnxruntime` (npm ci --ignore-scripts there; needs npm)")
	}
	return node, filepath.Join(dir, "logits.js")
}

// ONNXRun is what ONNX Runtime made of one batch: the model's input and
// output names, and its first output's dims and values.
type ONNXRun struct {
	Inputs, Outputs []string
	Dims            []int
	Logits          []float32
}

// RunONNXRuntime runs the ONNX model in file on one batch x of the given
// shape (the batch size first) with ONNX Runtime: x's values as float32,
// or, when tokens is set, as int64 token ids. It skips t (fails it under
// RequireVar) when ONNX Runtime is missing and fails t when the run does.
func RunONNXRuntime(t testing.TB, file string, x []float32, tokens bool, shape []int) ONNXRun {
	t.Helper()
	node, script := NeedONNXRuntime(t)
	dtype := "float32"
	var raw []byte
	if tokens {
		dtype = "int64"
		for _, v := range x {
			raw = binary.LittleEndian.AppendUint64(raw, uint64(int64(v)))
		}
	} else {
		for _, v := range x {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
	}
	dir := t.TempDir()
	xf, yf := filepath.Join(dir, "x.bin"), filepath.Join(dir, "y.bin")
	if err := os.WriteFile(xf, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	shapeJSON, _ := json.Marshal(shape)
	out, err := exec.Command(node, script, file, xf, dtype, string(shapeJSON), yf).CombinedOutput()
	if err != nil {
		t.Fatalf("ONNX Runtime on %s: %v\n%s", file, err, out)
	}
	var run ONNXRun
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &run); err != nil {
		t.Fatalf("logits.js printed %q: %v", out, err)
	}
	y, err := os.ReadFile(yf)
	if err != nil {
		t.Fatal(err)
	}
	run.Logits = make([]float32, len(y)/4)
	for i := range run.Logits {
		run.Logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(y[4*i:]))
	}
	return run
}
