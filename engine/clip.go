package engine

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// Clipper bounds what each asynchronous result can do to the model. Every
// update u is clipped around a running centre c,
//
//	u' = c + (u − c)·min(1, r/‖u − c‖),
//
// and u' is what is applied. The centre is an average of clipped updates
// only (c ← c + Beta·(u' − c)), and the radius r is Tau times the median of
// the last Window distances ‖u − c‖, each recorded at most r: so neither
// moves by more than a bounded amount per update, and a hostile minority
// (under half the window) cannot pull the median. A hostile update moves
// the model by at most ‖c‖ + r, however large it was.
//
// The first radius comes from the first results: they are held, not
// applied, until results have come from min(Warmup, Active) distinct
// workers, or WarmupTimeout has passed since the first. The
// scale is then the smallest of the workers' (non-zero) mean update
// norms: an update that arrives first, however huge, does not set it,
// and one too small only slows the start (the radius grows by at most a
// factor Tau per half window). The held results, each worker's mean
// clipped to the radius around zero, are applied as one step. A worker
// that is alone (Active 1) ends the warm-up with its first result: there
// is nobody to compare it with, and a hostile worker that is first and
// alone sets the scale.
type Clipper struct {
	Tau           float64
	Window        int
	Beta          float64
	Warmup        int
	WarmupTimeout time.Duration
	// Active is how many distinct workers hold leases or sent results
	// now: the warm-up waits for no more than that many. The caller keeps
	// it up to date; below 1 it counts as 1.
	Active int

	n      int
	centre []float32
	dists  []float64
	next   int
	boot   map[string]*held
	bootAt time.Time
	out    []float32

	// Momentum, when > 0, is the worker momentum β: the clip sees each
	// volunteer's m ← β·m + (1−β)·u instead of u. Keyed by volunteer, so
	// that reconnecting does not start a fresh one; at most
	// MomentumBytes of them are kept, the least recently used dropped
	// first (a dropped volunteer starts again from its next update).
	Momentum      float32
	MomentumBytes int
	mom           map[string]*momentum
	momTick       uint64
	cand          []float32 // the momentum an update would give, until kept
	weight        float32   // the last clip's r/d (1 when not clipped)

	// Clipped counts the updates applied clipped.
	Clipped int64
}

// NewClipper returns a Clipper for vectors of n values with the defaults
// for a robust spec's tau.
func NewClipper(n int, tau float64, warmupTimeout time.Duration) *Clipper {
	return &Clipper{Tau: tau, Window: 32, Beta: 0.1, Warmup: 3, WarmupTimeout: warmupTimeout, n: n}
}

// DefaultMomentumBytes bounds the memory the worker momentum takes.
const DefaultMomentumBytes = 64 << 20

// momentum is one volunteer's momentum and when it was last used.
type momentum struct {
	m    []float32
	used uint64
}

// Forget drops what is kept of key.
func (c *Clipper) Forget(key string) { delete(c.mom, key) }

// Flags reports whether u is suspect: outside the radius around the
// centre (the clip would clip it), or pointing against the centre.
// Always false before the warm-up ends.
func (c *Clipper) Flags(u []float32) bool {
	return c.centre != nil && c.measure(u).flagged(c.Radius())
}

// measured is what one pass over an update finds of it against the
// centre: its distance, and whether it points against the centre. The
// clip and the flag both need the distance; one pass gives both.
type measured struct {
	dist    float64
	against bool
}

// flagged reports whether an update measured so lies outside radius r
// around the centre, or points against it (cosine below flagCosine): a
// sign flip or an inner-product manipulation that stays inside the radius.
func (m measured) flagged(r float64) bool { return m.against || m.dist > r }

// measure measures u against the centre.
func (c *Clipper) measure(u []float32) measured { return measure(u, c.centre) }

// flagged reports whether u lies outside radius r around ref, or points
// against it.
func flagged(u, ref []float32, r float64) bool { return measure(u, ref).flagged(r) }

