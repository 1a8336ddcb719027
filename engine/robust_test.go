package engine

import (
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

func norm(x []float32) float64 { return dist(x, make([]float32, len(x))) }

func sub(a, b []float32) []float32 {
	out := make([]float32, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

func scaled(x []float32, s float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = v * s
	}
	return out
}

// honest returns n updates near g: g plus a small deterministic spread.
func honest(rng *rand.Rand, g []float32, n int, spread float64) [][]float32 {
	var xs [][]float32
	for range n {
		x := make([]float32, len(g))
		for i, v := range g {
			x[i] = v + float32(rng.NormFloat64()*spread)
		}
		xs = append(xs, x)
	}
	return xs
}

// Results that agree pass centred clipping unchanged: their mean.
func TestCenteredClipAgreeingResultsGiveTheirMean(t *testing.T) {
	xs := [][]float32{vec(1, 0), vec(1, 0.1), vec(1, -0.1)}
	out := make([]float32, 2)
	if n := CenteredClip(out, xs, nil, 2, 3); n != 0 {
		t.Fatalf("%d of agreeing results clipped", n)
	}
	near(t, "centred clip", out, []float64{1, 0})
}

// A hostile result, sign-flipped and scaled 19x or huge, moves the centred
// clip by a bounded amount, where it drags the plain mean far off.
func TestCenteredClipBoundsHostileResult(t *testing.T) {
	g := vec(1, -2, 0.5, 3)
	for _, tc := range []struct {
		name string
		bad  []float32
	}{
		{"signflip 19x", scaled(g, -19)},
		{"huge", scaled(g, 1e30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			xs := honest(rng, g, 4, 0.1)
			hm := make([]float32, len(g))
			mean(hm, xs)
			all := append(xs, tc.bad)
			plain := make([]float32, len(g))
			mean(plain, all)
			out := make([]float32, len(g))
			CenteredClip(out, all, nil, 2, 3)
			off := dist(out, hm)
			// Each of 3 iterations moves the centre by at most r/n from
			// the hostile one, r = 2 x the median distance (at most about
			// the honest norm |g| = 3.8 plus noise).
			bound := 3 * 2 * (norm(g) + 0.5) / 5
			if !(off <= bound) || !Finite(out) {
				t.Fatalf("clip moved %.3g from the honest mean (bound %.3g): %v", off, bound, out)
			}
			if d := dist(plain, hm); d < 10*off {
				t.Fatalf("the plain mean is off by %.3g only, the attack is not real", d)
			}
			t.Logf("%s: centred clip off by %.3g, plain mean by %.3g", tc.name, off, dist(plain, hm))
		})
	}
}

// Starting from the previous aggregate, honest results near it make the
// radius small, and the hostile one gets r/n per iteration at most.
func TestCenteredClipFromPreviousAggregate(t *testing.T) {
	g := vec(1, 1)
	xs := [][]float32{vec(1.1, 1), vec(0.9, 1), vec(1, 1.1), vec(-19, -19)}
	out := make([]float32, 2)
	CenteredClip(out, xs, g, 2, 1)
	// distances from g: 0.1, 0.1, 0.1, 28.3: median 0.1, r 0.2; the
	// hostile result adds 0.2/4 along its direction.
	hostile := 0.2 / 4
	want := []float64{1 + (0.1-0.1)/4 - hostile/math.Sqrt2, 1 + 0.1/4 - hostile/math.Sqrt2}
	near(t, "one iteration", out, want)
}

// Bucketing averages random buckets of s results: every bucket is the
// mean of s distinct inputs, and the buckets' mean is the inputs' mean.
func TestBucketize(t *testing.T) {
	xs := [][]float32{vec(1), vec(2), vec(4), vec(8), vec(16)}
	b := Bucketize(xs, 2, rand.New(rand.NewPCG(7, 7)))
	if len(b) != 3 {
		t.Fatalf("%d buckets of 5 results by 2, want 3", len(b))
	}
	// Buckets of 2, 2 and 1 (the last is smaller): times its size each
	// is a sum of distinct powers of two, so it names its inputs.
	seen := 0
	for i, x := range b {
		size := 2
		if i == 2 {
			size = 1
		}
		v := int(x[0] * float32(size))
		if float32(v) != x[0]*float32(size) || bits(v) != size || seen&v != 0 {
			t.Fatalf("bucket %d = %v is not the mean of %d distinct inputs (buckets %v)", i, x[0], size, b)
		}
		seen |= v
	}
	if seen != 31 {
		t.Fatalf("buckets %v do not cover the 5 inputs once each", b)
	}
	again := Bucketize(xs, 2, rand.New(rand.NewPCG(7, 7)))
	for i := range b {
		if b[i][0] != again[i][0] {
			t.Fatalf("the same seed bucketed differently: %v, %v", b, again)
		}
	}
	if got := Bucketize(xs, 1, nil); len(got) != 5 {
		t.Fatalf("bucket 1 changed the results: %v", got)
	}
}

func TestTrimmedMeanAndMedianByHand(t *testing.T) {
	xs := [][]float32{vec(1, 10), vec(2, -50), vec(3, 30), vec(4, 40), vec(100, 20)}
	out := make([]float32, 2)
	TrimmedMean(out, xs, 0.2)
	// drop 1 and 100 / -50 and 40: (2+3+4)/3, (10+30+20)/3
	near(t, "trimmed mean", out, []float64{3, 20})
	Median(out, xs)
	near(t, "median of 5", out, []float64{3, 20})
	Median(out, xs[:4])
	near(t, "median of 4", out, []float64{2.5, 20})
	TrimmedMean(out, xs[:2], 0.49)
	near(t, "trimmed mean of 2 (nothing to drop)", out, []float64{1.5, -20})
}

func TestRobustCheckNamesTheProblem(t *testing.T) {
	for _, tc := range []struct {
		r    Robust
		want string
	}{
		{Robust{Method: "krum", Bucket: 1}, "method must be one of"},
		{Robust{Method: RobustCenteredClip, Tau: 0, Iterations: 3, Bucket: 1}, "tau must be"},
		{Robust{Method: RobustCenteredClip, Tau: 2, Iterations: 0, Bucket: 1}, "iterations must be"},
		{Robust{Method: RobustTrimmedMean, Trim: 0.5, Bucket: 1}, "trim must be"},
		{Robust{Method: RobustMedian, Bucket: 0}, "bucket must be"},
	} {
		err := tc.r.Check()
		if err == nil || !contains2(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.want)
		}
	}
	if err := (Robust{Method: RobustCenteredClip, Tau: 2, Iterations: 3, Bucket: 2}).Check(); err != nil {
		t.Fatal(err)
	}
}

func contains2(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A robust round refuses NaN and Inf without counting them, and closes on
// its honest results with the hostile one bounded.
func TestRoundsRobust(t *testing.T) {
	for _, method := range []string{RobustCenteredClip, RobustTrimmedMean, RobustMedian} {
		t.Run(method, func(t *testing.T) {
			r := NewRounds(5, 0, time.Minute, 2)
			r.Robust = Robust{Method: method, Tau: 2, Iterations: 3, Bucket: 1, Trim: 0.2}
			round, _ := r.Lease(time.Time{})
			for _, bad := range [][]float32{vec(float32(math.NaN()), 1), vec(1, float32(math.Inf(-1)))} {
				if d := r.Offer(Contribution{Update: bad, Round: round}); d.Accepted || d.Reason != ReasonInvalid {
					t.Fatalf("non-finite %v: %+v", bad, d)
				}
			}
			for _, u := range [][]float32{vec(1, 1), vec(1.1, 0.9), vec(0.9, 1.1), vec(1, 1.05), vec(-19e6, -19e6)} {
				if d := r.Offer(Contribution{Update: u, Round: round}); !d.Accepted {
					t.Fatalf("%v: %+v", u, d)
				}
			}
			s, ok := r.Ready(time.Time{})
			if !ok || s.Results != 5 {
				t.Fatalf("round did not close on 5 results: %+v %v", s, ok)
			}
			if off := dist(s.Update, vec(1, 1)); !(off < 1) {
				t.Fatalf("step %v is %.3g from the honest results", s.Update, off)
			}
		})
	}
}

// The asynchronous clip holds the first results until min(Warmup,
// Active) distinct workers have sent one: a huge update arriving first
// does not set the scale, and the warm-up step is bounded.
func TestClipperEarlyHugeUpdateDoesNotSetTheScale(t *testing.T) {
	a := &Async{MaxStaleness: 8, Clip: NewClipper(2, 2, 10*time.Second)}
	a.Clip.Active = 3
	now := time.Unix(1000, 0)
	a.SetNow(now)
	if d := a.Offer(Contribution{Update: vec(1e30, -1e30), Worker: "evil"}); !d.Accepted {
		t.Fatalf("held result: %+v", d)
	}
	if _, ok := a.Ready(now); ok {
		t.Fatal("stepped on the first result alone")
	}
	a.Offer(Contribution{Update: vec(1, 1), Worker: "a"})
	if _, ok := a.Ready(now); ok {
		t.Fatal("stepped with 2 of 3 workers")
	}
	a.Offer(Contribution{Update: vec(1.1, 0.9), Worker: "b"})
	s, ok := a.Ready(now)
	if !ok || s.Results != 3 {
		t.Fatalf("warm-up did not end with 3 workers: %+v", s)
	}
	if off := dist(s.Update, vec(1, 1)); !(off < 2) {
		t.Fatalf("warm-up step %v is %.3g from the honest ones", s.Update, off)
	}
	// After it, a huge update is clipped to the radius around the centre.
	d := a.Offer(Contribution{Update: vec(-1e30, 1e30), Worker: "evil"})
	if !d.Accepted || !d.Clipped {
		t.Fatalf("huge update after warm-up: %+v", d)
	}
	s, _ = a.Ready(now)
	if n := norm(s.Update); !(n < 3*norm(vec(1, 1))) {
		t.Fatalf("clipped huge update has norm %.3g", n)
	}
	if d := a.Offer(Contribution{Update: vec(float32(math.NaN()), 0), Worker: "evil"}); d.Accepted || d.Reason != ReasonInvalid {
		t.Fatalf("NaN: %+v", d)
	}
}

// With more workers expected than come, the warm-up ends WarmupTimeout
// after the first result; with two holding leases, results from both
// end it at once, and one from one does not.
func TestClipperWarmupTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &Async{MaxStaleness: 8, Clip: NewClipper(1, 2, 10*time.Second)}
		a.Clip.Active = 3
		a.SetNow(time.Now())
		a.Offer(Contribution{Update: vec(1), Worker: "a"})
		time.Sleep(9 * time.Second)
		if _, ok := a.Ready(time.Now()); ok {
			t.Fatal("warm-up ended before its timeout")
		}
		time.Sleep(time.Second)
		if s, ok := a.Ready(time.Now()); !ok || s.Results != 1 {
			t.Fatalf("warm-up did not end at its timeout: %+v", s)
		}
		// Two workers holding leases: one worker's results do not end the
		// warm-up, the other's do.
		b := &Async{MaxStaleness: 8, Clip: NewClipper(1, 2, 10*time.Second)}
		b.Clip.Active = 2
		b.SetNow(time.Now())
		b.Offer(Contribution{Update: vec(1e20), Worker: "evil"})
		b.Offer(Contribution{Update: vec(1e20), Worker: "evil"})
		if _, ok := b.Ready(time.Now()); ok {
			t.Fatal("one worker's results ended the warm-up")
		}
		b.Offer(Contribution{Update: vec(-1), Worker: "a"})
		s, ok := b.Ready(time.Now())
		if !ok || s.Results != 3 {
			t.Fatalf("warm-up did not end with 2 workers: %+v", s)
		}
		// scale 1 (the smaller mean norm), radius 2: (2 - 1)/2
		near(t, "warm-up step", s.Update, []float64{0.5})
	})
}

