// Command gradprobe computes one gradient of a preset model on a fixed
// batch (the first 64 MNIST training images, parameters from seed 1) with
// the backend a worker of this build would use, and prints it as JSON. The
// browser worker's test builds it natively and for GOOS=js GOARCH=wasm, runs
// the wasm under Node, and compares the two: the browser must compute the
// same numbers as a native worker.
//
//	gradprobe -data DIR -model mnist-mlp
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
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
	preset := flag.String("model", "mnist-mlp", "model preset")
	batch := flag.Int("batch", 64, "examples in the batch")
	flag.Parse()
	if err := run(*data, *preset, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "gradprobe:", err)
		os.Exit(1)
	}
}

func run(data, preset string, batch int) error {
	train, _, err := dataset.LoadMNIST(data)
	if err != nil {
		return err
	}
	spec, err := nn.Preset(preset)
	if err != nil {
		return err
	}
	model, err := nn.NewModel(spec)
	if err != nil {
		return err
	}
	params := make([]float32, model.NumParams)
	model.Init(params, 1)
	x := make([]float32, batch*model.InputSize)
	labels := make([]int32, batch)
	train.Floats(x, 0, batch)
	train.LabelsInt32(labels, 0, batch)
	b := newBackend()
	if err := b.Prepare(model, batch); err != nil {
		return err
	}
	grad := make([]float32, model.NumParams)
	loss, correct, err := b.Gradient(params, x, labels, grad)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(Output{
		Backend: b.Kind() + "/" + b.Name(), LossSum: loss, Correct: correct, Grad: protocol.EncodeFloats(grad),
	})
}
