package placement

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Needs is what a job requires of a worker (the spec's `requires`).
type Needs struct {
	Kinds       []string // worker kinds that may run it; empty: any
	MinMemoryMB int      // 0: none beyond the model's own need
	// RL: the job hands out RL leases (rollout and learn), which only a
	// worker that announces them computes; RLLocalSteps: learn leases of
	// local steps (mode diloco), likewise.
	RL, RLLocalSteps bool
}

// Job is what placement knows of a job.
type Job struct {
	ID       string
	Priority int     // higher is served first
	Weight   float64 // share within a priority; > 0
	Needs    Needs
	// NeedMB is the memory a worker needs to train the model (parameters,
	// gradients, optimizer state and the activations of a batch);
	// MicroNeedMB, a worker that computes a batch in micro-batches (one
	// example's activations). 0: as NeedMB.
	NeedMB, MicroNeedMB int
	NumParams           int
	Layers              []string // the layer kinds of its model
	Data                string   // the key of its shards' data set
	Parent              string   // the sweep it is a trial of, "" if none
}

// Worker is what placement knows of a worker.
type Worker struct {
	Kind     string
	MemoryMB int // 0: unknown
	// MicroBatches: it computes a batch that does not fit in
	// micro-batches, so MicroNeedMB is what it needs.
	MicroBatches bool
	MaxParams    int // 0: no limit of its own
	Layers       []string
	Pin          string // a job or sweep id; "" any job
	Current      string // the job it computes for now, "" none
	// Since is when it was moved to Current by this ranking; zero when
	// long ago, or when it landed there only because the jobs ranked
	// before had no task free for it: then it has no stay and goes back
	// as soon as they have.
	Since time.Time
	Data  []string
	// RL: it computes RL leases (hello.caps.rl); RLLocalSteps, learn
	// leases of local steps (hello.caps.rl_local_steps).
	RL, RLLocalSteps bool
}

// Fit returns "" if w can run j, else what is missing, in words for an
// operator (the reason a job waits).
func Fit(w *Worker, j *Job) string {
	if w.Pin != "" && w.Pin != j.ID && w.Pin != j.Parent {
		return "pinned to " + w.Pin
	}
	if len(j.Needs.Kinds) > 0 && !slices.Contains(j.Needs.Kinds, w.Kind) {
		return fmt.Sprintf("kind %s, the job requires %s", w.Kind, strings.Join(j.Needs.Kinds, " or "))
	}
	if j.Needs.RL && !w.RL {
		return fmt.Sprintf("a %s worker that computes no RL leases: the job needs one that does (the native worker, for now)", w.Kind)
	}
	if j.Needs.RLLocalSteps && !w.RLLocalSteps {
		return fmt.Sprintf("a %s worker that computes no learn leases of local steps: the job (mode diloco) needs one that does (update crowdtrain)", w.Kind)
	}
	need := j.NeedMB
	if w.MicroBatches && j.MicroNeedMB > 0 {
		need = j.MicroNeedMB
	}
	need = max(need, j.Needs.MinMemoryMB)
	if j.Needs.MinMemoryMB > 0 && w.MemoryMB == 0 {
		return fmt.Sprintf("memory unknown, the job requires %d MB", need)
	}
	if w.MemoryMB > 0 && w.MemoryMB < need {
		return fmt.Sprintf("%d MB of memory, the job needs %d MB", w.MemoryMB, need)
	}
	if w.MaxParams > 0 && j.NumParams > w.MaxParams {
		return fmt.Sprintf("takes models of up to %d parameters, the job's has %d", w.MaxParams, j.NumParams)
	}
	if len(w.Layers) > 0 {
		for _, l := range j.Layers {
			if !slices.Contains(w.Layers, l) {
				return fmt.Sprintf("its backend has no %s layer", l)
			}
		}
	}
	return ""
}
