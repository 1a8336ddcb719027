package placement

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// grid simulates workers that ask the pool which job to take next, as
// the coordinator's route does: each holds up to prefetch leases of 1e9
// FLOPs, asks for one more after each result, and falls through to the
// next job in its order while a job has no task free. A job with an
// epoch of n leases has none free at the end of each epoch until all its
// leases are back (an epoch's tail). A lease takes 100 ms, or 100 to
// 140 ms with jitter.
//
// It is a discrete-event simulation on its own clock, one event at a
// time (the earliest result, ties to the lowest worker), so a seed gives
// the same run every time.
type grid struct {
	now      time.Time
	pool     Pool
	jobs     []*Job
	done     map[string]float64 // FLOPs computed per job
	moves    int
	worker   []*Worker
	held     [][]string  // per worker: the jobs of its leases, oldest first
	next     []time.Time // per worker: when its oldest lease's result is in
	prefetch int
	jitter   *rand.Rand
	epoch    map[string]int // leases per epoch; 0: endless
	left     map[string]int // leases free in the epoch
	out      map[string]int // leases out
	started  bool
}

const leaseFLOPs = 1e9

// want places one lease for w, as route does; "" when no job has one.
func (g *grid) want(w *Worker) string {
	for rank, j := range g.pool.Order(w, g.jobs, g.now) {
		if g.epoch[j.ID] > 0 && g.left[j.ID] == 0 {
			continue // the epoch's tail: nothing free
		}
		g.left[j.ID]--
		g.out[j.ID]++
		g.pool.Charge(j.ID, leaseFLOPs, g.now)
		if w.Current != j.ID {
			if w.Current != "" {
				g.moves++
			}
			w.Since = g.now
			if rank > 0 {
				// Placed here only because the jobs before had
				// nothing free: no stay (Worker.Since).
				w.Since = time.Time{}
			}
		}
		w.Current = j.ID
		return j.ID
	}
	return ""
}

// fill asks for leases for worker i until it holds prefetch, and dates its
// next result when it has started one.
func (g *grid) fill(i int) {
	idle := len(g.held[i]) == 0
	for len(g.held[i]) < max(1, g.prefetch) {
		j := g.want(g.worker[i])
		if j == "" {
			break
		}
		g.held[i] = append(g.held[i], j)
	}
	if idle {
		// The lease it computes now, or a retry when it got none.
		took := 100 * time.Millisecond
		if g.jitter != nil {
			took += time.Duration(g.jitter.IntN(40)) * time.Millisecond
		}
		g.next[i] = g.now.Add(took)
	}
}

// run simulates d more of the grid.
func (g *grid) run(d time.Duration) {
	if !g.started {
		g.start()
	}
	end := g.now.Add(d)
	for {
		i := 0
		for k := range g.next {
			if g.next[k].Before(g.next[i]) {
				i = k
			}
		}
		if g.next[i].After(end) {
			g.now = end
			return
		}
		g.now = g.next[i]
		if len(g.held[i]) > 0 {
			j := g.held[i][0]
			g.held[i] = g.held[i][1:]
			g.done[j] += leaseFLOPs
			g.out[j]--
			if n := g.epoch[j]; n > 0 && g.left[j] == 0 && g.out[j] == 0 {
				g.left[j] = n // the next epoch
			}
		}
		// Its next lease starts now, if it holds one; then it asks for
		// more.
		if len(g.held[i]) > 0 {
			took := 100 * time.Millisecond
			if g.jitter != nil {
				took += time.Duration(g.jitter.IntN(40)) * time.Millisecond
			}
			g.next[i] = g.now.Add(took)
			g.fill(i)
			continue
		}
		g.fill(i)
	}
}

func newGrid(workers int, jobs ...*Job) *grid {
	g := &grid{now: time.Unix(1000, 0), jobs: jobs, done: map[string]float64{}, epoch: map[string]int{}, left: map[string]int{}, out: map[string]int{}}
	for range workers {
		g.worker = append(g.worker, &Worker{Kind: "native"})
	}
	g.held = make([][]string, workers)
	g.next = make([]time.Time, workers)
	return g
}

