package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
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
	// Worker is who sent it, Volunteer whose worker it is ("" when not
	// known): the asynchronous clip's warm-up counts distinct volunteers
	// and keeps worker momentum per volunteer (per worker without one).
	Worker    string
	Volunteer string
	// Results, when above 0, says Update is the sum of that many results
	// pre-aggregated by a trusted relay, which applied the per-volunteer
	// defences itself: it counts as that many results. The asynchronous
	// rule takes their mean as that many steps of the optimizer (one
	// version), as it would have taken the results one by one, without
	// its robust clip.
	Results int
	// Finite says the caller has checked every value of Update is finite
	// (the wire's decoder does, for every result): the asynchronous clip
	// then skips its own pass over it.
	Finite bool
}

// count is how many results c holds.
func (c Contribution) count() int { return max(1, c.Results) }

// who is whose result c is: its volunteer, or its worker without one.
func (c Contribution) who() string {
	if c.Volunteer != "" {
		return c.Volunteer
	}
	return c.Worker
}

// Decision is what an Aggregator made of a Contribution. A rejection has
// a Reason (the protocol's words: "stale", "late") and a Detail for people.
type Decision struct {
	Accepted bool
	Reason   string
	Detail   string
	// Clipped marks an accepted result that is applied clipped (the
	// asynchronous rule's robust clip): its ack says so.
	Clipped bool
	// Norm is the L2 norm of what a clipped result is applied as (0 when
	// not clipped).
	Norm float64
}

// Rejection reasons an Aggregator gives.
const (
	ReasonStale   = "stale"
	ReasonLate    = "late"
	ReasonInvalid = "invalid"
	// ReasonClipped is the reason an accepted result's ack carries when
	// it was applied clipped.
	ReasonClipped = "clipped"
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
	// Repeat is how many times the optimizer steps on Update, a mean of
	// that many results (a relay's aggregate in an asynchronous mode); 0
	// is once. The model's version moves on by one all the same.
	Repeat int
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
	// Clip, when set, bounds every result by a robust running centre
	// (robust.method centered_clip); nil applies results as they are.
	Clip *Clipper
	// Validate, when set, scores an update the clip flags (and each one
	// of the warm-up) on the coordinator's own data: "" lets it through,
	// anything else is why it is refused as quarantined (see Zeno).
	Validate func(u []float32) string
	// Lone is set by the caller when the result's volunteer is the only
	// one at work: past the warm-up there is nobody to tell a hostile
	// minority from, and a lone volunteer's honest but noisy steps must
	// not be refused (the clip still bounds them).
	Lone bool

	refusals

	pending   []float32
	has       bool
	results   int // results the pending step holds (0: one)
	staleness int64
	heldAt    time.Time
	weight    float32 // the clip's rate scale for the pending step; 0 is 1
}

func (a *Async) Lease(time.Time) (uint64, bool) { return 0, true }
func (a *Async) Unlease(uint64)                 {}

