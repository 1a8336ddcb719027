package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/crowdtrain/crowdtrain/engine/asha"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/store"
)

// A sweep (docs/SCHEDULING.md, Sweeps) runs its trials as jobs of their
// own on the grid, sharing the data's shards. Its controller watches
// them: with ASHA, a trial that reaches a rung is paused, evaluated on the
// held-out set, and resumed or stopped as asha.ASHA decides. The sweep's
// state (its trials, their rung metrics, its best) is its record's spec in
// the store, written at every change, so a restarted coordinator carries
// it on.

// sweepEvery is how often a sweep's controller looks at its trials.
const sweepEvery = 200 * time.Millisecond

// trialRefusals is how many refused results (and 50 times its accepted
// ones) end a trial that does not train. A high rate's first results are
// often refused by the norm gate before it settles: at 200 refusals (20
// times) a trial that reached 92% at its full budget was ended.
const trialRefusals = 2000

// Sweep is a running or finished hyperparameter sweep.
type Sweep struct {
	ID string

	s   *Server
	mu  sync.Mutex
	rec sweepRecord
	// jobs are the trials' jobs, by id.
	jobs  map[string]*Job
	dirty bool
	done  chan struct{}
}

// sweepRecord is what the store keeps of a sweep, as its job record's spec.
type sweepRecord struct {
	SweepRecord int          `json:"sweep_record"` // 1: marks the record as a sweep's
	Spec        jobspec.Spec `json:"spec"`
	State       string       `json:"state"`
	Metric      string       `json:"metric"` // "accuracy" (higher is better) or "loss"
	Trials      []trialInfo  `json:"trials"`
	Best        *SweepBest   `json:"best"`
	CreatedAt   time.Time    `json:"created_at"`
	DoneAt      time.Time    `json:"done_at,omitzero"`
}

// trialInfo is one trial as the sweep records it.
type trialInfo struct {
	ID    string        `json:"id"`
	Name  string        `json:"name"`
	Point jobspec.Point `json:"point"`
	State string        `json:"state"` // asha.Running, Waiting, Stopped, Ended
	Rungs []MetricPoint `json:"rungs"` // its metric at each rung reached
	Final *MetricPoint  `json:"final,omitempty"`
	Note  string        `json:"note,omitempty"`
	// Complete is set when its job ended done (its budget or target),
	// not stopped or failed: only such trials compete for best at the end.
	Complete bool `json:"complete,omitempty"`
}

// MetricPoint is a trial's metric after examples.
type MetricPoint struct {
	Examples int64   `json:"examples"`
	Value    float64 `json:"value"`
}

// SweepBest is the best trial so far and its metric.
type SweepBest struct {
	ID     string  `json:"id"`
	Metric float64 `json:"metric"`
}

// SweepView is a sweep as the API shows it: `trials` lists its trial ids,
// `best` the best so far; trial_details each trial's values, state and
// metric at each rung.
type SweepView struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Kind         string          `json:"kind"` // "sweep"
	State        string          `json:"state"`
	Method       string          `json:"method"`
	Metric       string          `json:"metric"`
	Trials       []string        `json:"trials"`
	Best         *SweepBest      `json:"best"`
	ExamplesSeen int64           `json:"examples_seen"` // all trials' together
	Sweep        *jobspec.Sweep  `json:"sweep"`
	Details      []TrialView     `json:"trial_details"`
	CreatedAt    time.Time       `json:"created_at"`
	DoneAt       *time.Time      `json:"done_at,omitempty"`
	Spec         json.RawMessage `json:"spec"`
}

// TrialView is one trial of a SweepView.
type TrialView struct {
	ID           string         `json:"id"`
	Name         string         `json:"name"`
	Point        map[string]any `json:"point"`
	State        string         `json:"state"`     // the sweep's: running, waiting, stopped, ended
	JobState     string         `json:"job_state"` // the trial job's
	ExamplesSeen int64          `json:"examples_seen"`
	Rungs        []MetricPoint  `json:"rungs"`
	Final        *MetricPoint   `json:"final,omitempty"`
	Note         string         `json:"note,omitempty"`
}

