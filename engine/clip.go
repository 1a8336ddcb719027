package engine

import (
	"math"
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
// applied, until one has come from each of min(Warmup, Active) distinct
// workers (or WarmupTimeout passed since the first), and then applied as
// one centred clip of them from zero, whose median norm seeds the
// distances. An update that arrives first, however huge, is one of
// several and does not set the scale alone.
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
	boot   map[string][]float32
	bootAt time.Time
	out    []float32

	// Clipped counts the updates applied clipped.
	Clipped int64
}

// NewClipper returns a Clipper for vectors of n values with the defaults
// for a robust spec's tau.
func NewClipper(n int, tau float64, warmupTimeout time.Duration) *Clipper {
	return &Clipper{Tau: tau, Window: 32, Beta: 0.1, Warmup: 3, WarmupTimeout: warmupTimeout, n: n}
}

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

// hold keeps worker's update for the warm-up (its latest one).
func (c *Clipper) hold(worker string, u []float32, now time.Time) {
	if c.boot == nil {
		c.boot = map[string][]float32{}
		c.bootAt = now
	}
	c.boot[worker] = append(c.boot[worker][:0], u...)
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
	xs := make([][]float32, 0, len(c.boot))
	norms := make([]float64, 0, len(c.boot))
	zero := make([]float32, c.n)
	for _, x := range c.boot {
		xs = append(xs, x)
		norms = append(norms, dist(x, zero))
	}
	c.out = make([]float32, c.n)
	c.Clipped += int64(CenteredClip(c.out, xs, nil, c.Tau, 3))
	c.centre = append([]float32(nil), c.out...)
	c.dists = []float64{median(norms)}
	n := len(c.boot)
	c.boot = nil
	return c.out, n, true
}

// clip clips u around the centre into c.out, records its distance and
// moves the centre; it reports whether u was clipped.
func (c *Clipper) clip(u []float32) bool {
	d := dist(u, c.centre)
	r := c.Radius()
	w := 1.0
	clipped := d > r
	if clipped {
		w = r / d
		if r == 0 || math.IsInf(d, 0) {
			w = 0
		}
	}
	for i, v := range u {
		c.out[i] = c.centre[i] + float32((float64(v)-float64(c.centre[i]))*w)
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
	for i, v := range c.out {
		c.centre[i] += b * (v - c.centre[i])
	}
	if clipped {
		c.Clipped++
	}
	return clipped
}
