package engine

import (
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// Spot checks: a sample of tasks is computed again by another volunteer
// and the two results compared (BOINC's replication, BTARD's random
// recomputation). A mismatch sends the task to the coordinator, which
// computes it itself (spotreferee.go); the one of the two that disagrees
// with it gets a strike, and enough strikes ban it. SpotChecks is the policy and its memory; the job's loop owns it and
// grants, applies and credits what it decides.

// Spot check defaults (the job spec's spot_check keys).
const (
	DefaultSpotCheckRate    = 0.05
	DefaultSpotCheckStrikes = 3
	// DefaultSpotCheckTolerance bounds ‖a−b‖/max(‖a‖,‖b‖,RefNorm)
	// between honest results of different kernels: 15x the largest
	// difference measured over 10,000 tasks (docs/SPOTCHECKS.md).
	DefaultSpotCheckTolerance = 0.05
	// DefaultSpotCheckPending is how many checks may wait for their copies
	// at once: each holds one or two updates.
	DefaultSpotCheckPending = 4
)

// Referee is the volunteer id of the coordinator's own result in a check
// (Resolve): never struck, credited, nor put in a class.
const Referee = "coordinator"

// strikeFactor: the one struck must be more than this many tolerances
// from the third result.
const strikeFactor = 4

// The adaptive rate: a new volunteer is checked newcomerBoost times as
// often until it has passed newcomerChecks checks, a trusted one
// (trustedChecks passed) half as often, a struck one always.
const (
	newcomerBoost  = 4
	newcomerChecks = 20
	trustedChecks  = 100
)

// SpotChecks decides which results are checked, pairs copies with
// volunteers, compares results and keeps each volunteer's standing. Its
// randomness is seeded and its clock injected, so a run is repeatable.
type SpotChecks struct {
	Rate      float64 // the base fraction of results checked (0: off)
	Strikes   int     // strikes that ban a volunteer
	Tolerance float64 // relative difference allowed between results not known bit-exact
	// RefNorm is the norm of a typical accepted update (the job's running
	// mean), the least norm a difference is measured against: a batch
	// the model already fits has a tiny gradient, whose rounding is
	// large next to itself but not next to an ordinary update.
	RefNorm    float64
	MaxPending int // checks waiting at once; more are skipped
	// Timeout is how long a check may wait for its copies before it is
	// dropped undecided.
	Timeout time.Duration
	Now     func() time.Time

	rng    *rand.Rand
	vols   map[string]*Trust
	checks map[uint64]*Check // by the primary lease's id
	// byCopy maps each copy lease out to its check: nil once the check
	// was dropped, so that the copy's result is still known for a copy
	// (refused, never applied) until the lease ends.
	byCopy    map[uint64]*Check
	nextClass int
	Counters  SpotCounters
}

// Trust is what the spot checks know of one volunteer.
type Trust struct {
	Passed  int  `json:"passed"`  // checks its result agreed in
	Strikes int  `json:"strikes"` // checks it disagreed with the majority of
	Banned  bool `json:"banned,omitempty"`
	// Class is the deterministic class it was observed in (0: none):
	// volunteers whose results matched bit for bit. Hint is the
	// kind/backend its worker claimed then; another hint starts over.
	Class int    `json:"class,omitempty"`
	Hint  string `json:"hint,omitempty"`
}

// SpotCounters count what the checks did, for the job view.
type SpotCounters struct {
	Checked    int64 `json:"checked"`    // checks decided (two or three results compared)
	Agreed     int64 `json:"agreed"`     // checks whose first two results agreed
	Mismatched int64 `json:"mismatched"` // checks whose first two did not
	Strikes    int64 `json:"strikes"`
	// Refuted counts credited results a check refuted (applied primaries,
	// and disputed copies the coordinator found wrong), RefutedExamples
	// their examples (their credit was taken back).
	Refuted         int64 `json:"refuted"`
	RefutedExamples int64 `json:"refuted_examples"`
	// HeldCreditedExamples are the examples of held (quarantined)
	// results that a check agreed with, credited then.
	HeldCreditedExamples int64 `json:"held_credited_examples"`
	Bans                 int64 `json:"bans"`
	// Skipped counts results chosen for a check while MaxPending checks
	// were already waiting; Expired counts checks dropped undecided
	// (no other volunteer took a copy in time, or the coordinator no
	// longer keeps their base version: Abandon).
	Skipped int64 `json:"skipped"`
	Expired int64 `json:"expired"`
	// ClassBreaks counts pairs seen bit for bit alike before whose
	// results differed (each leaves its class).
	ClassBreaks int64 `json:"class_breaks"`
	// Undecided counts checks of three results without a clear majority.
	Undecided int64 `json:"undecided"`
	// DuplicatedExamples are the examples copies computed again.
	DuplicatedExamples int64 `json:"duplicated_examples"`
	// RefusedChecked counts checks of results the coordinator refused
	// (SelectRefused): evidence only, never applied nor credited.
	RefusedChecked int64 `json:"refused_checked"`
	// Recomputed counts mismatched checks whose third result the
	// coordinator computed itself (Resolve); RecomputeDropped, those it
	// could not (the base snapshot was gone), dropped undecided;
	// RecomputeDeferred, checks that waited for the recomputations' rate
	// bound (each counted once).
	Recomputed        int64 `json:"recomputed"`
	RecomputeDropped  int64 `json:"recompute_dropped"`
	RecomputeDeferred int64 `json:"recompute_deferred"`
}

// SpotResult is one volunteer's result of a checked task.
type SpotResult struct {
	Volunteer string
	Hint      string // kind/backend as its worker claimed it
	Update    []float32
	Examples  int
	// Slack is an absolute L2 allowance this result adds to a comparison:
	// what a lossy error-feedback codec may have moved it by
	// (protocol.UpdateSlack). 0 for an exact update (f32) or one every
	// volunteer rounds alike (f16).
	Slack float64
	// Applied: the model took it (an async primary, or one in a round).
	// Held: it was quarantined, not applied, and earns credit only if the
	// check agrees with it. Neither: the coordinator refused it, and the
	// check only decides whether its volunteer lied.
	Applied, Held bool
	// Credited: a copy that disagreed with its primary, credited while
	// the coordinator decides; its credit is taken back if it was wrong.
	Credited bool
	// Referee: the coordinator computed it (Resolve).
	Referee bool
}

// Check is one task being checked.
type Check struct {
	Primary Lease // the primary lease, as granted and started
	Results []SpotResult
	// copies are the copy leases out now: one at most, while the check
	// waits for its copy's result.
	copies map[uint64]string // lease id → volunteer
	opened time.Time
	// refereeing is set while the coordinator computes the third result;
	// deferred once the check waited for the recomputations' bound.
	refereeing, deferred bool
}

// Outcome is what a copy's result decided.
type Outcome struct {
	Done   bool // the check is over
	Agreed bool // the copy that answered agreed (with the primary, or with the majority)
	// Disputed: the copy that answered disagreed with the primary; it is
	// credited (Credit) until the coordinator's recomputation decides.
	Disputed bool
	// Credit are results to credit (the copy that answered and agreed,
	// and held primaries a check vindicated); Refute are applied results the
	// majority refuted. Struck and Banned are volunteers struck (and
	// banned) now.
	Credit, Refute []SpotResult
	Struck, Banned []string
	Detail         string
}

// NewSpotChecks returns the policy for rate (0: no checks), strikes and
// tolerance (0: their defaults), seeded with seed.
func NewSpotChecks(seed uint64, rate float64, strikes int, tolerance float64, now func() time.Time) *SpotChecks {
	if strikes <= 0 {
		strikes = DefaultSpotCheckStrikes
	}
	if tolerance <= 0 {
		tolerance = DefaultSpotCheckTolerance
	}
	return &SpotChecks{
		Rate: rate, Strikes: strikes, Tolerance: tolerance, MaxPending: DefaultSpotCheckPending,
		Timeout: time.Minute, Now: now,
		rng:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		vols: map[string]*Trust{}, checks: map[uint64]*Check{}, byCopy: map[uint64]*Check{},
	}
}

func (p *SpotChecks) trust(v string) *Trust {
	t := p.vols[v]
	if t == nil {
		t = &Trust{}
		p.vols[v] = t
	}
	return t
}

// Standing is v's record (a copy; zero for one never checked).
func (p *SpotChecks) Standing(v string) Trust {
	if t := p.vols[v]; t != nil {
		return *t
	}
	return Trust{}
}

// Quarantined reports whether v's results are held until a check agrees.
func (p *SpotChecks) Quarantined(v string) bool {
	t := p.vols[v]
	return t != nil && t.Strikes > 0
}

// Vouched reports whether checks have vouched for v: it passed as many
// as a newcomer must, and was never struck.
func (p *SpotChecks) Vouched(v string) bool {
	t := p.vols[v]
	return t != nil && t.Passed >= newcomerChecks && t.Strikes == 0 && !t.Banned
}

// Banned reports whether v reached the strikes that ban.
func (p *SpotChecks) Banned(v string) bool {
	t := p.vols[v]
	return t != nil && t.Banned
}

// RateFor is the chance that a result of v is checked.
func (p *SpotChecks) RateFor(v string) float64 {
	if p.Rate <= 0 {
		return 0
	}
	t := p.vols[v]
	switch {
	case t != nil && t.Strikes > 0:
		return 1
	case t == nil || t.Passed < newcomerChecks:
		return min(1, newcomerBoost*p.Rate)
	case t.Passed >= trustedChecks:
		return p.Rate / 2
	}
	return p.Rate
}

// Select draws whether a result of v is checked. A draw that finds
// MaxPending checks waiting is skipped (and counted).
func (p *SpotChecks) Select(v string) bool {
	r := p.RateFor(v)
	if r <= 0 || p.rng.Float64() >= r {
		return false
	}
	if len(p.checks) >= p.MaxPending {
		p.Counters.Skipped++
		return false
	}
	return true
}

// SelectRefused says whether a result of v that the coordinator refused
// (its own validation, the norm gate, a replayed update) is checked: a
// lie that is merely refused costs the liar nothing, so a forger whose
// every result is refused would never be struck. It is drawn at v's own
// rate, as an accepted one (an honest volunteer's results that validation
// refused by bad luck cost few copies, a forger that never passes a check
// stays at the newcomer's rate), and not while one of v's results is being
// checked (so that a flood of refused results is not a flood of copies)
// or the checks are full; a struck volunteer's results are all checked
// anyway.
func (p *SpotChecks) SelectRefused(v string) bool {
	if p.Rate <= 0 || p.Quarantined(v) || p.Banned(v) || p.rng.Float64() >= p.RateFor(v) {
		return false
	}
	for _, c := range p.checks {
		if c.Results[0].Volunteer == v {
			return false
		}
	}
	if len(p.checks) >= p.MaxPending {
		p.Counters.Skipped++
		return false
	}
	p.Counters.RefusedChecked++
	return true
}

// Open starts a check of primary's task with its result r; the update is
// copied. Call it after Select said yes.
func (p *SpotChecks) Open(primary Lease, r SpotResult) *Check {
	r.Update = slices.Clone(r.Update)
	c := &Check{Primary: primary, Results: []SpotResult{r}, copies: map[uint64]string{}, opened: p.Now()}
	p.checks[primary.ID] = c
	p.noteHint(r.Volunteer, r.Hint)
	return c
}

// Pending is how many checks wait for copies or results.
func (p *SpotChecks) Pending() int { return len(p.checks) }

// Checks lists the checks waiting, oldest first.
func (p *SpotChecks) Checks() []*Check {
	out := make([]*Check, 0, len(p.checks))
	for _, c := range p.checks {
		out = append(out, c)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Primary.ID < out[b].Primary.ID })
	return out
}

