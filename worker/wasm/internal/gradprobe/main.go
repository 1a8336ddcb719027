// Command gradprobe computes one gradient of a preset model on a fixed
// batch (the first 64 MNIST training images, or for a sequence model
// windows of a fixed text; parameters from seed 1) with
// the backend a worker of this build would use, and prints it as JSON. The
// browser worker's test builds it natively and for GOOS=js GOARCH=wasm, runs
// the wasm under Node, and compares the two: the browser must compute the
// same numbers as a native worker.
//
//	gradprobe -data DIR -model mnist-mlp
//
// -kernel picks the GEMM kernel; under Node with testdata/run_simd_node.js
// (which loads web/static/simd.wasm beside it) -kernel simd runs the
// browser's wasm-simd backend.
//
// With -inner, it runs a whole lease through the worker's compute path
// instead: -steps inner steps of -batch examples with that inner optimizer,
// printing the update -update names (gradient or delta).
//
//	gradprobe -data DIR -model mnist-mlp -inner adamw -steps 4 -update delta
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// Output is what gradprobe prints.
type Output struct {
	Backend string  `json:"backend"`
	LossSum float64 `json:"loss_sum"`
	Correct int     `json:"correct"`
	Grad    []byte  `json:"grad"` // little-endian float32s, base64 in JSON
}

func main() {
	data := flag.String("data", "", "directory with the MNIST IDX files")
	preset := flag.String("model", "mnist-mlp", "model preset, or "+tiedModel+" (charlm-tiny with its output tied to the embedding)")
	batch := flag.Int("batch", 64, "examples in the batch")
	inner := flag.String("inner", "", "run a lease with this inner optimizer (sgd or adamw) instead of one gradient")
	steps := flag.Int("steps", 1, "inner steps of the lease (with -inner)")
	update := flag.String("update", protocol.UpdateGradient, "update kind of the lease (with -inner): gradient or delta")
	kernel := flag.String("kernel", "", "GEMM kernel (nn's names; simd, the wasm SIMD module, under GOOS=js GOARCH=wasm when the runner loaded it); empty: the default")
	flag.Parse()
	if *kernel != "" {
		if err := useKernel(*kernel); err != nil {
			fmt.Fprintln(os.Stderr, "gradprobe: -kernel:", err)
			os.Exit(1)
		}
	}
	var lease *protocol.Lease
	if *inner != "" {
		lease = &protocol.Lease{ID: 1, JobID: "probe", Count: *batch * *steps, BatchSize: *batch, LocalSteps: *steps,
			Inner: protocol.InnerOptimizer{Type: *inner, LR: 0.05}, UpdateKind: *update, Snapshot: protocol.SnapshotGranted}
		if *inner == protocol.InnerAdamW {
			lease.Inner = protocol.InnerOptimizer{Type: *inner, LR: 1e-3, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}
		}
	}
	if err := run(*data, *preset, *batch, lease); err != nil {
		fmt.Fprintln(os.Stderr, "gradprobe:", err)
		os.Exit(1)
	}
}

// tiedModel names charlm-tiny with a tied output layer, the layers of
// gpt-small on the byte text the probe reads.
const tiedModel = "charlm-tiny-tied"

func run(data, preset string, batch int, lease *protocol.Lease) error {
	var spec nn.ModelSpec
	if preset == tiedModel {
		spec = nn.Transformer(nn.TransformerConfig{Context: 32, Width: 32, Blocks: 2, Heads: 2, Vocab: 256, Tied: true})
	} else {
		var err error
		if spec, err = nn.Preset(preset); err != nil {
			return err
		}
	}
	model, err := nn.NewModel(spec)
	if err != nil {
		return err
	}
	params := make([]float32, model.NumParams)
	model.Init(params, 1)
	n := batch
	if lease != nil {
		n = lease.Count
	}
	x := make([]float32, n*model.InputSize)
	labels := make([]int32, n*model.LabelsPerExample)
	if model.LabelsPerExample > 1 {
		textWindows(x, labels, model.InputSize)
	} else {
		train, _, err := dataset.LoadMNIST(data)
		if err != nil {
			return err
		}
		train.Fill(x, labels, 0, n)
	}
	b := newBackend()
	if lease != nil {
		res, err := worker.ComputeLease(b, model, *lease, params, x, labels)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(Output{
			Backend: b.Name(), LossSum: res.LossSum, Correct: res.Correct, Grad: protocol.EncodeFloats(res.Update),
		})
	}
	if err := b.Prepare(model, batch); err != nil {
		return err
	}
	grad := make([]float32, model.NumParams)
	loss, correct, err := b.Gradient(params, x, labels, grad)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(Output{
		Backend: b.Name(), LossSum: loss, Correct: correct, Grad: protocol.EncodeFloats(grad),
	})
}

// text is what sequence models read: bytes of a fixed text.
const text = `It is a truth universally acknowledged, that a single man in possession
of a good fortune, must be in want of a wife. However little known the feelings
or views of such a man may be on his first entering a neighbourhood, this truth
is so well fixed in the minds of the surrounding families, that he is considered
the rightful property of some one or other of their daughters.
`

// textWindows fills x with consecutive windows of t bytes of text and labels
// with the byte after each, as a text data set's examples are.
func textWindows(x []float32, labels []int32, t int) {
	for e := 0; e < len(x)/t; e++ {
		for p := 0; p < t; p++ {
			i := (e*t + p) % (len(text) - 1)
			x[e*t+p] = float32(text[i])
			labels[e*t+p] = int32(text[i+1])
		}
	}
}
