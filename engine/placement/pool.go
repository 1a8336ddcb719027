package placement

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Defaults of a Pool.
const (
	// DefaultHalfLife is how fast past compute stops counting: long
	// enough that what a job got past its share (the grants that fall to
	// it at another job's epoch ends) is paid back rather than forgotten,
	// short enough that a job kept from work a while does not then take
	// the grid for minutes. At 20 s, weights 3:1 came out 2.79-2.87 over
	// a minute in TestSharesTrackWeightsAcrossEpochEnds; at 60 s,
	// 2.89-2.97, and 2.99-3.03 end to end. A changed weight shows at once
	// either way (reweigh).
	DefaultHalfLife = 60 * time.Second
	// DefaultSlack is how far (relative) a worker's current job may be
	// ahead of the neediest job before the worker moves: moving costs a
	// snapshot download, staying costs a little fairness, bounded by the
	// slack.
	DefaultSlack = 0.02
	// DefaultMinStay is how long a worker stays on a job it moved to
	// before fairness may move it again (a job that stops, or a job of a
	// higher priority, moves it at once): a move costs a snapshot download
	// and a backend's preparation, so a grid of equal jobs must not
	// reshuffle its workers at every lease.
	DefaultMinStay = 2 * time.Second
)

// Pool is the grid's record of compute per job. The zero value is ready
// to use with the defaults.
type Pool struct {
	HalfLife time.Duration
	Slack    float64
	MinStay  time.Duration
	used     map[string]decayed
}

// decayed is a sum that halves every HalfLife, the weight its job had
// when last ordered, and when that was.
type decayed struct {
	v      float64
	at     time.Time
	weight float64
	seen   time.Time // the last Order that had the job
}

func (p *Pool) halfLife() time.Duration {
	if p.HalfLife > 0 {
		return p.HalfLife
	}
	return DefaultHalfLife
}

func (p *Pool) minStay() time.Duration {
	if p.MinStay > 0 {
		return p.MinStay
	}
	return DefaultMinStay
}

func (p *Pool) slack() float64 {
	if p.Slack > 0 {
		return p.Slack
	}
	return DefaultSlack
}

// Used is job id's recent compute at now, decayed.
func (p *Pool) Used(id string, now time.Time) float64 {
	d, ok := p.used[id]
	if !ok {
		return 0
	}
	dt := now.Sub(d.at)
	if dt <= 0 {
		return d.v
	}
	return d.v * math.Exp2(-dt.Seconds()/p.halfLife().Seconds())
}

// Charge adds work (FLOPs granted) to job id at now.
func (p *Pool) Charge(id string, work float64, now time.Time) {
	if !(work > 0) || math.IsInf(work, 0) {
		return
	}
	if p.used == nil {
		p.used = map[string]decayed{}
	}
	if _, ok := p.used[id]; !ok {
		return // not ordered yet: join sets its start
	}
	d := p.used[id]
	d.v, d.at = p.Used(id, now)+work, now
	p.used[id] = d
}

// rejoinAfter is how long a job may be missing from the orders (paused,
// say) before it comes back as a newcomer.
const rejoinAfter = 5 * time.Second

// join starts each job the pool has not seen, or has not seen for
// rejoinAfter, level with the neediest job of its priority (use over
// weight), as a stride scheduler starts a newcomer at the global pass: it
// is served at once, but does not take the whole grid until it has caught
// up with a past it was not in. A returning job keeps its own use when
// that is higher.
func (p *Pool) join(jobs []*Job, now time.Time) {
	if p.used == nil {
		p.used = map[string]decayed{}
	}
	least := map[int]float64{}
	var fresh []*Job
	for _, j := range jobs {
		if !(j.Weight > 0) {
			continue
		}
		d, ok := p.used[j.ID]
		if !ok || now.Sub(d.seen) > rejoinAfter {
			fresh = append(fresh, j)
			continue
		}
		n := p.Used(j.ID, now) / j.Weight
		if m, ok := least[j.Priority]; !ok || n < m {
			least[j.Priority] = n
		}
	}
	for _, j := range fresh {
		v := max(least[j.Priority]*j.Weight, p.Used(j.ID, now))
		p.used[j.ID] = decayed{v: v, at: now, weight: j.Weight, seen: now}
	}
	for _, j := range jobs {
		if d, ok := p.used[j.ID]; ok {
			d.seen = now
			p.used[j.ID] = d
		}
	}
}

// reweigh scales job j's past use when its weight changed since the last
// Order, so that a new weight applies from now on: its use over weight
// stays where it was, and the next leases split by the new weights at
// once instead of first paying back (or collecting) the past.
func (p *Pool) reweigh(j *Job) {
	d, ok := p.used[j.ID]
	if !ok {
		return
	}
	if d.weight > 0 && d.weight != j.Weight {
		d.v *= j.Weight / d.weight
	}
	d.weight = j.Weight
	p.used[j.ID] = d
}

// Forget drops job id's record (it ended).
func (p *Pool) Forget(id string) { delete(p.used, id) }

// Order returns the jobs w can run (Fit), best first: by priority, then
// by recent compute over weight, the neediest first, except that w's
// current job, and after it a job whose data w holds, go first when
// within the slack of the neediest of their priority (the current job
// also while w has been on it less than MinStay). jobs is not
// modified. A job whose weight changed since the last Order has its past
// use rescaled to the new weight (reweigh).
func (p *Pool) Order(w *Worker, jobs []*Job, now time.Time) []*Job {
	type cand struct {
		j     *Job
		need  float64 // used / weight: lower is needier
		bonus int     // 2 current, 1 holds its data
	}
	p.join(jobs, now)
	var cs []cand
	for _, j := range jobs {
		if Fit(w, j) != "" || !(j.Weight > 0) {
			continue
		}
		p.reweigh(j)
		c := cand{j: j, need: p.Used(j.ID, now) / j.Weight}
		switch {
		case j.ID == w.Current:
			c.bonus = 2
		case j.Data != "" && slices.Contains(w.Data, j.Data):
			c.bonus = 1
		}
		cs = append(cs, c)
	}
	// The neediest of each priority sets the bar for near-ties.
	least := map[int]float64{}
	for _, c := range cs {
		if m, ok := least[c.j.Priority]; !ok || c.need < m {
			least[c.j.Priority] = c.need
		}
	}
	// The current job stays first within its priority while w is new to
	// it; the best priority still wins.
	staying := !w.Since.IsZero() && now.Sub(w.Since) < p.minStay()
	near := func(c cand) bool {
		if c.bonus == 2 && staying {
			return true
		}
		m := least[c.j.Priority]
		return c.bonus > 0 && c.need <= m*(1+p.slack())
	}
	slices.SortStableFunc(cs, func(a, b cand) int {
		if a.j.Priority != b.j.Priority {
			return cmp.Compare(b.j.Priority, a.j.Priority)
		}
		na, nb := near(a), near(b)
		switch {
		case na && nb && a.bonus != b.bonus:
			return cmp.Compare(b.bonus, a.bonus)
		case na && !nb:
			return -1
		case nb && !na:
			return 1
		}
		if c := cmp.Compare(a.need, b.need); c != 0 {
			return c
		}
		return cmp.Compare(a.j.ID, b.j.ID)
	})
	out := make([]*Job, len(cs))
	for i, c := range cs {
		out[i] = c.j
	}
	return out
}