// AddSweep starts the sweep spec describes: every trial's spec is made
// and checked first (a value a key cannot take is an error naming its
// path), then each trial starts as a job.
func (s *Server) AddSweep(spec jobspec.Spec) (*Sweep, error) {
	sw := spec.Sweep
	if sw == nil {
		return nil, errors.New("coordinator: AddSweep needs a spec with a sweep key")
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	id := fmt.Sprintf("%s-%08x", idSafe(spec.Name), rand.Uint32())
	points := sw.Points(spec.Seed)
	var trials []jobspec.Spec
	for i, p := range points {
		t, err := sw.TrialSpec(fmt.Sprintf("%s-t%d", spec.Name, i+1), p)
		if err == nil {
			err = s.resolveData(&t)
		}
		if err == nil {
			err = PrepareTokenizer(&t)
		}
		if err == nil {
			train, _, derr := s.data.get(t)
			if err = derr; err == nil {
				err = CheckData(&t, train)
			}
		}
		if err == nil && t.Init != nil {
			// Every trial's init fits its model, or nothing starts.
			model, merr := nn.NewModel(t.Model)
			if err = merr; err == nil {
				_, err = s.initParams(context.Background(), &t, model)
			}
		}
		if err != nil {
			return nil, err
		}
		trials = append(trials, t)
	}
	x := &Sweep{ID: id, s: s, jobs: map[string]*Job{}, done: make(chan struct{})}
	x.rec = sweepRecord{SweepRecord: 1, Spec: spec, State: StateRunning, Metric: "accuracy", CreatedAt: time.Now().UTC()}
	if spec.TextModel() {
		x.rec.Metric = "loss"
	}
	if db := s.cfg.Store; db != nil {
		b, err := json.Marshal(x.rec)
		if err != nil {
			return nil, err
		}
		if err := db.CreateJob(context.Background(), store.JobRecord{ID: id, Name: spec.Name, Spec: b, State: StateRunning,
			CreatedAt: x.rec.CreatedAt, Incarnation: 1}); err != nil {
			return nil, fmt.Errorf("saving sweep %s: %w", id, err)
		}
	}
	for i, t := range trials {
		j, err := s.addJob(t, id)
		if err != nil {
			x.mu.Lock()
			x.dirty = true
			x.mu.Unlock()
			s.startSweep(x)
			return x, fmt.Errorf("sweep %s: trial %d: %w (the trials before it run)", id, i+1, err)
		}
		x.mu.Lock()
		x.rec.Trials = append(x.rec.Trials, trialInfo{ID: j.ID, Name: t.Name, Point: points[i], State: asha.Running})
		x.jobs[j.ID] = j
		x.dirty = true
		x.mu.Unlock()
	}
	// The trial list is durable before the sweep is reported started: a
	// coordinator that dies after the answer resumes the whole sweep.
	err := x.save(context.Background())
	s.startSweep(x) // retries a failed save
	if err != nil {
		return x, fmt.Errorf("sweep %s started, but its trial list is not saved yet (retrying; a restart before it succeeds loses the sweep's link to its trials): %w", id, err)
	}
	s.cfg.Logf("sweep %s (%q): %d trials (%s over %d keys), ASHA %v", id, spec.Name, len(trials), sw.Method, len(sw.Space), sw.ASHA != nil)
	return x, nil
}

// startSweep registers x and starts its controller.
func (s *Server) startSweep(x *Sweep) {
	s.mu.Lock()
	s.sweeps = append(s.sweeps, x)
	s.mu.Unlock()
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		x.control(s.loopCtx)
	}()
}

func (s *Server) sweep(id string) *Sweep {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.sweeps {
		if x.ID == id {
			return x
		}
	}
	return nil
}

// Sweeps returns every sweep as the API shows it, oldest first.
func (s *Server) Sweeps(ctx context.Context) []SweepView {
	s.mu.Lock()
	list := slices.Clone(s.sweeps)
	s.mu.Unlock()
	out := make([]SweepView, 0, len(list))
	for _, x := range list {
		out = append(out, x.View(ctx))
	}
	return out
}

