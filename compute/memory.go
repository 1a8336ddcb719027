package compute

import "github.com/crowdtrain/crowdtrain/nn"

// JobCopies is how many vectors of the parameters' size a worker holds
// for a job outside its backend: the snapshot, the parameters a lease
// computes from, the update, and the inner steps' parameters, gradient
// and two optimizer moments.
const JobCopies = 6

// MemoryNeed returns the bytes a worker on one thread needs to train m
// with batches of batch: whole, in one pass (the job's copies and
// gradient, and a workspace for the batch); micro, in micro-batches of
// one example, as a CPU worker that splits a batch to fit its memory
// does (a workspace for one example, and a vector more to sum the
// micro-batches' gradients in).
func MemoryNeed(m *nn.Model, batch int) (whole, micro int64) {
	vec := 4 * int64(m.NumParams)
	whole = (JobCopies+1)*vec + m.WorkspaceBytes(batch)
	micro = whole
	if batch > 1 {
		micro = (JobCopies+2)*vec + m.WorkspaceBytes(1)
	}
	return whole, micro
}