func (a *Async) Offer(c Contribution) Decision {
	if c.Staleness > int64(a.MaxStaleness) {
		return Decision{Reason: ReasonStale, Detail: fmt.Sprintf("staleness %d > max_staleness %d: fetch a newer snapshot", c.Staleness, a.MaxStaleness)}
	}
	if c.Results > 0 {
		// A relay's sum of c.Results results, all computed from about
		// the same version: their mean taken as c.Results steps, as
		// many as the results would have made one by one (Ready). One
		// step of the sum would make a relay's k results one step of
		// an adaptive optimizer, whose step does not grow with its
		// input: k times too few.
		mean := c.Update // one result is its own mean, applied at once by Ready
		if c.Results > 1 {
			mean = make([]float32, len(c.Update))
			inv := 1 / float32(c.Results)
			for i, v := range c.Update {
				mean[i] = v * inv
			}
		}
		a.pending, a.has, a.staleness, a.results, a.weight = mean, true, c.Staleness, c.Results, 0
		return Decision{Accepted: true}
	}
	if a.Clip != nil {
		if !c.Finite && !Finite(c.Update) {
			return Decision{Reason: ReasonInvalid, Detail: ErrNonFinite.Error()}
		}
		if len(c.Update) != a.Clip.n {
			panic(fmt.Sprintf("engine: Async.Offer: update has %d values, want %d", len(c.Update), a.Clip.n))
		}
		key := c.who()
		if !a.Clip.Seeded() {
			// Nothing to compare with yet: every warm-up result is
			// validated, so that one arriving first (or alone) cannot set
			// the scale by being huge or hostile.
			if a.Validate != nil && !(a.distinctRecent() >= 2 && a.refusing()) {
				// refusing: a model on which even honest steps climb
				// must not hold the warm-up, and the job, for ever; but
				// one worker alone refused is a lone attacker, which
				// must not end the warm-up by insisting.
				if d := a.Validate(c.Update); d != "" {
					a.record(c.Worker, true)
					return Decision{Reason: ReasonQuarantined, Detail: d}
				}
				a.record(c.Worker, false)
			}
			// Held for the warm-up, applied when it ends.
			a.Clip.hold(key, c.Update, a.heldAt)
			return Decision{Accepted: true}
		}
		// Worker momentum (Karimireddy et al.): each volunteer's updates
		// are averaged over its history before the clip, so honest ones
		// lie closer together and the radius is smaller.
		u := a.Clip.withMomentum(key, c.Update)
		// One pass measures the update against the centre for both the
		// flag and the clip (with momentum, the clip's is the momentum's);
		// where nothing is flagged (no validation, a lone volunteer) the
		// clip needs only the distance.
		flags := a.Validate != nil && !a.Lone
		var m, mu measured
		switch {
		case flags:
			m = a.Clip.measure(c.Update)
			mu = m
			if a.Clip.Momentum > 0 {
				mu = a.Clip.measure(u)
			}
		default:
			mu.dist = dist(u, a.Clip.centre)
		}
		if r := a.Clip.Radius(); flags && (m.flagged(r) || mu.flagged(r)) && !a.refusing() {
			// Flagged by the clip (the update, or its volunteer's momentum
			// with it): the update itself must descend on the
			// coordinator's own data, or it is not applied at all.
			if d := a.Validate(c.Update); d != "" {
				a.record(c.Worker, true)
				return Decision{Reason: ReasonQuarantined, Detail: d}
			}
		}
		a.record(c.Worker, false)
		a.Clip.keep(key)
		// Unclipped, the pending step is the caller's vector itself:
		// applied by Ready before Offer's caller lets it change.
		applied, clipped := a.Clip.clip(u, mu.dist)
		a.pending, a.has, a.staleness, a.weight = applied, true, c.Staleness, a.Clip.weight
		d := Decision{Accepted: true, Clipped: clipped}
		if clipped {
			d.Norm = l2norm(applied) * float64(a.Clip.weight)
		}
		return d
	}
	// Applied at once by Ready, before the caller's vector changes.
	a.pending, a.has, a.staleness = c.Update, true, c.Staleness
	return Decision{Accepted: true}
}

// validationWindow is how many recent results the share that validation
// refused is taken over.
const validationWindow = 64

// refusals records, for the last validationWindow results, which worker
// sent each and whether validation refused it.
type refusals struct {
	recent  [validationWindow]outcome
	nRecent int
	pos     int
	// Unvalidated counts the flagged results let through unvalidated
	// while validation refused half the recent volunteers.
	Unvalidated int64
}

type outcome struct {
	who     string
	refused bool
}

// refusing reports whether validation refused most results of at least
// half the workers among the recent results. That is not a hostile
// minority but a model in trouble (diverging, where honest steps climb
// too): refusing everyone would freeze the job, so flagged results pass
// unvalidated, bounded by the robust rule alone, until that changes. It
// counts workers, not results: a hostile one that answers fast, refused
// again and again, is still one, and an honest one refused now and then
// is not counted against the check. (Workers, not volunteers: several
// honest workers behind one address are one volunteer without keys, and
// must not weigh as one against a single hostile volunteer.)
func (a *refusals) refusing() bool {
	if a.nRecent < validationWindow/2 {
		return false
	}
	type tally struct{ results, refused int }
	seen := map[string]*tally{}
	for _, o := range a.recent[:a.nRecent] {
		t := seen[o.who]
		if t == nil {
			t = &tally{}
			seen[o.who] = t
		}
		t.results++
		if o.refused {
			t.refused++
		}
	}
	refused := 0
	for _, t := range seen {
		if 2*t.refused > t.results {
			refused++
		}
	}
	if 2*refused >= len(seen) {
		a.Unvalidated++
		return true
	}
	return false
}

// distinctRecent counts the workers among the recent results.
func (a *refusals) distinctRecent() int {
	seen := map[string]bool{}
	for _, o := range a.recent[:a.nRecent] {
		seen[o.who] = true
	}
	return len(seen)
}

