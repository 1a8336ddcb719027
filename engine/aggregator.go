package engine

import (
	"fmt"
	"time"
)

// Contribution is an accepted-so-far result offered to an Aggregator: its
// update (the Aggregator must copy what it keeps: the vector belongs to
// the caller once Offer returns), the round its lease belongs to, and how
// many versions the model moved since its base.
type Contribution struct {
	Update    []float32
	Round     uint64
	Staleness int64
	Examples  int
}

// Decision is what an Aggregator made of a Contribution. A rejection has
// a Reason (the protocol's words: "stale", "late") and a Detail for people.
type Decision struct {
	Accepted bool
	Reason   string
	Detail   string
}

// Rejection reasons an Aggregator gives.
const (
	ReasonStale = "stale"
	ReasonLate  = "late"
)

// Step is what the model's optimizer applies: the (averaged) update, with
// the rate scaled by Scale.
type Step struct {
	Update []float32
	Scale  float32
	// Results is how many contributions the step holds; Round is the
	// round it closes (0 for the asynchronous rules).
	Results int
	Round   uint64
}

// Aggregator decides what accepted results do to the model.
type Aggregator interface {
	// Lease asks whether a new lease may be granted now and which round
	// it belongs to. Round rules hand out round_size+backup_workers
	// leases per round.
	Lease(now time.Time) (round uint64, ok bool)
	// Unlease says a lease of round was given back without a result
	// (expired, released, its worker left), so another may take its place.
	Unlease(round uint64)
	// Offer decides about one result. An accepted one is held until Ready
	// says a step is due.
	Offer(c Contribution) Decision
	// Ready returns the step due at now, if one is, and starts the next
	// round. The step's vector is valid until the next Offer.
	Ready(now time.Time) (Step, bool)
	// Partial is the state a checkpoint keeps (a round in progress);
	// Restore puts it back.
	Partial() Partial
	Restore(p Partial) error
}

// Partial is an Aggregator's checkpointed state: the round number and the
// sum of the results accepted in it so far.
type Partial struct {
	Round   uint64    `json:"round"`
	Results int       `json:"results"`
	Sum     []float32 `json:"-"` // stored beside the parameters, as float32s
}

// Async is today's rule (DOWNPOUR): every accepted result is one step,
// bounded by staleness. It also serves asynchronous DiLoCo, whose outer
// optimizer (Delayed Nesterov) does the rest.
type Async struct {
	MaxStaleness int
	// InverseStaleness scales a result's step by 1/(1+staleness).
	InverseStaleness bool

	pending   []float32
	has       bool
	staleness int64
}

func (a *Async) Lease(time.Time) (uint64, bool) { return 0, true }
func (a *Async) Unlease(uint64)                 {}

func (a *Async) Offer(c Contribution) Decision {
	if c.Staleness > int64(a.MaxStaleness) {
		return Decision{Reason: ReasonStale, Detail: fmt.Sprintf("staleness %d > max_staleness %d: fetch a newer snapshot", c.Staleness, a.MaxStaleness)}
	}
	// Applied at once by Ready, before the caller's vector changes.
	a.pending, a.has, a.staleness = c.Update, true, c.Staleness
	return Decision{Accepted: true}
}

func (a *Async) Ready(time.Time) (Step, bool) {
	if !a.has {
		return Step{}, false
	}
	s := Step{Update: a.pending, Scale: 1, Results: 1}
	if a.InverseStaleness {
		s.Scale = 1 / float32(1+a.staleness)
	}
	a.pending, a.has = nil, false
	return s, true
}

func (a *Async) Partial() Partial { return Partial{} }

func (a *Async) Restore(p Partial) error {
	if p.Results != 0 {
		return fmt.Errorf("an asynchronous job holds no partial round, the checkpoint has %d results", p.Results)
	}
	return nil
}

// Rounds is the synchronous rule of sync and DiLoCo: a round leases Size
// tasks plus Backups, all from the same version, closes on the first Size
// results (or, with at least one, when Timeout has passed since its first
// lease), and steps once on their mean. Results of a closed round are
// rejected as late.
type Rounds struct {
	Size, Backups int
	Timeout       time.Duration

	round   uint64
	leased  int
	opened  time.Time // the round's first lease; zero before it
	results int
	sum     []float32
	mean    []float32
}

// NewRounds returns a Rounds rule for vectors of n values.
func NewRounds(size, backups int, timeout time.Duration, n int) *Rounds {
	return &Rounds{Size: size, Backups: backups, Timeout: timeout, round: 1, sum: make([]float32, n), mean: make([]float32, n)}
}

// Round is the round open now.
func (r *Rounds) Round() uint64 { return r.round }

func (r *Rounds) Lease(now time.Time) (uint64, bool) {
	if r.leased >= r.Size+r.Backups {
		return r.round, false
	}
	r.leased++
	if r.opened.IsZero() {
		r.opened = now
	}
	return r.round, true
}

func (r *Rounds) Unlease(round uint64) {
	if round == r.round && r.leased > 0 {
		r.leased--
	}
}

func (r *Rounds) Offer(c Contribution) Decision {
	if c.Round != r.round || r.results >= r.Size {
		return Decision{Reason: ReasonLate, Detail: fmt.Sprintf("round %d closed before this result arrived (round %d is open)", c.Round, r.round)}
	}
	if len(c.Update) != len(r.sum) {
		panic(fmt.Sprintf("engine: Rounds.Offer: update has %d values, want %d", len(c.Update), len(r.sum)))
	}
	for i, v := range c.Update {
		r.sum[i] += v
	}
	r.results++
	return Decision{Accepted: true}
}

func (r *Rounds) Ready(now time.Time) (Step, bool) {
	full := r.results >= r.Size
	timedOut := r.results > 0 && !r.opened.IsZero() && now.Sub(r.opened) >= r.Timeout
	if !full && !timedOut {
		return Step{}, false
	}
	return r.close(), true
}

// Flush closes the round now if it holds any result (the rule is about
// to change): the results already accepted are not thrown away.
func (r *Rounds) Flush() (Step, bool) {
	if r.results == 0 {
		return Step{}, false
	}
	return r.close(), true
}

func (r *Rounds) close() Step {
	inv := 1 / float32(r.results)
	for i, v := range r.sum {
		r.mean[i] = v * inv
		r.sum[i] = 0
	}
	s := Step{Update: r.mean, Scale: 1, Results: r.results, Round: r.round}
	r.round++
	r.leased, r.results, r.opened = 0, 0, time.Time{}
	return s
}

func (r *Rounds) Partial() Partial {
	return Partial{Round: r.round, Results: r.results, Sum: r.sum}
}

func (r *Rounds) Restore(p Partial) error {
	if p.Results < 0 || p.Results > r.Size || (p.Results > 0 && len(p.Sum) != len(r.sum)) {
		return fmt.Errorf("partial round %d holds %d results and %d values; the job takes up to %d results of %d values",
			p.Round, p.Results, len(p.Sum), r.Size, len(r.sum))
	}
	if p.Round > 0 {
		r.round = p.Round
	}
	r.results = p.Results
	clear(r.sum)
	if p.Results > 0 {
		copy(r.sum, p.Sum)
	}
	// The leases of the round were not kept: their tasks are queued
	// again and the round leases anew.
	r.leased, r.opened = 0, time.Time{}
	return nil
}

// WaitUntil is when Ready may next step by timeout: zero when it cannot
// (no results yet, or no lease granted).
func (r *Rounds) WaitUntil() time.Time {
	if r.results == 0 || r.opened.IsZero() {
		return time.Time{}
	}
	return r.opened.Add(r.Timeout)
}