// start has every worker ask for its first leases, at the first run
// (after the test's settings: prefetch, jitter, epochs).
func (g *grid) start() {
	g.started = true
	for i := range g.worker {
		g.fill(i)
	}
}

func (g *grid) snapshot() map[string]float64 {
	out := map[string]float64{}
	for k, v := range g.done {
		out[k] = v
	}
	return out
}

// Six workers and weights 3:1 cannot be split evenly (4.5 : 1.5): shares
// must still come out 3:1 over a minute, with one worker moving between
// the jobs rather than all of them.
func TestSharesTrackWeights(t *testing.T) {
	a, b := &Job{ID: "a", Weight: 3}, &Job{ID: "b", Weight: 1}
	g := newGrid(6, a, b)
	g.run(10 * time.Second) // settle
	before := g.snapshot()
	moves := g.moves
	g.run(time.Minute)
	after := g.snapshot()
	ratio := (after["a"] - before["a"]) / (after["b"] - before["b"])
	if math.Abs(ratio-3)/3 > 0.05 {
		t.Errorf("compute ratio a:b over a minute %.3f, want 3 within 5%%", ratio)
	}
	// 600 leases a worker-minute in all; a move per lease would be
	// hundreds.
	if m := g.moves - moves; m > 120 {
		t.Errorf("%d moves between jobs in a minute: workers thrash", m)
	}
	t.Logf("ratio %.3f, %d moves", ratio, g.moves-moves)
}

// The same over the ends of epochs: a job whose epoch is ending has no
// task free until its last leases are back, and its workers compute for
// the other job meanwhile. Neither that tail nor the stay after a move
// may cost it its share: a worker placed on a job only because the jobs
// before it had nothing free goes back as soon as they have.
func TestSharesTrackWeightsAcrossEpochEnds(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			a, b := &Job{ID: "a", Weight: 3}, &Job{ID: "b", Weight: 1}
			g := newGrid(6, a, b)
			g.prefetch, g.jitter = 2, rand.New(rand.NewPCG(seed, 1))
			// About 45 and 15 leases a second: an epoch of a ends
			// every 7 s, one of b every 20 s.
			g.epoch["a"], g.epoch["b"] = 300, 300
			g.left["a"], g.left["b"] = 300, 300
			g.run(10 * time.Second)
			before := g.snapshot()
			g.run(time.Minute)
			after := g.snapshot()
			ratio := (after["a"] - before["a"]) / (after["b"] - before["b"])
			t.Logf("seed %d: ratio %.3f", seed, ratio)
			if math.Abs(ratio-3)/3 > 0.05 {
				t.Errorf("seed %d: compute ratio a:b over a minute %.3f, want 3 within 5%%", seed, ratio)
			}
		})
	}
}

func TestChangedWeightTakesEffect(t *testing.T) {
	a, b := &Job{ID: "a", Weight: 3}, &Job{ID: "b", Weight: 1}
	g := newGrid(6, a, b)
	g.run(30 * time.Second)
	a.Weight, b.Weight = 1, 3
	// A second for the workers to move (each stays 2 s on a job it
	// moved to), then the next four seconds split about 1:3.
	g.run(time.Second)
	before := g.snapshot()
	g.run(4 * time.Second)
	after := g.snapshot()
	da, db := after["a"]-before["a"], after["b"]-before["b"]
	if !(db > 2*da) {
		t.Errorf("in seconds 1 to 5 after weights 3:1 became 1:3, a computed %.0f and b %.0f: b should get over twice a's", da, db)
	}
	before = after
	g.run(time.Minute)
	after = g.snapshot()
	ratio := (after["b"] - before["b"]) / (after["a"] - before["a"])
	if math.Abs(ratio-3)/3 > 0.05 {
		t.Errorf("b:a over the next minute %.3f, want 3 within 5%%", ratio)
	}
}