// record adds a result's outcome to the window.
func (a *refusals) record(who string, refused bool) {
	a.recent[a.pos] = outcome{who, refused}
	a.pos = (a.pos + 1) % validationWindow
	a.nRecent = min(a.nRecent+1, validationWindow)
}

// SetNow tells the rule the time of the next Offer (the warm-up's clock).
func (a *Async) SetNow(now time.Time) { a.heldAt = now }

func (a *Async) Ready(now time.Time) (Step, bool) {
	if a.Clip != nil && !a.Clip.Seeded() && a.results == 0 {
		u, n, ok := a.Clip.warm(now)
		if !ok {
			return Step{}, false
		}
		return Step{Update: u, Scale: 1, Results: n}, true
	}
	if !a.has {
		return Step{}, false
	}
	s := Step{Update: a.pending, Scale: 1, Results: max(1, a.results), Repeat: a.results}
	if a.InverseStaleness {
		s.Scale = 1 / float32(1+a.staleness)
	}
	if a.weight > 0 && a.weight < 1 {
		// Weighted in the vector, not the rate: an adaptive optimizer's
		// moments must not take the clipped update at full size.
		for i := range s.Update {
			s.Update[i] *= a.weight
		}
	}
	a.pending, a.has, a.weight, a.results = nil, false, 0, 0
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
	// Robust combines a round's results; the zero value (or method none)
	// takes their mean.
	Robust Robust
	// Rand shuffles the buckets; nil seeds one from the round number.
	Rand *rand.Rand
	// Clipped counts the results (buckets, with bucketing) a round's
	// centred clip clipped.
	Clipped int64
	// Validate, when set, scores a result that looks hostile beside the
	// previous round's aggregate (outside the radius the last round's
	// results lay in around it, or pointing against it) on the
	// coordinator's own data, as Async.Validate does: a refused one is
	// not held for the round.
	Validate func(u []float32) string
	// Collusion, with a robust method, leaves out of a round's aggregate
	// the results far more alike than the round's others (collusion.go);
	// Colluding counts them.
	Collusion bool
	Colluding int64
	// Descent, when set, scores a result on the coordinator's held-out
	// batch (above 0: its step descends), and a round leaves out of its
	// aggregate the results that climb against the round's others
	// (descent.go); Climbing counts them.
	Descent  func(u []float32) float64
	Climbing int64
	refusals
	radius float64 // tau × the median distance of the last round's results from its aggregate

	round   uint64
	leased  int
	opened  time.Time // the round's first lease; zero before it
	results int
	sum     []float32
	mean    []float32
	held    [][]float32 // the round's results, kept for a robust method
	origin  []int       // held[k]'s origin: one per result; noOrigin for copies of a mean
	origins int         // the origins handed out
	prev    []float32   // the previous round's aggregate: the clip's start
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
	if c.Results > 0 {
		r.offerSum(c)
		return Decision{Accepted: true}
	}
	if r.robust() {
		if !Finite(c.Update) {
			return Decision{Reason: ReasonInvalid, Detail: ErrNonFinite.Error()}
		}
		if r.Validate != nil {
			// The first round has nothing to compare with: every result
			// of it is validated, as the asynchronous warm-up's are.
			if (r.prev == nil || (r.radius > 0 && flagged(c.Update, r.prev, r.radius))) && !r.refusing() {
				if d := r.Validate(c.Update); d != "" {
					r.record(c.Worker, true)
					return Decision{Reason: ReasonQuarantined, Detail: d}
				}
			}
			r.record(c.Worker, false)
		}
		if len(r.held) > r.results {
			r.held[r.results] = append(r.held[r.results][:0], c.Update...)
		} else {
			r.held = append(r.held, slices.Clone(c.Update))
		}
		r.setOrigin(r.results, r.newOrigin())
	}
	for i, v := range c.Update {
		r.sum[i] += v
	}
	r.results++
	return Decision{Accepted: true}
}

