package protocol

import "fmt"

// Caps is what a worker can run, sent in hello: the coordinator places
// it only on jobs that fit (docs/PROTOCOL.md, Jobs).
type Caps struct {
	// MemoryMB is the memory the worker may spend on a job: a browser
	// tab's share of the device, a native worker's free memory or a
	// GPU's. 0: unknown.
	MemoryMB int `msgpack:"memory_mb,omitempty"`
	// MaxParams is the largest model, in parameters, the worker takes; 0:
	// no limit of its own.
	MaxParams int `msgpack:"max_params,omitempty"`
	// Layers are the layer kinds its backend computes; empty: every kind
	// this protocol version knows.
	Layers []string `msgpack:"layers,omitempty"`
	// FLOPS is its measured speed, floating-point operations a second;
	// 0: not measured.
	FLOPS float64 `msgpack:"flops,omitempty"`
	// MicroBatches says the worker computes a batch that does not fit
	// MemoryMB in micro-batches (gradient accumulation): a job fits it
	// if one example at a time does.
	MicroBatches bool `msgpack:"micro_batches,omitempty"`
	// Data names the data sets whose shards it holds already (the keys
	// in shard URLs, /api/v1/data/KEY/...), which count in the choice of
	// its job.
	Data []string `msgpack:"data,omitempty"`
	// RL says the worker computes RL jobs' rollout and learn leases
	// (rl.go); only such workers are given them.
	RL bool `msgpack:"rl,omitempty"`
	// RLLocalSteps says it computes a learn lease's local steps
	// (LearnTask.Steps above 1, an RL job in mode diloco); only such
	// workers are given those jobs.
	RLLocalSteps bool `msgpack:"rl_local_steps,omitempty"`
}

// Bounds on Caps.
const (
	maxCapLayers = 64
	maxCapData   = 64
)

func (c *Caps) validate() error {
	switch {
	case c.MemoryMB < 0 || c.MemoryMB > 1<<30:
		return invalid(TypeHello, "caps.memory_mb", "%d is outside 0..%d", c.MemoryMB, 1<<30)
	case c.MaxParams < 0:
		return invalid(TypeHello, "caps.max_params", "must not be negative, got %d", c.MaxParams)
	case !finite(c.FLOPS) || c.FLOPS < 0:
		return invalid(TypeHello, "caps.flops", "must be a finite number >= 0, got %v", c.FLOPS)
	case len(c.Layers) > maxCapLayers:
		return invalid(TypeHello, "caps.layers", "%d kinds, at most %d allowed", len(c.Layers), maxCapLayers)
	case len(c.Data) > maxCapData:
		return invalid(TypeHello, "caps.data", "%d data sets, at most %d allowed", len(c.Data), maxCapData)
	}
	for i, l := range c.Layers {
		if err := checkText(TypeHello, fmt.Sprintf("caps.layers[%d]", i), l, MaxShortText, true); err != nil {
			return err
		}
	}
	for i, d := range c.Data {
		if err := checkText(TypeHello, fmt.Sprintf("caps.data[%d]", i), d, MaxShortText, true); err != nil {
			return err
		}
	}
	return nil
}

// Assign tells a worker the job its next leases are for: the coordinator
// sends it before the first lease of a job the connection has not been
// computing for (and again after another job's). Leases name their job;
// a worker keeps what it needs to compute for the jobs it holds leases
// of, so the leases it holds of the previous job still count.
type Assign struct {
	Job    JobInfo `msgpack:"job"`
	Limits Limits  `msgpack:"limits"`
}

// Revoke says a job's leases are void (it was paused, finished or
// failed): the worker drops those it has not finished and asks for work
// again, which the coordinator places on another job.
type Revoke struct {
	JobID  string `msgpack:"job_id"`
	Reason string `msgpack:"reason"`
}

func (m *Assign) Validate() error { return validateJob(TypeAssign, &m.Job, m.Limits) }

func (m *Revoke) Validate() error {
	if err := checkText(TypeRevoke, "job_id", m.JobID, MaxShortText, true); err != nil {
		return err
	}
	return checkText(TypeRevoke, "reason", m.Reason, maxLongText, false)
}

// validateJob checks a job and its limits as welcome and assign carry them.
func validateJob(t Type, j *JobInfo, l Limits) error {
	if err := checkText(t, "job.id", j.ID, MaxShortText, true); err != nil {
		return err
	}
	if j.NumParams < 1 {
		return invalid(t, "job.num_params", "must be positive, got %d", j.NumParams)
	}
	if l.MaxMessageBytes < 1 || l.LeaseTimeoutMs < 1 || l.MaxLeases < 1 {
		return invalid(t, "limits", "every limit must be positive, got %+v", l)
	}
	return nil
}