// A worker new to its job stays on it, unless a job of a higher priority
// has work.
func TestMinStay(t *testing.T) {
	now := time.Unix(100, 0)
	var p Pool
	a, b := &Job{ID: "a", Weight: 1}, &Job{ID: "b", Weight: 1}
	w := &Worker{Kind: "native", Current: "a", Since: now.Add(-time.Second)}
	p.Order(w, []*Job{a, b}, now)
	p.Charge("a", 1e12, now)
	if got := p.Order(w, []*Job{a, b}, now); got[0] != a {
		t.Fatalf("order %v one second after moving to a: want a first", ids(got))
	}
	w.Since = now.Add(-time.Minute)
	if got := p.Order(w, []*Job{a, b}, now); got[0] != b {
		t.Fatalf("order %v a minute after moving to a, far ahead: want b first", ids(got))
	}
	w.Since = now.Add(-time.Second)
	hi := &Job{ID: "hi", Weight: 1, Priority: 1}
	if got := p.Order(w, []*Job{a, b, hi}, now); got[0] != hi {
		t.Fatalf("order %v: a higher priority wins over a short stay", ids(got))
	}
}

func TestHigherPriorityFirst(t *testing.T) {
	now := time.Unix(0, 0)
	var p Pool
	hi, lo := &Job{ID: "hi", Priority: 1, Weight: 1}, &Job{ID: "lo", Weight: 100}
	p.Charge("hi", 1e12, now)
	got := p.Order(&Worker{Kind: "native", Current: "lo"}, []*Job{lo, hi}, now)
	if len(got) != 2 || got[0] != hi || got[1] != lo {
		t.Fatalf("order %v, want hi then lo: priority beats weight, use and stickiness", ids(got))
	}
}

// A new job starts level with the neediest: the next lease that puts the
// old job ahead sends a worker to it, but it does not take the whole
// grid to make up for a past it was not in.
func TestNewJobStartsLevel(t *testing.T) {
	now := time.Unix(0, 0)
	var p Pool
	old, fresh := &Job{ID: "old", Weight: 1}, &Job{ID: "new", Weight: 1}
	w := &Worker{Kind: "native", Current: "old"}
	p.Order(w, []*Job{old}, now)
	p.Charge("old", 1e12, now)
	if got := p.Order(w, []*Job{old, fresh}, now); got[0] != old {
		t.Fatalf("order %v: level, the worker stays on its job", ids(got))
	}
	if u := p.Used("new", now); u != 1e12 {
		t.Fatalf("the new job starts at %v, want the old job's 1e12", u)
	}
	p.Charge("old", 1e11, now)
	if got := p.Order(w, []*Job{old, fresh}, now); got[0] != fresh {
		t.Fatalf("order %v: once the old job is ahead the new one is first", ids(got))
	}
}

// A job back from a long pause comes back level with the others, not as
// far behind as its decayed past says: it must not take the whole grid
// while it catches up.
func TestResumedJobRejoinsLevel(t *testing.T) {
	now := time.Unix(1000, 0)
	var p Pool
	a, b := &Job{ID: "a", Weight: 1}, &Job{ID: "b", Weight: 1}
	w := &Worker{Kind: "native"}
	p.Order(w, []*Job{a, b}, now)
	p.Charge("a", 1e12, now)
	p.Charge("b", 1e12, now)
	for s := 1; s <= 60; s++ { // b paused: only a is ordered and charged
		now = now.Add(time.Second)
		p.Order(w, []*Job{a}, now)
		p.Charge("a", 5e10, now)
	}
	p.Order(w, []*Job{a, b}, now)
	if ua, ub := p.Used("a", now), p.Used("b", now); ub < ua*0.999 {
		t.Fatalf("b back after a minute's pause at %.3g against a's %.3g: it would take the grid until level", ub, ua)
	}
}

func TestDataLocalityBreaksNearTies(t *testing.T) {
	now := time.Unix(0, 0)
	var p Pool
	x, y := &Job{ID: "x", Weight: 1, Data: "set-x"}, &Job{ID: "y", Weight: 1, Data: "set-y"}
	p.Charge("x", 1e9, now)
	p.Charge("y", 1.01e9, now)
	w := &Worker{Kind: "native", Data: []string{"set-y"}}
	if got := p.Order(w, []*Job{x, y}, now); got[0] != y {
		t.Fatalf("order %v: y is within the slack and its data is on the worker", ids(got))
	}
	p.Charge("y", 1e9, now) // far ahead now
	if got := p.Order(w, []*Job{x, y}, now); got[0] != x {
		t.Fatalf("order %v: y is far ahead; locality must not starve x", ids(got))
	}
}

