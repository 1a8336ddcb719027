package worker

import (
	"testing"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/nn"
)

// refBackend is the pinned one-thread backend the worker's tests compute
// with.
type refBackend = compute.Reference

func smallModel(t *testing.T) *nn.Model {
	m, err := nn.NewModel(nn.ModelSpec{Input: []int{1, 4, 4}, Layers: []nn.LayerSpec{
		{Type: "dense", Units: 8}, {Type: "relu"}, {Type: "dense", Units: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
