package engine

import "math"

// An honest update can be far above the typical norm. Near convergence
// most batches' gradients are tiny, and a batch holding an example the
// model still gets wrong gives one 20 to 1,800 times the reference. The
// norm gate refuses it and the task goes back to the queue, where every
// worker that takes it computes the same large update again: in two
// endless mnist-mlp jobs at their sixth epoch, 35 tasks were refused
// about 1,500 times each, half of all results, and the reference kept
// falling, since only the small updates were accepted.
//
// So an update over the gate's limit is applied, scaled down to the
// limit, where something else bounds it, the worker has earned it, or a
// second computation agrees:
//   - in async mode with robust aggregation past its warm-up, the clip
//     that comes next bounds any update to the robust radius and has the
//     ones it flags validated (engine.Clipper): the gate refusing more
//     than it must only cost honest work, as the reference fell with
//     the model's fit until most batches were over the limit;
//   - a worker the gate seldom flags (under trustedRefusals of its
//     tasks, smoothed, starting at untrustedStart: a few clean results
//     earn it, in each job it computes for) is taken at its word, as
//     for an update under the limit; a broken worker, flagged at most
//     turns, is not;
//   - otherwise the gate remembers the update, by task, and refuses it.
//     When the task's next result is as large and points the same way
//     (norms within corroborateNormRatio of each other, sketches at a
//     cosine of at least corroborateCosine), two computations agree: it
//     is honest work on a hard batch. The two come from two connections,
//     or from one that computed the task again from another version and
//     is flagged on under brokenRefusals of its tasks: a refused task
//     goes back to the front of the queue, and the worker that was
//     refused often takes it again at once. A broken worker, whose
//     garbage is the same at every version, soon passes that share.
//
// Any worker could send an update just under the limit, so none of these
// buys more than that. None admits an update over outlierMaxOver times
// the limit: the hard batches seen were up to 90 times over it, where a
// worker's broken arithmetic gives 1e30.
const (
	outlierTasks         = 256 // refused tasks remembered, the oldest forgotten first
	outlierMaxOver       = 1e4
	corroborateCosine    = 0.8
	corroborateNormRatio = 2.0
	sketchBuckets        = 128
	trustedRefusals      = 0.25
	brokenRefusals       = 0.4
	refusalDecay         = 0.95 // the weight the older tasks keep
	untrustedStart       = 0.3  // a new worker's share: four clean results bring it under trustedRefusals
	trustWorkers         = 4096
)

// updateSketch is a count sketch of an update: each parameter adds its
// value, with a sign, to one bucket, both from a hash of its index. The
// cosine of two sketches estimates the cosine of the updates, at a
// fixed size whatever the model's.
type updateSketch [sketchBuckets]float64

func sketchOf(u []float32) *updateSketch {
	var s updateSketch
	for i, v := range u {
		h := uint32(i)*0x9E3779B1 + 0x7F4A7C15
		h ^= h >> 15
		h *= 0x2C1B3C6D
		b := h >> (32 - 7) // the top 7 bits pick one of 128 buckets
		if h&1 == 0 {
			s[b] += float64(v)
		} else {
			s[b] -= float64(v)
		}
	}
	return &s
}

// cosine of two sketches; 0 when either is all zeros.
func (s *updateSketch) cosine(o *updateSketch) float64 {
	var dot, a, b float64
	for i := range s {
		dot += s[i] * o[i]
		a += s[i] * s[i]
		b += o[i] * o[i]
	}
	if a == 0 || b == 0 {
		return 0
	}
	return dot / math.Sqrt(a*b)
}

// outlierWitness is the last refused result of a task.
type outlierWitness struct {
	worker string
	base   int64
	norm   float64
	sketch *updateSketch
}

// normOutliers is the gate's memory of refused tasks.
type normOutliers struct {
	byTask map[Task]outlierWitness
	order  []Task // by first refusal, for eviction; may name forgotten tasks
	kept   int64  // updates over the limit let through
	// refusals is each worker's smoothed share of results the gate
	// flagged, kept when it moves to another job and back (a worker id
	// is one connection's), for trustWorkers workers at most.
	refusals map[string]float64
}

// note records whether the gate flagged worker's result: over the
// limit, applied or not.
func (o *normOutliers) note(worker string, refused bool) {
	if o.refusals == nil {
		o.refusals = map[string]float64{}
	}
	r, ok := o.refusals[worker]
	if !ok {
		r = untrustedStart
		for w := range o.refusals {
			if len(o.refusals) < trustWorkers {
				break
			}
			delete(o.refusals, w) // any one: a worker gone, most likely
		}
	}
	x := 0.0
	if refused {
		x = 1
	}
	o.refusals[worker] = refusalDecay*r + (1-refusalDecay)*x
}

// trusted reports whether worker's outliers are taken at its word.
func (o *normOutliers) trusted(worker string) bool {
	r, ok := o.refusals[worker]
	return ok && r < trustedRefusals
}

// admit reports whether an update of norm above the gate's limit,
// computed by worker for task from version base, is applied (scaled to
// the limit). If it is not, it becomes the task's witness.
func (o *normOutliers) admit(task Task, worker string, base int64, norm float64, update []float32) bool {
	if o.byTask == nil {
		o.byTask = map[Task]outlierWitness{}
	}
	w, seen := o.byTask[task]
	retake := seen && w.worker == worker
	sk := sketchOf(update)
	agrees := seen && norm <= corroborateNormRatio*w.norm && w.norm <= corroborateNormRatio*norm &&
		w.sketch.cosine(sk) >= corroborateCosine
	switch {
	case agrees && !retake:
		// Another connection computed it alike: no mark against either.
	case o.trusted(worker):
		if !retake {
			o.note(worker, true)
		}
	case agrees && w.base != base && o.refusals[worker] < brokenRefusals:
		// Its own recomputation from another version; flagged already.
	default:
		if !retake {
			// A worker that takes its own refused task again is flagged
			// once for it, not at every turn, or an honest worker holding
			// a hard batch at the front of the queue would soon look broken.
			o.note(worker, true)
		}
		o.remember(task, outlierWitness{worker: worker, base: base, norm: norm, sketch: sk}, seen)
		return false
	}
	delete(o.byTask, task)
	return true
}

// remember makes w the task's witness; seen says it had one.
func (o *normOutliers) remember(task Task, w outlierWitness, seen bool) {
	if !seen {
		for len(o.byTask) >= outlierTasks {
			delete(o.byTask, o.order[0])
			o.order = o.order[1:]
		}
		if len(o.order) >= 2*outlierTasks { // drop the names of used-up witnesses
			live := o.order[:0]
			for _, t := range o.order {
				if _, ok := o.byTask[t]; ok {
					live = append(live, t)
				}
			}
			o.order = live
		}
		o.order = append(o.order, task)
	}
	o.byTask[task] = w
}
