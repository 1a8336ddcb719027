package cpu

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/nn"
)

// A worker trains within a memory budget (work --memory-mb, a tab's
// share of the device): a batch whose activations do not fit is computed
// in micro-batches, one after another in each thread's part, and their
// gradients summed weighted by size — gradient accumulation, the same
// mean-loss gradient as one pass up to float32 rounding. Dropout numbers
// each micro-batch's values from its place in the whole batch
// (nn.Workspace.SetFirstExample), so the masks are the whole batch's.
//
// The budget covers the job as the worker holds it: the model's
// parameters in compute.JobCopies copies outside the backend, each part's gradient
// and micro-batch sum, and the workspaces (nn.Model.WorkspaceBytes). The
// data shards, the process and the snapshot cache come on top. Where even
// one example per thread does not fit, fewer threads compute; where one
// example on one thread does not fit, Prepare says so: recomputing
// activations per block instead of keeping them is not implemented. The
// coordinator places a job on a worker that says it splits batches
// (SplitsBatches) by compute.MemoryNeed's micro figure, which is this
// plan's for one thread and one example.
const jobCopies = compute.JobCopies

// SplitsBatches reports that the backend computes a batch that does not
// fit its memory budget in micro-batches (worker.Config: the hello's
// caps say so).
func (b *Backend) SplitsBatches() bool { return true }

// SetMemoryBudget bounds the memory, in bytes, a job may take on this
// backend (see jobCopies); 0 lifts the bound. It applies from the next
// Prepare.
func (b *Backend) SetMemoryBudget(bytes int64) { b.budget = max(bytes, 0) }

// MemoryPlanned returns the bytes the last Prepare planned for the job
// (within the budget, when one is set), and the most examples one pass
// computes at once.
func (b *Backend) MemoryPlanned() (bytes int64, microBatch int) { return b.used, b.micro }

// memoryPlan is how a batch is computed within a budget.
type memoryPlan struct {
	parts, micro int   // threads, and the examples of one pass of each
	bytes        int64 // what the job takes with this plan
	wanted       int64 // what it would take in one pass per thread
	budget       int64
}

func (p memoryPlan) String() string {
	return fmt.Sprintf("memory budget %s: %d thread(s), micro-batches of %d examples, %s (in one pass per thread: %s)",
		mb(p.budget), p.parts, p.micro, mb(p.bytes), mb(p.wanted))
}

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }

// planMemory chooses how many of the threads compute a batch of
// maxBatch and in micro-batches of how many examples: each thread's part
// in one pass when the budget allows (or is 0), else the largest
// micro-batch that fits, else on fewer threads.
func planMemory(m *nn.Model, threads, maxBatch int, budget int64) (memoryPlan, error) {
	params := 4 * int64(m.NumParams)
	cost := func(parts, micro int) int64 {
		c := int64(jobCopies)*params + int64(parts)*m.WorkspaceBytes(micro) + int64(parts-1)*params
		if micro < perPart(maxBatch, parts) {
			c += int64(parts) * params // each part's micro-batch gradient
		}
		return c
	}
	per := perPart(maxBatch, threads)
	p := memoryPlan{parts: threads, micro: per, wanted: cost(threads, per), budget: budget}
	p.bytes = p.wanted
	if budget == 0 || p.wanted <= budget {
		return p, nil
	}
	for parts := threads; parts >= 1; parts-- {
		if cost(parts, 1) > budget {
			continue
		}
		lo, hi := 1, perPart(maxBatch, parts) // cost(parts, lo) fits: find the largest that does
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if cost(parts, mid) <= budget {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		p.parts, p.micro, p.bytes = parts, lo, cost(parts, lo)
		return p, nil
	}
	return p, fmt.Errorf("the model (%d parameters) needs %s to train one example at a time on one thread, over the memory budget of %s: give the worker more memory (--memory-mb) or run a smaller model",
		m.NumParams, mb(cost(1, 1)), mb(budget))
}

// perPart is how many of a batch's n examples each of parts computes.
func perPart(n, parts int) int { return (n + parts - 1) / parts }

// partGradient writes into g the mean-loss gradient of examples lo..hi-1
// of the batch, in micro-batches of at most b.micro, and returns their
// summed loss and hits.
func (b *Backend) partGradient(p *part, params, x []float32, labels []int32, g []float32, lo, hi int, seed uint64) (loss float64, hits int) {
	in, lpe := b.model.InputSize, b.model.LabelsPerExample
	n := hi - lo
	for off := lo; off < hi; off += b.micro {
		end := min(off+b.micro, hi)
		dst := g
		if off > lo {
			dst = p.acc
		}
		p.ws.SetSeed(seed)
		p.ws.SetFirstExample(off)
		l, h := b.model.Gradient(p.ws, params, x[off*in:end*in], labels[off*lpe:end*lpe], dst)
		loss += l
		hits += h
		if end == hi && off == lo {
			break // one pass: g is the mean already
		}
		w := float32(end-off) / float32(n)
		if off == lo {
			for k := range g {
				g[k] *= w
			}
			continue
		}
		for k, v := range dst {
			g[k] += w * v
		}
	}
	return loss, hits
}