// A ratcheting attacker (a norm 5% larger each time, one update in three)
// cannot grow the radius: it stays within a small multiple of the honest
// scale after a thousand updates, and every applied update is bounded.
func TestClipperRatchetIsBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	g := vec(1, -1, 0.5)
	a := &Async{MaxStaleness: 8, Clip: NewClipper(3, 1.5, time.Second)}
	a.Clip.Active = 3
	now := time.Unix(0, 0)
	for i, w := range []string{"a", "b", "c"} {
		a.Offer(Contribution{Update: honest(rng, g, 1, 0.2)[0], Worker: w})
		_ = i
	}
	if _, ok := a.Ready(now); !ok {
		t.Fatal("no warm-up step")
	}
	bad := scaled(g, -1)
	worst := 0.0
	for i := range 1000 {
		var u []float32
		w := []string{"a", "b", "evil"}[i%3]
		if w == "evil" {
			bad = scaled(bad, 1.05)
			u = bad
		} else {
			u = honest(rng, g, 1, 0.2)[0]
		}
		if d := a.Offer(Contribution{Update: u, Worker: w}); !d.Accepted {
			t.Fatal(d)
		}
		s, ok := a.Ready(now)
		if !ok {
			t.Fatal("no step")
		}
		worst = max(worst, norm(s.Update))
	}
	if r := a.Clip.Radius(); !(r < 3) {
		t.Fatalf("radius grew to %.3g (honest spread about 0.35, |g| 1.5)", r)
	}
	if !(worst < 5) {
		t.Fatalf("an applied update had norm %.3g", worst)
	}
	if norm(bad) < 1e6 {
		t.Fatalf("the ratchet only reached %.3g", norm(bad))
	}
	t.Logf("after 1000 updates: radius %.3g, largest applied norm %.3g, attacker's norm %.3g, %d clipped", a.Clip.Radius(), worst, norm(bad), a.Clip.Clipped)
}