// Needs reports whether a waiting check computes from version v.
func (p *SpotChecks) Needs(v int64) bool {
	for _, c := range p.checks {
		if c.Primary.Base == v {
			return true
		}
	}
	return false
}

// noteHint records v's claimed kind/backend; a volunteer that now
// claims another leaves its observed class.
func (p *SpotChecks) noteHint(v, hint string) {
	t := p.trust(v)
	if t.Hint != hint {
		t.Hint, t.Class = hint, 0
	}
}

// sameClass reports whether a and b were seen to compute bit for bit alike.
func (p *SpotChecks) sameClass(a, b string) bool {
	ta, tb := p.vols[a], p.vols[b]
	return ta != nil && tb != nil && ta.Class != 0 && ta.Class == tb.Class
}

// established reports whether v passed enough checks to be past the
// newcomer rate: a volunteer that did real work for others to compare.
func (p *SpotChecks) established(v string) bool {
	t := p.vols[v]
	return t != nil && t.Strikes == 0 && t.Passed >= newcomerChecks
}

// CopyFor returns a check whose copy volunteer v (claiming hint) may
// compute, or nil; a struck volunteer computes none. connected maps each
// connected volunteer to its hint. A copy goes to an established
// volunteer while one is connected that has no part in the check, or
// once half the check's time has passed, to any other: fresh identities
// (one person's sybils, or a coalition that claims one backend) would
// otherwise check one another's lies, or outvote an honest primary.
// Whether two results are compared bit for bit or within the tolerance
// follows their observed class, never the pairing.
func (p *SpotChecks) CopyFor(v, hint string, connected map[string]string) *Check {
	if p.Quarantined(v) {
		// A struck volunteer's own results are all checked; its copies
		// would only cost third copies.
		return nil
	}
	now := p.Now()
	newcomer := !p.established(v)
	for _, c := range p.Checks() {
		if c.wanted() == 0 || c.has(v) || !c.Primary.Started() {
			continue
		}
		if newcomer && now.Sub(c.opened) < p.Timeout/2 {
			waits := false
			for o := range connected {
				if o != v && !c.has(o) && p.established(o) {
					waits = true
					break
				}
			}
			if waits {
				continue // for an established volunteer, a while
			}
		}
		return c
	}
	return nil
}

