package worker

import (
	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// task is a lease with its data and base parameters, ready to compute.
// Task buffers are recycled, never reallocated per lease.
type task struct {
	lease  protocol.Lease
	params []float32 // the snapshot at base
	base   int64     // its version: the lease's, or started's for snapshot "latest"
	snap   SnapshotID
	snapMs float64 // time spent downloading its snapshot (link.go), 0 if held already
	x      []float32
	labels []int32
	begun  begun // startahead.go: its start, if it was sent before it computes
	// ref is the reference policy of a learn lease with a KL penalty
	// (shared with the fetcher, read-only), else nil.
	ref []float32
}

// compute runs t on the job's computer (compute.Computer.Compute).
func (jc *jobCtx) compute(t *task) (*protocol.Result, error) {
	return jc.comp.Compute(&compute.Task{Lease: t.lease, Params: t.params, Base: t.base, Snap: t.snap, X: t.x, Labels: t.labels, Reference: t.ref})
}