// measure measures u against ref in one pass over both.
func measure(u, ref []float32) measured {
	dot, nu, nr, dd := 0.0, 0.0, 0.0, 0.0
	ref = ref[:len(u)]
	for i, v := range u {
		x, w := float64(v), float64(ref[i])
		dot += x * w
		nu += x * x
		nr += w * w
		d := x - w
		dd += d * d
	}
	return measured{dist: math.Sqrt(dd), against: dot < flagCosine*math.Sqrt(nu*nr)}
}

// flagCosine is the cosine with the reference below which an update is
// flagged: honest ones scatter around it, and slightly against it now
// and then, which validating would only cost time for.
const flagCosine = -0.1

// withMomentum returns what the clip sees of key's update u: u itself
// without momentum, else β·m + (1−β)·u (u for a key without one), in a
// scratch vector that keep makes key's.
func (c *Clipper) withMomentum(key string, u []float32) []float32 {
	if c.Momentum <= 0 {
		return u
	}
	if len(c.cand) != len(u) {
		c.cand = make([]float32, len(u))
	}
	m := c.mom[key]
	if m == nil {
		copy(c.cand, u)
		return c.cand
	}
	b := c.Momentum
	for i, v := range u {
		c.cand[i] = b*m.m[i] + (1-b)*v
	}
	return c.cand
}

// keep makes the vector withMomentum last returned key's momentum,
// dropping the least recently used ones past MomentumBytes.
func (c *Clipper) keep(key string) {
	if c.Momentum <= 0 {
		return
	}
	if c.mom == nil {
		c.mom = map[string]*momentum{}
	}
	c.momTick++
	m := c.mom[key]
	if m == nil {
		limit := c.MomentumBytes
		if limit <= 0 {
			limit = DefaultMomentumBytes
		}
		for len(c.mom) > 0 && (len(c.mom)+1)*4*c.n > limit {
			var oldest string
			var at uint64 = math.MaxUint64
			for k, v := range c.mom {
				if v.used < at {
					oldest, at = k, v.used
				}
			}
			delete(c.mom, oldest)
		}
		m = &momentum{m: make([]float32, c.n)}
		c.mom[key] = m
	}
	copy(m.m, c.cand)
	m.used = c.momTick
}

// Momenta is how many volunteers' momentum is kept.
func (c *Clipper) Momenta() int { return len(c.mom) }

// Seeded reports whether the warm-up is over.
func (c *Clipper) Seeded() bool { return c.centre != nil }

// Radius is the radius updates are clipped to now (0 before the warm-up
// ends).
func (c *Clipper) Radius() float64 {
	if len(c.dists) == 0 {
		return 0
	}
	return c.Tau * median(c.dists)
}

// held is one worker's results in the warm-up: their sum and count.
type held struct {
	sum   []float64
	norms float64
	n     int
}

// hold adds worker's update to what the warm-up holds.
func (c *Clipper) hold(worker string, u []float32, now time.Time) {
	if c.boot == nil {
		c.boot = map[string]*held{}
		c.bootAt = now
	}
	h := c.boot[worker]
	if h == nil {
		h = &held{sum: make([]float64, len(u))}
		c.boot[worker] = h
	}
	for i, v := range u {
		h.sum[i] += float64(v)
	}
	h.norms += l2norm(u)
	h.n++
}

// warm ends the warm-up if it is due at now, returning the step.
func (c *Clipper) warm(now time.Time) ([]float32, int, bool) {
	if len(c.boot) == 0 {
		return nil, 0, false
	}
	need := min(c.Warmup, max(c.Active, 1))
	if len(c.boot) < need && now.Sub(c.bootAt) < c.WarmupTimeout {
		return nil, 0, false
	}
	means := make([][]float32, 0, len(c.boot))
	scale := math.Inf(1)
	total := 0
	for _, w := range slices.Sorted(maps.Keys(c.boot)) {
		h := c.boot[w]
		m := make([]float32, c.n)
		for i, v := range h.sum {
			m[i] = float32(v / float64(h.n))
		}
		means = append(means, m)
		total += h.n
		if d := h.norms / float64(h.n); d > 0 && d < scale {
			scale = d
		}
	}
	c.out = make([]float32, c.n)
	if math.IsInf(scale, 1) {
		// Nothing but zeros: no scale yet, and nothing to apply.
		c.boot = nil
		return c.out, total, true
	}
	r := c.Tau * scale
	for _, m := range means {
		w := 1.0
		if d := dist(m, make([]float32, c.n)); d > r {
			w = r / d
			c.Clipped++
		}
		for i, v := range m {
			c.out[i] += float32(float64(v) * w / float64(len(means)))
		}
	}
	c.centre = append([]float32(nil), c.out...)
	c.dists = []float64{scale}
	c.boot = nil
	return c.out, total, true
}