// wanted is how many more copies c needs leased: one, until a copy is
// out or has answered. A mismatched check wants none: the coordinator
// decides it.
func (c *Check) wanted() int {
	if len(c.Results) > 1 || len(c.copies) > 0 {
		return 0
	}
	return 1
}

// has reports whether v computed or holds a copy of c's task.
func (c *Check) has(v string) bool {
	for _, r := range c.Results {
		if r.Volunteer == v {
			return true
		}
	}
	for _, o := range c.copies {
		if o == v {
			return true
		}
	}
	return false
}

// Copied records that lease id, a copy of c's task, went to volunteer v.
func (p *SpotChecks) Copied(c *Check, id uint64, v string, examples int) {
	c.copies[id] = v
	p.byCopy[id] = c
	p.Counters.DuplicatedExamples += int64(examples)
}

// IsCopy reports whether lease id is a spot check's copy, out now.
func (p *SpotChecks) IsCopy(id uint64) bool {
	_, ok := p.byCopy[id]
	return ok
}

// CopyGone records that copy lease id ended without a result (expired,
// given back): the check wants another copy.
func (p *SpotChecks) CopyGone(id uint64) {
	if c := p.byCopy[id]; c != nil {
		delete(c.copies, id)
	}
	delete(p.byCopy, id)
}

