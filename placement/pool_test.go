package placement

import (
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// grid simulates workers that each compute one lease at a time, asking the
// pool which job to take next: leases of 1e9 FLOPs that take 100 ms on
// every worker.
type grid struct {
	mu     sync.Mutex
	pool   Pool
	jobs   []*Job
	done   map[string]float64 // FLOPs computed per job
	moves  int
	worker []*Worker
}

const leaseFLOPs = 1e9

func (g *grid) run(d time.Duration) {
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for _, w := range g.worker {
		wg.Go(func() {
			for time.Now().Before(end) {
				g.mu.Lock()
				order := g.pool.Order(w, g.jobs, time.Now())
				var j *Job
				if len(order) > 0 {
					j = order[0]
					g.pool.Charge(j.ID, leaseFLOPs, time.Now())
					if w.Current != j.ID {
						if w.Current != "" {
							g.moves++
						}
						w.Since = time.Now()
					}
					w.Current = j.ID
				}
				g.mu.Unlock()
				time.Sleep(100 * time.Millisecond)
				if j != nil {
					g.mu.Lock()
					g.done[j.ID] += leaseFLOPs
					g.mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}

func newGrid(workers int, jobs ...*Job) *grid {
	g := &grid{jobs: jobs, done: map[string]float64{}}
	for range workers {
		g.worker = append(g.worker, &Worker{Kind: "native"})
	}
	return g
}

func (g *grid) snapshot() map[string]float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
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
	synctest.Test(t, func(t *testing.T) {
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
	})
}

func TestChangedWeightTakesEffect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := &Job{ID: "a", Weight: 3}, &Job{ID: "b", Weight: 1}
		g := newGrid(6, a, b)
		g.run(30 * time.Second)
		g.mu.Lock()
		a.Weight, b.Weight = 1, 3
		g.mu.Unlock()
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
	})
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
