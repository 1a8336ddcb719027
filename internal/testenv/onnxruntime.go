package testenv

import (
	"os"
	"path/filepath"
	"runtime"
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