func bits(v int) int {
	n := 0
	for ; v != 0; v &= v - 1 {
		n++
	}
	return n
}

// A lone worker's first result ends the warm-up at once.
func TestClipperLoneWorker(t *testing.T) {
	a := &Async{MaxStaleness: 8, Clip: NewClipper(1, 2, 10*time.Second)}
	a.Clip.Active = 1
	a.Offer(Contribution{Update: vec(3), Worker: "a"})
	if s, ok := a.Ready(time.Time{}); !ok || s.Results != 1 {
		t.Fatalf("lone worker's first result held: %+v", s)
	}
}

// Fewer than 3 results have no majority: every method takes the mean.
func TestRobustFewResultsTakeTheMean(t *testing.T) {
	out := make([]float32, 1)
	for _, m := range []string{RobustCenteredClip, RobustTrimmedMean, RobustMedian} {
		r := Robust{Method: m, Tau: 1.5, Iterations: 3, Bucket: 1, Trim: 0.2}
		r.Aggregate(out, [][]float32{vec(1), vec(10)}, vec(0), nil)
		near(t, m, out, []float64{5.5})
	}
}

// With worker momentum the clip sees each worker's average: m = 0.5·2 +
// 0.5·4 = 3 for a worker that sent 2 then 4.
func TestClipperWorkerMomentum(t *testing.T) {
	a := &Async{MaxStaleness: 8, Clip: NewClipper(1, 100, time.Second)}
	a.Clip.Momentum = 0.5
	a.Clip.Active = 1
	a.Offer(Contribution{Update: vec(2), Worker: "a"})
	a.Ready(time.Time{}) // the warm-up: 2 applied, the centre at 2
	a.Offer(Contribution{Update: vec(2), Worker: "a"})
	a.Ready(time.Time{})
	a.Offer(Contribution{Update: vec(4), Worker: "a"})
	s, _ := a.Ready(time.Time{})
	near(t, "momentum step", s.Update, []float64{3})
	a.Clip.Forget("a")
	a.Offer(Contribution{Update: vec(5), Worker: "a"})
	s, _ = a.Ready(time.Time{})
	near(t, "after Forget", s.Update, []float64{5})
}