// offerSum holds a relay's sum of c.Results results: a robust method
// sees them as that many copies of their mean (the relay already bounded
// each of its volunteers'), as a restored partial round does.
func (r *Rounds) offerSum(c Contribution) {
	if r.robust() {
		inv := 1 / float32(c.Results)
		for k := 0; k < c.Results; k++ {
			if len(r.held) <= r.results+k {
				r.held = append(r.held, make([]float32, len(r.sum)))
			}
			m := r.held[r.results+k][:len(r.sum)]
			for i, v := range c.Update {
				m[i] = v * inv
			}
			r.setOrigin(r.results+k, noOrigin)
		}
	}
	for i, v := range c.Update {
		r.sum[i] += v
	}
	r.results += c.Results
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

func (r *Rounds) robust() bool {
	return r.Robust.Method != "" && r.Robust.Method != RobustNone
}

func (r *Rounds) close() Step {
	if r.robust() {
		rng := r.Rand
		if rng == nil {
			rng = rand.New(rand.NewPCG(r.round, 0x636c6970))
		}
		held := r.held[:r.results]
		if r.Collusion {
			held = r.leaveOutColluding(held)
		}
		if r.Descent != nil {
			held = r.leaveOutClimbing(held)
		}
		r.Clipped += int64(r.Robust.Aggregate(r.mean, held, r.prev, rng))
		if r.Validate != nil && r.results >= 3 {
			ds := make([]float64, r.results)
			for k, x := range r.held[:r.results] {
				ds[k] = dist(x, r.mean)
			}
			r.radius = r.Robust.Tau * median(ds)
			if r.Robust.Method != RobustCenteredClip {
				r.radius = 1.5 * median(ds)
			}
		}
		if r.prev == nil {
			r.prev = make([]float32, len(r.mean))
		}
		copy(r.prev, r.mean)
		clear(r.sum)
	} else {
		inv := 1 / float32(r.results)
		for i, v := range r.sum {
			r.mean[i] = v * inv
			r.sum[i] = 0
		}
	}
	s := Step{Update: r.mean, Scale: 1, Results: r.results, Round: r.round}
	r.round++
	r.leased, r.results, r.opened = 0, 0, time.Time{}
	return s
}

// newOrigin is a fresh origin for held results.
func (r *Rounds) newOrigin() int { r.origins++; return r.origins }

// setOrigin records held[k]'s origin.
func (r *Rounds) setOrigin(k, o int) {
	for len(r.origin) <= k {
		r.origin = append(r.origin, 0)
	}
	r.origin[k] = o
}

// leaveOutColluding moves the round's colluding results (collusion.go)
// to the end of held and returns the others, counting those left out;
// all of held when none is, or when every one is (nothing to tell them
// from).
func (r *Rounds) leaveOutColluding(held [][]float32) [][]float32 {
	bad := colluding(held, r.origin[:len(held)])
	if bad == nil {
		return held
	}
	k := r.partition(held, bad)
	if k == 0 {
		return held
	}
	r.Colluding += int64(len(held) - k)
	return held[:k]
}

// leaveOutClimbing moves the round's climbing results (descent.go) to
// the end of held and returns the others, counting those left out.
func (r *Rounds) leaveOutClimbing(held [][]float32) [][]float32 {
	scores := make([]float64, len(held))
	for k, x := range held {
		scores[k] = r.Descent(x)
	}
	out, majority := climbing(scores, r.origin[:len(held)])
	if out == nil {
		return held
	}
	if majority {
		// Most of the round climbs: left out only if the round's mean
		// climbs too (descent.go). r.mean is the aggregate's buffer,
		// written after this.
		inv := 1 / float32(len(held))
		clear(r.mean)
		for _, x := range held {
			for i, v := range x {
				r.mean[i] += v * inv
			}
		}
		if r.Descent(r.mean) >= 0 {
			return held
		}
	}
	k := r.partition(held, out)
	r.Climbing += int64(len(held) - k)
	return held[:k]
}

// partition moves held's results marked out to its end, their origins
// with them, and returns how many are not.
func (r *Rounds) partition(held [][]float32, out []bool) int {
	k := 0
	for i := range held {
		if !out[i] {
			held[k], held[i] = held[i], held[k]
			r.origin[k], r.origin[i] = r.origin[i], r.origin[k]
			out[k], out[i] = out[i], out[k]
			k++
		}
	}
	return k
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
	if r.robust() {
		// Only the sum was kept: the round's results come back as that
		// many copies of their mean.
		r.held = r.held[:0]
		for k := 0; k < p.Results; k++ {
			m := make([]float32, len(r.sum))
			for i, v := range r.sum {
				m[i] = v / float32(p.Results)
			}
			r.held = append(r.held, m)
			r.setOrigin(k, noOrigin)
		}
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