// Expire drops the checks that waited longer than Timeout and returns
// them. Their copies still out stay known as copies until their leases
// end, and their results are refused.
func (p *SpotChecks) Expire() []*Check {
	now := p.Now()
	var out []*Check
	for _, c := range p.Checks() {
		if now.Sub(c.opened) > p.Timeout {
			p.drop(c)
			p.Counters.Expired++
			out = append(out, c)
		}
	}
	return out
}

// Abandon drops check c undecided, counted as expired: the coordinator
// can no longer hand out copies of it (their base version is gone).
func (p *SpotChecks) Abandon(c *Check) {
	if p.checks[c.Primary.ID] != c {
		return
	}
	p.drop(c)
	p.Counters.Expired++
}

func (p *SpotChecks) drop(c *Check) {
	delete(p.checks, c.Primary.ID)
	for id := range c.copies {
		p.byCopy[id] = nil // out still: its result is refused (Answer)
	}
}

// Volunteers is every volunteer's record, for a checkpoint.
func (p *SpotChecks) Volunteers() map[string]Trust {
	out := make(map[string]Trust, len(p.vols))
	for v, t := range p.vols {
		out[v] = *t
	}
	return out
}

// Restore puts back the records and counters of a checkpoint.
func (p *SpotChecks) Restore(vols map[string]Trust, c SpotCounters) {
	p.vols = make(map[string]*Trust, len(vols))
	for v, t := range vols {
		t := t
		p.vols[v] = &t
		p.nextClass = max(p.nextClass, t.Class)
	}
	p.Counters = c
}
