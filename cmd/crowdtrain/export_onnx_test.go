//go:build cgo

package main

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
)

// `crowdtrain export` of a job's checkpoint to an .onnx file writes the
// network: ONNX Runtime gives the logits nn computes from the same
// checkpoint (within 1e-5, relative above 1), for a CNN on images and for
// a transformer on token ids, and the file carries the job in its
// metadata.
func TestExportONNXRunsInONNXRuntime(t *testing.T) {
	testenv.Long(t, "runs ONNX Runtime under Node.js")
	testenv.NeedONNXRuntime(t)
	for _, name := range []string{"mnist-cnn", "charlm-tiny"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ms, m := presetModel(t, name)
			params := randomParams(m, 0.05)
			dbPath, id := storeJob(t, dir, jobspec.Spec{Name: name, Model: ms}, params)
			out := filepath.Join(dir, name+".onnx")
			code, stdout, stderr := runCmd(t, context.Background(), "export", "--db", dbPath, "--job", id, "--out", out)
			if code != 0 || !strings.Contains(stdout, "(onnx)") {
				t.Fatalf("export to %s: exit %d, want 0 and the onnx format from the extension\n%s%s", out, code, stdout, stderr)
			}
			file, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(file, []byte("crowdtrain.job")) || !bytes.Contains(file, []byte(id)) {
				t.Error("the ONNX file's metadata does not name the job")
			}

			const n = 4
			rng := rand.New(rand.NewPCG(7, 8))
			x := make([]float32, n*m.InputSize)
			tokens := m.InputVocab() > 0
			for i := range x {
				if tokens {
					x[i] = float32(rng.IntN(m.InputVocab()))
				} else {
					x[i] = rng.Float32()
				}
			}
			want := m.Forward(m.NewWorkspace(n), params, x)
			ran := testenv.RunONNXRuntime(t, out, x, tokens, append([]int{n}, ms.Input...))
			if len(ran.Logits) != len(want) {
				t.Fatalf("ONNX Runtime gave %d logits (dims %v), nn %d", len(ran.Logits), ran.Dims, len(want))
			}
			for i, w := range want {
				if d := math.Abs(float64(ran.Logits[i] - w)); !(d <= 1e-5*max(1, math.Abs(float64(w)))) {
					t.Fatalf("logit %d: ONNX Runtime %g, nn %g", i, ran.Logits[i], w)
				}
			}
		})
	}
}

// --format picks the format whatever the file is called; a format export
// does not write is a usage error that lists those it does, and writes
// nothing.
func TestExportFormatFlag(t *testing.T) {
	dir := t.TempDir()
	ms, m := presetModel(t, "mnist-mlp")
	dbPath, id := storeJob(t, dir, jobspec.Spec{Name: "mlp", Model: ms}, randomParams(m, 0.05))
	bad := filepath.Join(dir, "m.tflite")
	code, _, stderr := runCmd(t, context.Background(), "export", "--db", dbPath, "--job", id, "--format", "tflite", "--out", bad)
	if code != 2 || !strings.Contains(stderr, "--format tflite: want safetensors or onnx") {
		t.Fatalf("--format tflite: exit %d, %q; want 2 and the formats", code, stderr)
	}
	if _, err := os.Stat(bad); err == nil {
		t.Error("a refused export wrote its file")
	}
	for format, magic := range map[string][]byte{"onnx": {0x08, 0x08}, "safetensors": nil} {
		out := filepath.Join(dir, "model-"+format+".bin")
		code, stdout, stderr := runCmd(t, context.Background(), "export", "--db", dbPath, "--job", id, "--format", format, "--out", out)
		if code != 0 || !strings.Contains(stdout, "("+format+")") {
			t.Fatalf("--format %s: exit %d\n%s%s", format, code, stdout, stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		_, _, stErr := nn.ReadSafetensors(b)
		switch format {
		case "onnx":
			// A ModelProto starts with ir_version (field 1, varint) = 8.
			if !slices.Equal(b[:2], magic) || stErr == nil {
				t.Errorf("--format onnx wrote %x..., not an ONNX model", b[:min(8, len(b))])
			}
		case "safetensors":
			if stErr != nil {
				t.Errorf("--format safetensors wrote no safetensors: %v", stErr)
			}
		}
	}
}
