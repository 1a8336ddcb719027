package attack

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/protocol"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func TestScaledIsSignFlippedAndScaled(t *testing.T) {
	out := make([]float32, 3)
	scaled(out, []float32{1, -2, 0.5}, 19)
	want := []float32{-19, 38, -9.5}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("scaled = %v, want %v", out, want)
		}
	}
}

// ALIE and IPM on hand-computed vectors: updates (1,2), (3,2), (2,8):
// mean (2,4), population std (sqrt(2/3), sqrt(8)).
func TestALIEAndIPMOnHandComputedVectors(t *testing.T) {
	us := [][]float32{{1, 2}, {3, 2}, {2, 8}}
	out := make([]float32, 2)
	alie(out, us, 1.5)
	if !near(float64(out[0]), 2-1.5*math.Sqrt(2.0/3)) || !near(float64(out[1]), 4-1.5*math.Sqrt(8)) {
		t.Fatalf("alie = %v", out)
	}
	ipm(out, us, 0.5)
	if out[0] != -1 || out[1] != -2 {
		t.Fatalf("ipm = %v, want [-1 -2]", out)
	}
}

func TestFlipLabels(t *testing.T) {
	l := []int32{0, 9, 3}
	flipLabels(l, 10)
	if l[0] != 9 || l[1] != 0 || l[2] != 6 {
		t.Fatalf("flipped = %v, want [9 0 6]", l)
	}
}

func TestNoiseHasTheAskedNorm(t *testing.T) {
	out := make([]float32, 1000)
	noise(out, rand.New(rand.NewPCG(1, 2)), 3.5)
	if n := norm(out); !near(n, 3.5) {
		t.Fatalf("noise norm %v, want 3.5", n)
	}
}

// A lone attacker's pool holds its last two honest updates, so that ALIE
// has a spread; with several attackers, one update each.
func TestPoolKeepsLatestPerAttacker(t *testing.T) {
	p := newPool()
	if got := p.add(0, []float32{1}); len(got) != 1 {
		t.Fatalf("first add: %v", got)
	}
	if got := p.add(0, []float32{3}); len(got) != 2 || got[0][0]+got[1][0] != 4 {
		t.Fatalf("lone attacker's second add: %v, want its last two", got)
	}
	q := newPool()
	q.add(0, []float32{1})
	q.add(1, []float32{2})
	got := q.add(0, []float32{5})
	if len(got) != 2 || got[0][0]+got[1][0] != 7 {
		t.Fatalf("two attackers: %v, want the latest of each (5 and 2)", got)
	}
}

func TestParseKindAndCheck(t *testing.T) {
	for _, k := range Kinds {
		if got, err := ParseKind(string(k)); err != nil || got != k {
			t.Errorf("ParseKind(%q) = %q, %v", k, got, err)
		}
	}
	if _, err := ParseKind("krum"); err == nil || !strings.Contains(err.Error(), "signflip") {
		t.Fatalf("unknown kind: %v; want an error listing the kinds", err)
	}
	bad := []struct {
		cfg  Config
		word string
	}{
		{Config{Coordinator: "http://x", Kind: Sybil}, "ws://"},
		{Config{Coordinator: "ws://x/ws", Kind: "krum"}, "krum"},
		{Config{Coordinator: "ws://x/ws", Kind: Sybil, N: -1}, "n must"},
		{Config{Coordinator: "ws://x/ws", Kind: Sybil, Scale: math.NaN()}, "scale"},
		{Config{Coordinator: "ws://x/ws", Kind: Sybil, Bind: "localhost:9"}, "bind"},
		{Config{Coordinator: "ws://x/ws", Kind: SignFlip}, "NewBackend"},
		{Config{Coordinator: "ws://x/ws", Kind: SignFlip, Fraction: 1.5}, "fraction"},
		{Config{Coordinator: "ws://x/ws", Kind: SignFlip, Fraction: -0.1}, "fraction"},
		{Config{Coordinator: "ws://x/ws", Kind: SignFlip, Fraction: math.NaN()}, "fraction"},
		{Config{Coordinator: "ws://x/ws", Kind: Hostage, Fraction: 0.5}, "fraction"},
		{Config{Coordinator: "ws://x/ws", Kind: NaN, Fraction: 0.5}, "NewBackend"},
	}
	for _, b := range bad {
		if err := b.cfg.Check(); err == nil || !strings.Contains(err.Error(), b.word) {
			t.Errorf("%+v: %v, want an error naming %q", b.cfg, err, b.word)
		}
	}
	c := Config{Coordinator: "ws://x/ws", Kind: Sybil}
	if err := c.Check(); err != nil || c.N != 20 {
		t.Fatalf("sybil defaults: n %d, %v", c.N, err)
	}
	c = Config{Coordinator: "ws://x/ws", Kind: Early, NewBackend: nil}
	if err := c.Check(); err == nil {
		t.Fatal("early computes: a missing backend must be refused")
	}
}

// ratchet's multiplier grows by 1+S with each accepted result and halves,
// not below 1, with each rejected one.
func TestRatchetFollowsTheAcks(t *testing.T) {
	cfg := Config{Coordinator: "ws://x/ws", Kind: Ratchet, NewBackend: nil}
	cfg.Scale = 0.5
	r := &Report{Kind: Ratchet, Variants: map[string]*Count{}}
	a := &attacker{sh: &shared{cfg: cfg, report: r}, ratchet: 1}
	c := &conn{a: a, sent: map[uint64][]string{}, lastResult: map[uint64]*protocol.Result{}}
	steps := []struct {
		accepted bool
		want     float64
	}{{true, 1.5}, {true, 2.25}, {false, 1.125}, {false, 1}, {false, 1}, {true, 1.5}}
	for i, s := range steps {
		id := uint64(i + 1)
		c.sent[id] = []string{"forged"}
		reason := ""
		if !s.accepted {
			reason = protocol.ReasonInvalid
		}
		c.ack(&protocol.Ack{LeaseID: id, Accepted: s.accepted, Reason: reason})
		if a.ratchet != s.want {
			t.Fatalf("step %d: multiplier %v, want %v", i, a.ratchet, s.want)
		}
	}
	if tot := r.Totals(); tot.Accepted != 3 || tot.Rejected != 3 || tot.Reasons[protocol.ReasonInvalid] != 3 {
		t.Fatalf("totals %+v", tot)
	}
	// An ack for a lease never answered counts nothing.
	c.ack(&protocol.Ack{LeaseID: 99, Accepted: true})
	if tot := r.Totals(); tot.Accepted != 3 {
		t.Fatalf("an ack for an unanswered lease was counted: %+v", tot)
	}
}
