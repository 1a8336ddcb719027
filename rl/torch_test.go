package rl

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/nn"
)

const torchReference = "../scripts/torch_reference.py"

// PyTorch computes the same GRPO loss, KL, clipped share and gradient from
// the same weights and batch (scripts/torch_reference.py grpo, float64),
// on a tied transformer with a KL penalty and a temperature.
func TestGRPOMatchesPyTorch(t *testing.T) {
	testenv.Long(t, "runs PyTorch")
	py := testenv.NeedTorch(t)
	dir := t.TempDir()
	spec := nn.Transformer(nn.TransformerConfig{Context: 8, Width: 8, Blocks: 2, Heads: 2, Vocab: 7, Tied: true})
	m, err := nn.NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, m.NumParams)
	m.Init(p, 21)
	for i := range p {
		p[i] += float32(0.1 * math.Sin(float64(i)))
	}
	groups := sampledBatch(t, m, p)
	cfg := Config{Clip: 0.25, KLCoef: 0.05, Eps: 1e-3, Temperature: 0.9}
	grad := make([]float32, m.NumParams)
	st, err := Loss(m, m.NewWorkspace(5), p, groups, cfg, grad)
	if err != nil {
		t.Fatal(err)
	}

	modelFile := filepath.Join(dir, "model.safetensors")
	specJSON, _ := json.Marshal(spec)
	var buf bytes.Buffer
	if err := nn.WriteSafetensors(&buf, m.Layout, p, map[string]string{"crowdtrain.model": string(specJSON)}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(modelFile, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	type jsonCompletion struct {
		Prompt      []int32   `json:"prompt"`
		Tokens      []int32   `json:"tokens"`
		OldLogProbs []float32 `json:"old_logprobs"`
		RefLogProbs []float32 `json:"ref_logprobs"`
		Reward      float64   `json:"reward"`
	}
	var jg [][]jsonCompletion
	for _, g := range groups {
		var cs []jsonCompletion
		for _, c := range g {
			cs = append(cs, jsonCompletion{c.Prompt, c.Tokens, c.OldLogProbs, c.RefLogProbs, c.Reward})
		}
		jg = append(jg, cs)
	}
	batch, _ := json.Marshal(map[string]any{"groups": jg, "clip": cfg.Clip, "kl_coef": cfg.KLCoef, "eps": cfg.Eps, "temperature": cfg.Temperature})
	batchFile, gradFile := filepath.Join(dir, "batch.json"), filepath.Join(dir, "grad.npy")
	if err := os.WriteFile(batchFile, batch, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, torchReference, "grpo", "--model", modelFile, "--batch", batchFile, "--grad", gradFile).CombinedOutput()
	if err != nil {
		t.Fatalf("torch_reference.py grpo: %v\n%s", err, out)
	}
	for name, got := range map[string]float64{"loss": st.Loss, "kl": st.KL, "clip_fraction": st.ClipFraction} {
		if want := figure(t, out, name); math.Abs(got-want) > 1e-5 {
			t.Errorf("%s: crowdtrain %.8f, PyTorch %.8f", name, got, want)
		}
	}
	if st.ClipFraction == 0 {
		t.Error("nothing clipped: the batch does not exercise the clip")
	}

	f, err := os.Open(gradFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := dataset.ReadNPY(f, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if a.Dtype() != "float64" || len(a.Data) != 8*m.NumParams {
		t.Fatalf("PyTorch's gradient: %s of %d bytes, want %d float64s", a.Dtype(), len(a.Data), m.NumParams)
	}
	layout := slices.SortedFunc(slices.Values(m.Layout), func(a, b nn.ParamTensor) int { return strings.Compare(a.Name, b.Name) })
	off := 0
	for _, pt := range layout {
		var diff, norm float64
		for i := range pt.Size {
			want := math.Float64frombits(binary.LittleEndian.Uint64(a.Data[8*(off+i):]))
			d := float64(grad[pt.Offset+i]) - want
			diff += d * d
			norm += want * want
		}
		off += pt.Size
		if rel := math.Sqrt(diff / max(norm, 1e-30)); !(rel <= 1e-4) && !(math.Sqrt(diff) < 1e-7) {
			t.Errorf("%s: gradient %.3g relative from PyTorch's (norm %.3g)", pt.Name, rel, math.Sqrt(norm))
		}
	}
}

// figure reads "name value" from the script's output.
func figure(t *testing.T, out []byte, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no %s in the output:\n%s", name, out)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
