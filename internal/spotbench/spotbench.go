package spotbench

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// Plan is what every backend computes.
type Plan struct {
	Model string `json:"model"` // a preset
	// Dropout, when set, puts a dropout layer of this rate after every
	// GELU of the model (charlm-tiny's MLP blocks), so that masks matter.
	Dropout   float64 `json:"dropout,omitempty"`
	Snapshots int     `json:"snapshots"`
	Tasks     []Task  `json:"tasks"`
}

// ModelSpec is the plan's model.
func (p *Plan) ModelSpec() (nn.ModelSpec, error) {
	spec, err := nn.Preset(p.Model)
	if err != nil || p.Dropout == 0 {
		return spec, err
	}
	spec.Layers = withDropout(spec.Layers, p.Dropout)
	return spec, nil
}

func withDropout(ls []nn.LayerSpec, rate float64) []nn.LayerSpec {
	var out []nn.LayerSpec
	for _, l := range ls {
		if len(l.Layers) > 0 {
			l.Layers = withDropout(l.Layers, rate)
		}
		out = append(out, l)
		if l.Type == nn.TypeGELU {
			out = append(out, nn.LayerSpec{Type: nn.TypeDropout, Rate: rate})
		}
	}
	return out
}

// Task is one lease: its id (the dropout seed), snapshot, first example
// and the job mode whose lease settings it takes.
type Task struct {
	ID       uint64 `json:"id"`
	Snapshot int    `json:"snapshot"`
	Start    int    `json:"start"`
	Mode     string `json:"mode"` // async or diloco
}

// Lease is the lease t stands for, with the preset job's settings in
// t's mode.
func (p *Plan) Lease(t Task) (protocol.Lease, error) {
	s, err := jobspec.Parse([]byte(fmt.Sprintf("name: bench\nmodel: %s\nmode: %s\n", p.Model, t.Mode)))
	if err != nil {
		return protocol.Lease{}, err
	}
	in := s.InnerOptimizer
	return protocol.Lease{
		ID: t.ID, JobID: "spotbench", Start: t.Start, Count: s.BatchSize * s.LocalSteps, BatchSize: s.BatchSize,
		LocalSteps: s.LocalSteps, UpdateKind: s.UpdateKind(), Snapshot: protocol.SnapshotGranted, BaseVersion: int64(t.Snapshot),
		Inner: protocol.InnerOptimizer{Type: in.Type, LR: float32(in.LR), WeightDecay: float32(in.WeightDecay),
			Beta1: float32(in.Beta1), Beta2: float32(in.Beta2), Epsilon: float32(in.Epsilon), ClipNorm: float32(in.ClipNorm)},
	}, nil
}

// SnapshotPath is where snapshot s of a plan in dir is kept.
func SnapshotPath(dir string, s int) string {
	return filepath.Join(dir, fmt.Sprintf("snapshot-%d.f32", s))
}

// PlanPath is where the plan in dir is kept.
func PlanPath(dir string) string { return filepath.Join(dir, "plan.json") }

// Save writes the plan to dir.
func (p *Plan) Save(dir string) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return os.WriteFile(PlanPath(dir), b, 0o644)
}

// Load reads the plan in dir.
func Load(dir string) (*Plan, error) {
	b, err := os.ReadFile(PlanPath(dir))
	if err != nil {
		return nil, err
	}
	p := &Plan{}
	return p, json.Unmarshal(b, p)
}

// Computer computes a plan's tasks with one backend.
type Computer struct {
	Plan    *Plan
	Model   *nn.Model
	Backend worker.Backend
	train   *dataset.Set
	snaps   [][]float32
}

// NewComputer loads the data, the model and the plan's snapshots from dir.
func NewComputer(dir, data string, p *Plan, b worker.Backend) (*Computer, error) {
	spec, err := p.ModelSpec()
	if err != nil {
		return nil, err
	}
	m, err := nn.NewModel(spec)
	if err != nil {
		return nil, err
	}
	c := &Computer{Plan: p, Model: m, Backend: b}
	if m.LabelsPerExample == 1 {
		if c.train, _, err = dataset.LoadMNIST(data); err != nil {
			return nil, err
		}
	}
	for s := range p.Snapshots {
		body, err := os.ReadFile(SnapshotPath(dir, s))
		if err != nil {
			return nil, err
		}
		params := make([]float32, m.NumParams)
		if err := protocol.DecodeFloatsInto(params, body); err != nil {
			return nil, fmt.Errorf("snapshot %d: %w", s, err)
		}
		c.snaps = append(c.snaps, params)
	}
	return c, nil
}

// Compute returns task t's update.
func (c *Computer) Compute(t Task) ([]float32, error) {
	l, err := c.Plan.Lease(t)
	if err != nil {
		return nil, err
	}
	x := make([]float32, l.Count*c.Model.InputSize)
	labels := make([]int32, l.Count*c.Model.LabelsPerExample)
	if c.train != nil {
		c.train.Fill(x, labels, t.Start%(c.train.N-l.Count), l.Count)
	} else {
		TextWindows(x, labels, c.Model.InputSize, t.Start)
	}
	res, err := worker.ComputeLease(c.Backend, c.Model, l, c.snaps[t.Snapshot], x, labels)
	if err != nil {
		return nil, err
	}
	return res.Update, nil
}

// WriteUpdate writes u as little-endian float32s.
func WriteUpdate(w io.Writer, u []float32) error {
	b := make([]byte, 4*len(u))
	for i, v := range u {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	_, err := w.Write(b)
	return err
}

// ReadUpdate reads len(u) float32s into u.
func ReadUpdate(r io.Reader, u []float32) error {
	b := make([]byte, 4*len(u))
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	for i := range u {
		u[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}

// TextWindows fills x and labels with windows of t bytes of a fixed text
// (and the next byte of each position), the first at byte start.
func TextWindows(x []float32, labels []int32, t, start int) {
	for e := 0; e < len(x)/t; e++ {
		for p := 0; p < t; p++ {
			i := (start + e*t + p) % (len(text) - 1)
			x[e*t+p] = float32(text[i])
			labels[e*t+p] = int32(text[i+1])
		}
	}
}

const text = `It is a truth universally acknowledged, that a single man in possession
of a good fortune, must be in want of a wife. However little known the feelings
or views of such a man may be on his first entering a neighbourhood, this truth
is so well fixed in the minds of the surrounding families, that he is considered
the rightful property of some one or other of their daughters. "My dear Mr. Bennet,"
said his lady to him one day, "have you heard that Netherfield Park is let at last?"
Mr. Bennet replied that he had not. "But it is," returned she; "for Mrs. Long has
just been here, and she told me all about it." Mr. Bennet made no answer.`
