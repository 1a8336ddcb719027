package worker

import (
	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// The computation of a lease lives in package compute, which the
// coordinator shares to recompute disputed spot checks; the worker kinds
// name its types through these.
type (
	// Backend computes gradients for one worker (compute.Backend).
	Backend = compute.Backend
	// Seeder takes a lease's dropout seed (compute.Seeder).
	Seeder = compute.Seeder
	// Stepper runs a whole lease on its device (compute.Stepper).
	Stepper = compute.Stepper
	// SnapshotID identifies a Stepper's parameters (compute.SnapshotID).
	SnapshotID = compute.SnapshotID
	// InnerSteps is a lease's local steps (compute.InnerSteps).
	InnerSteps = compute.InnerSteps
)

// DropoutSeed is the dropout seed of a lease's first inner step
// (compute.DropoutSeed).
func DropoutSeed(l protocol.Lease) uint64 { return compute.DropoutSeed(l) }

// ComputeLease runs lease l on b as a worker would (compute.Lease).
func ComputeLease(b Backend, m *nn.Model, l protocol.Lease, params, x []float32, labels []int32) (*protocol.Result, error) {
	return compute.Lease(b, m, l, params, x, labels)
}