func TestFit(t *testing.T) {
	big := &Job{ID: "big", NeedMB: 3000, NumParams: 1e8, Layers: []string{"dense", "attention"}}
	for _, c := range []struct {
		w    Worker
		j    *Job
		want string // a word of the reason; "" fits
	}{
		{Worker{Kind: "browser", MemoryMB: 2048}, big, "3000 MB"},
		{Worker{Kind: "native", MemoryMB: 8192}, big, ""},
		{Worker{Kind: "native"}, big, ""}, // memory unknown, none required
		{Worker{Kind: "native", MemoryMB: 8192, MaxParams: 1e6}, big, "parameters"},
		{Worker{Kind: "native", MemoryMB: 8192, Layers: []string{"dense"}}, big, "attention"},
		{Worker{Kind: "browser", MemoryMB: 8192}, &Job{ID: "j", Needs: Needs{Kinds: []string{"native", "gpu"}}}, "native or gpu"},
		{Worker{Kind: "gpu", MemoryMB: 8192}, &Job{ID: "j", Needs: Needs{Kinds: []string{"native", "gpu"}}}, ""},
		{Worker{Kind: "native"}, &Job{ID: "j", Needs: Needs{MinMemoryMB: 1024}}, "unknown"},
		{Worker{Kind: "native", MemoryMB: 512}, &Job{ID: "j", Needs: Needs{MinMemoryMB: 1024}}, "1024 MB"},
		{Worker{Kind: "native", Pin: "other"}, &Job{ID: "j"}, "pinned"},
		{Worker{Kind: "native", Pin: "sweep1"}, &Job{ID: "j", Parent: "sweep1"}, ""},
		// A worker that computes in micro-batches needs one example's
		// activations, not the batch's; one that does not (a GPU), the batch's.
		{Worker{Kind: "browser", MemoryMB: 600, MicroBatches: true}, &Job{ID: "j", NeedMB: 1600, MicroNeedMB: 500}, ""},
		{Worker{Kind: "browser", MemoryMB: 600}, &Job{ID: "j", NeedMB: 1600, MicroNeedMB: 500}, "1600 MB"},
		{Worker{Kind: "browser", MemoryMB: 400, MicroBatches: true}, &Job{ID: "j", NeedMB: 1600, MicroNeedMB: 500}, "500 MB"},
		{Worker{Kind: "native", MemoryMB: 600, MicroBatches: true}, &Job{ID: "j", NeedMB: 1600, MicroNeedMB: 500, Needs: Needs{MinMemoryMB: 1024}}, "1024 MB"},
		// An RL job goes to workers that compute RL leases only: a browser
		// tab (which announces none) gets nothing of it.
		{Worker{Kind: "browser", MemoryMB: 8192}, &Job{ID: "rl", Needs: Needs{RL: true}}, "no RL leases"},
		{Worker{Kind: "native", RL: true}, &Job{ID: "rl", Needs: Needs{RL: true}}, ""},
		{Worker{Kind: "native", RL: true}, &Job{ID: "rl-diloco", Needs: Needs{RL: true, RLLocalSteps: true}}, "no learn leases of local steps"},
		{Worker{Kind: "native", RL: true, RLLocalSteps: true}, &Job{ID: "rl-diloco", Needs: Needs{RL: true, RLLocalSteps: true}}, ""},
		{Worker{Kind: "native", RL: true}, &Job{ID: "j"}, ""},
	} {
		got := Fit(&c.w, c.j)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("Fit(%+v, %s) = %q, want %q", c.w, c.j.ID, got, c.want)
		}
	}
	if got := new(Pool).Order(&Worker{Kind: "browser", MemoryMB: 2048}, []*Job{big}, time.Now()); len(got) != 0 {
		t.Errorf("a 2 GB browser was offered %v", ids(got))
	}
}

func ids(js []*Job) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}