// clip clips u, whose distance to the centre is d, around the centre
// and moves the centre; it returns what is applied (u itself inside the
// radius, else c.out) and whether u was clipped. One pass over u and the
// centre: the applied value and the centre's move are made together.
func (c *Clipper) clip(u []float32, d float64) ([]float32, bool) {
	r := c.Radius()
	w := 1.0
	clipped := d > r
	if clipped {
		w = r / d
		if r == 0 || math.IsInf(d, 0) {
			w = 0
		}
	}
	// A clipped update's step is also weighted by r/d: one far outside
	// the radius (which honest ones rarely are) counts for little, so a
	// consistent hostile direction is not amplified by an adaptive
	// optimizer's per-coordinate scaling.
	c.weight = float32(max(w, 0))
	if c.weight == 0 {
		c.weight = 1e-30
	}
	rec := min(d, r)
	if r == 0 {
		rec = d
	}
	if len(c.dists) < c.Window {
		c.dists = append(c.dists, rec)
	} else {
		c.dists[c.next] = rec
		c.next = (c.next + 1) % c.Window
	}
	b := float32(c.Beta)
	centre := c.centre[:len(u)]
	if !clipped {
		// Inside the radius: the update as it is.
		for i, v := range u {
			centre[i] += b * (v - centre[i])
		}
		return u, false
	}
	out := c.out[:len(u)]
	for i, v := range u {
		o := centre[i] + float32((float64(v)-float64(centre[i]))*w)
		out[i] = o
		centre[i] += b * (o - centre[i])
	}
	c.Clipped++
	return out, true
}

// ClipState is what a restarted job needs of a Clipper to go on where it
// was: the centre, the window of recorded distances (the radius) and
// where the next one goes. Before the warm-up ends there is none: a
// restarted job warms up again (the results it held were not applied).
type ClipState struct {
	Centre []float32
	Dists  []float64
	Next   int
}

// State returns the clip's state, and false before the warm-up ends.
func (c *Clipper) State() (ClipState, bool) {
	if c.centre == nil {
		return ClipState{}, false
	}
	return ClipState{Centre: slices.Clone(c.centre), Dists: slices.Clone(c.dists), Next: c.next}, true
}

// SetState puts back a state State returned; it ends the warm-up.
func (c *Clipper) SetState(s ClipState) error {
	switch {
	case len(s.Centre) != c.n:
		return fmt.Errorf("clip centre has %d values, the model has %d parameters", len(s.Centre), c.n)
	case len(s.Dists) < 1 || len(s.Dists) > c.Window:
		return fmt.Errorf("clip window holds %d distances, want 1 to %d", len(s.Dists), c.Window)
	case s.Next < 0 || s.Next >= c.Window || (len(s.Dists) < c.Window && s.Next != 0):
		return fmt.Errorf("clip window position %d does not fit a window of %d holding %d", s.Next, c.Window, len(s.Dists))
	case !Finite(s.Centre):
		return fmt.Errorf("clip centre: %w", ErrNonFinite)
	}
	for _, d := range s.Dists {
		if !(d >= 0) || math.IsInf(d, 0) {
			return fmt.Errorf("clip distance %v is not a finite number >= 0", d)
		}
	}
	c.centre, c.dists, c.next = slices.Clone(s.Centre), slices.Clone(s.Dists), s.Next
	c.out = make([]float32, c.n)
	c.boot = nil
	return nil
}