// asha is the sweep's rule, nil without one.
func (x *Sweep) asha() *asha.ASHA {
	a := x.rec.Spec.Sweep.ASHA
	if a == nil {
		return nil
	}
	return &asha.ASHA{Rungs: a.Rungs, Reduction: a.Reduction, Maximize: x.rec.Metric == "accuracy"}
}

// control runs the sweep until it is done or ctx ends.
func (x *Sweep) control(ctx context.Context) {
	defer close(x.done)
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		finished := x.step(ctx)
		_ = x.save(ctx) // logged; retried at the next step
		if finished {
			return
		}
		select {
		case <-ctx.Done():
			_ = x.save(context.Background()) // the store outlives the loops
			return
		case <-tick.C:
		}
	}
}

// step looks at every trial once: pauses and scores those at a rung,
// records those that ended, applies ASHA's decisions. It reports whether
// the sweep is done.
func (x *Sweep) step(ctx context.Context) bool {
	x.mu.Lock()
	if x.rec.State != StateRunning {
		x.mu.Unlock()
		return true
	}
	trials := slices.Clone(x.rec.Trials)
	jobs := maps.Clone(x.jobs)
	x.mu.Unlock()
	rule := x.asha()
	for i := range trials {
		t := &trials[i]
		if t.State == asha.Stopped || t.State == asha.Ended {
			continue
		}
		j := jobs[t.ID]
		if j == nil {
			t.State, t.Note = asha.Ended, "its job is gone"
			continue
		}
		v, err := x.s.jobViewOnly(ctx, j)
		if err != nil {
			return false
		}
		switch {
		case ended(v.State):
			if m, ok := x.score(ctx, j); ok {
				t.Final = &MetricPoint{Examples: v.ExamplesSeen, Value: m}
			}
			t.State, t.Note, t.Complete = asha.Ended, v.Reason, v.State == StateDone
		case t.State == asha.Waiting:
		case v.State == StateRunning && v.UpdatesRejected >= trialRefusals && v.UpdatesRejected > 50*v.UpdatesApplied:
			// Its model refuses nearly every result (a rate that blew it
			// up short of non-finite values): it would never reach a rung.
			note := fmt.Sprintf("stopped: %d of its %d results were refused (%v); its values do not train", v.UpdatesRejected,
				v.UpdatesRejected+v.UpdatesApplied, v.Rejections)
			if _, err := x.s.StopJob(ctx, t.ID); err == nil || errors.Is(err, ErrTransition) {
				t.State, t.Note = asha.Ended, note
				if m, ok := x.score(ctx, j); ok {
					t.Final = &MetricPoint{Examples: v.ExamplesSeen, Value: m}
				}
			}
		case v.State == StateRunning && rule != nil:
			if r, ok := rule.Next(len(t.Rungs)); ok && v.ExamplesSeen >= r {
				if _, err := x.s.PauseJob(ctx, j.ID); err != nil {
					continue // it ended meanwhile: the next step sees it
				}
				m, _ := x.score(ctx, j)
				t.Rungs = append(t.Rungs, MetricPoint{Examples: v.ExamplesSeen, Value: m})
				t.State = asha.Waiting
				x.s.cfg.Logf("sweep %s: trial %s at rung %d (%d examples): %s %.4f", x.ID, t.ID, len(t.Rungs), v.ExamplesSeen, x.rec.Metric, m)
			}
		}
	}
	if rule != nil {
		var st []asha.Trial
		for _, t := range trials {
			ms := make([]float64, len(t.Rungs))
			for k, p := range t.Rungs {
				ms[k] = p.Value
			}
			st = append(st, asha.Trial{ID: t.ID, State: t.State, Metrics: ms})
		}
		promote, stop := rule.Decide(st)
		for i := range trials {
			t := &trials[i]
			switch {
			case slices.Contains(promote, t.ID):
				if _, err := x.s.ResumeJob(ctx, t.ID); err == nil {
					t.State = asha.Running
				}
			case slices.Contains(stop, t.ID):
				k := len(t.Rungs)
				note := fmt.Sprintf("stopped by ASHA at rung %d: %s %.4f is not in the best 1/%g", k, x.rec.Metric, t.Rungs[k-1].Value, rule.Reduction)
				if _, err := x.s.StopJob(ctx, t.ID); err == nil || errors.Is(err, ErrTransition) {
					t.State, t.Note = asha.Stopped, note
				}
			}
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.rec.Trials = trials
	x.rec.Best = x.best()
	x.dirty = true
	done := true
	for _, t := range trials {
		done = done && (t.State == asha.Stopped || t.State == asha.Ended)
	}
	if done && len(trials) > 0 {
		x.rec.State, x.rec.DoneAt = StateDone, time.Now().UTC()
		x.s.cfg.Logf("sweep %s: done; best %+v", x.ID, x.rec.Best)
	}
	return done
}

// score evaluates j's parameters now on its held-out set: accuracy, or
// loss for text.
func (x *Sweep) score(ctx context.Context, j *Job) (float64, bool) {
	params, _, err := j.currentParams(ctx)
	if err != nil {
		return math.NaN(), false
	}
	acc, loss := evaluate(j.model, params, j.test)
	if x.rec.Metric == "loss" {
		return loss, true
	}
	return acc, true
}

// best is the best trial: of those that ran to their end, the best final
// metric; before any has, the best metric at the furthest rung reached.
// Call with mu held.
func (x *Sweep) best() *SweepBest {
	maximize := x.rec.Metric == "accuracy"
	better := func(a, b float64) bool {
		if math.IsNaN(b) {
			return !math.IsNaN(a)
		}
		if maximize {
			return a > b
		}
		return a < b
	}
	var b *SweepBest
	for _, t := range x.rec.Trials {
		if t.Final != nil && t.Complete && (b == nil || better(t.Final.Value, b.Metric)) {
			b = &SweepBest{ID: t.ID, Metric: t.Final.Value}
		}
	}
	if b != nil {
		return b
	}
	furthest := 0
	for _, t := range x.rec.Trials {
		furthest = max(furthest, len(t.Rungs))
	}
	for _, t := range x.rec.Trials {
		if furthest > 0 && len(t.Rungs) == furthest {
			if m := t.Rungs[furthest-1].Value; b == nil || better(m, b.Metric) {
				b = &SweepBest{ID: t.ID, Metric: m}
			}
		}
	}
	return b
}

// save writes the sweep's record if it changed; a failed write is logged,
// returned, and tried again at the next step.
func (x *Sweep) save(ctx context.Context) error {
	db := x.s.cfg.Store
	x.mu.Lock()
	if db == nil || !x.dirty {
		x.mu.Unlock()
		return nil
	}
	b, err := json.Marshal(x.rec)
	state, doneAt := x.rec.State, x.rec.DoneAt
	x.dirty = false
	x.mu.Unlock()
	if err == nil {
		err = db.UpdateJobSpec(ctx, x.ID, b)
	}
	if err == nil && state != StateRunning {
		reason := ""
		if x.rec.Best != nil {
			reason = "best trial " + x.rec.Best.ID
		}
		err = db.UpdateJobState(ctx, x.ID, state, reason, doneAt)
	}
	if err != nil {
		x.s.cfg.Logf("sweep %s: saving its state: %v; trying again", x.ID, err)
		x.mu.Lock()
		x.dirty = true
		x.mu.Unlock()
	}
	return err
}

// View is the sweep as the API shows it.
func (x *Sweep) View(ctx context.Context) SweepView {
	x.mu.Lock()
	rec := x.rec
	rec.Trials = slices.Clone(x.rec.Trials)
	jobs := maps.Clone(x.jobs)
	x.mu.Unlock()
	spec, _ := json.Marshal(rec.Spec)
	v := SweepView{ID: x.ID, Name: rec.Spec.Name, Kind: "sweep", State: rec.State, Method: rec.Spec.Sweep.Method,
		Metric: rec.Metric, Trials: []string{}, Best: rec.Best, Sweep: rec.Spec.Sweep, CreatedAt: rec.CreatedAt, Spec: spec}
	if !rec.DoneAt.IsZero() {
		t := rec.DoneAt
		v.DoneAt = &t
	}
	for _, t := range rec.Trials {
		tv := TrialView{ID: t.ID, Name: t.Name, Point: t.Point, State: t.State, Rungs: t.Rungs, Final: t.Final, Note: t.Note}
		if tv.Rungs == nil {
			tv.Rungs = []MetricPoint{}
		}
		if j := jobs[t.ID]; j != nil {
			if jv, err := x.s.jobViewOnly(ctx, j); err == nil {
				tv.JobState, tv.ExamplesSeen = jv.State, jv.ExamplesSeen
			}
		}
		v.ExamplesSeen += tv.ExamplesSeen
		v.Trials = append(v.Trials, t.ID)
		v.Details = append(v.Details, tv)
	}
	return v
}

// jobViewOnly is the job's view without the server's counts.
func (s *Server) jobViewOnly(ctx context.Context, j *Job) (JobView, error) {
	var v JobView
	err := j.exec(ctx, func(st *jobState) { v = j.view(st) })
	return v, err
}

// resumeSweep loads a sweep's record back, its trials among jobs.
func (s *Server) resumeSweep(id string, rec sweepRecord, jobs map[string]*Job) {
	x := &Sweep{ID: id, s: s, rec: rec, jobs: map[string]*Job{}, done: make(chan struct{})}
	if x.rec.Spec.Sweep == nil {
		s.cfg.Logf("sweep %s: its record has no sweep spec; not resumed", id)
		return
	}
	for _, t := range rec.Trials {
		if j := jobs[t.ID]; j != nil {
			x.jobs[t.ID] = j
			j.parent = id
			j.place.Store(j.placeInfo(j.Spec))
		}
	}
	if rec.State == StateRunning && len(rec.Trials) == 0 {
		// Killed after the record was made, before its trials were: the
		// trials that started run on as jobs of their own.
		x.rec.State, x.rec.DoneAt, x.dirty = StateFailed, time.Now().UTC(), true
		s.cfg.Logf("sweep %s (%q): the coordinator stopped before its trials were recorded; marked failed (any trial that started runs on as a job of its own)", id, rec.Spec.Name)
	}
	if x.rec.State == StateRunning {
		x.reconcile(context.Background())
		s.cfg.Logf("sweep %s (%q): resumed with %d trials", id, rec.Spec.Name, len(rec.Trials))
	}
	s.startSweep(x)
}

// reconcile makes each trial's job agree with the sweep's record after a
// restart: the record is written after each pause, resume and stop, and
// a kill between the two leaves the job's last durable state behind the
// record's (a trial promoted in the record whose job is still paused
// would wait for ever). A trial running in the record is resumed, one
// waiting at a rung is paused, one the sweep stopped is stopped.
func (x *Sweep) reconcile(ctx context.Context) {
	for _, t := range x.rec.Trials {
		j := x.jobs[t.ID]
		if j == nil {
			continue
		}
		v, err := x.s.jobViewOnly(ctx, j)
		if err != nil || ended(v.State) {
			continue
		}
		var what string
		switch {
		case t.State == asha.Running && v.State == StatePaused:
			_, err = x.s.ResumeJob(ctx, t.ID)
			what = "resumed"
		case t.State == asha.Waiting && v.State == StateRunning:
			_, err = x.s.PauseJob(ctx, t.ID)
			what = "paused at its rung"
		case t.State == asha.Stopped || t.State == asha.Ended:
			_, err = x.s.StopJob(ctx, t.ID)
			what = "stopped"
		default:
			continue
		}
		if err != nil {
			x.s.cfg.Logf("sweep %s: trial %s: %v", x.ID, t.ID, err)
			continue
		}
		x.s.cfg.Logf("sweep %s: trial %s %s, as the sweep's record says", x.ID, t.ID, what)
	}
}

// bestOf is the best trial of sweep id, for exports; "" and false when id
// is no sweep, an error when it is one with no best yet.
func (s *Server) bestOf(id string) (string, bool, error) {
	x := s.sweep(id)
	if x == nil {
		return "", false, nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.rec.Best == nil {
		return "", true, fmt.Errorf("sweep %s has no scored trial yet: export it after its first rung, or export a trial by its id", id)
	}
	return x.rec.Best.ID, true, nil
}
