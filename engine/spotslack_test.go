package engine

import (
	"math"
	"math/rand/v2"
	"testing"
)

// quantI8 is the i8 update codec in miniature (protocol/updatecodec.go):
// blocks of 256 values sent as min + code·step, step = range/255. It
// returns what the receiver decodes and the codec's slack
// (protocol.UpdateSlack): 3·sqrt(Σ count·(step/2)²).
func quantI8(u []float32) (sent []float32, slack float64) {
	sent = make([]float32, len(u))
	var sum float64
	for s := 0; s < len(u); s += 256 {
		blk := u[s:min(s+256, len(u))]
		lo, hi := blk[0], blk[0]
		for _, v := range blk {
			lo, hi = min(lo, v), max(hi, v)
		}
		step := float32((float64(hi) - float64(lo)) / 255)
		for i, v := range blk {
			var c float64
			if step > 0 {
				c = math.Floor((float64(v)-float64(lo))/float64(step) + 0.5)
			}
			sent[s+i] = lo + float32(c)*step
		}
		sum += float64(len(blk)) * float64(step/2) * float64(step/2)
	}
	return sent, 3 * math.Sqrt(sum)
}

// An i8 primary (sent with error feedback: the update plus the residual
// carried in, quantised) agrees with its exact f32 copy within the
// codec's slack; the same primary with its sign flipped does not.
func TestSpotCheckI8PrimaryWithinSlack(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 1000
	u := make([]float32, n)
	for i := range u {
		u[i] = float32(r.NormFloat64() * 0.01)
	}
	// The residual a previous send left: within half a step of its own.
	prev := make([]float32, n)
	for i := range prev {
		prev[i] = float32(r.NormFloat64() * 0.01)
	}
	q, _ := quantI8(prev)
	acc := make([]float32, n)
	for i := range acc {
		acc[i] = u[i] + (prev[i] - q[i])
	}
	sent, slack := quantI8(acc)
	flipped := make([]float32, n)
	for i, v := range sent {
		flipped[i] = -v
	}

	for _, c := range []struct {
		name    string
		primary []float32
		slack   float64
		agree   bool
	}{
		{"i8 within its slack", sent, slack, true},
		{"i8 without slack", sent, 0, false}, // the slack is what lets it pass
		{"sign flipped", flipped, slack, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := newSpotTest(0.05)
			p.Open(Lease{ID: 1, Base: 3, Task: Task{Count: 8}},
				SpotResult{Volunteer: "a", Hint: "browser/wasm", Update: c.primary, Examples: 8, Applied: true, Slack: c.slack})
			o := copyTo(t, p, 2, "b", "native/go", u, nil)
			if o.Agreed != c.agree {
				t.Fatalf("agreed %v, want %v: %s", o.Agreed, c.agree, o.Detail)
			}
			if c.agree && (!o.Done || p.Counters.Agreed != 1) {
				t.Fatalf("outcome %+v, counters %+v", o, p.Counters)
			}
			if !c.agree && (o.Done || p.Counters.Mismatched != 1) {
				t.Fatalf("outcome %+v, counters %+v: want the check left to the coordinator", o, p.Counters)
			}
			// A lossy primary never joins a class: it is never bit for bit.
			if p.Standing("a").Class != 0 {
				t.Fatalf("a joined class %d", p.Standing("a").Class)
			}
		})
	}
}

// A sign-flipped i8 primary is struck even with its slack: the exact
// copy and the coordinator's recomputation agree, not with it.
func TestSpotCheckI8FlippedPrimaryStruck(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	u := make([]float32, 600)
	for i := range u {
		u[i] = float32(r.NormFloat64() * 0.01)
	}
	sent, slack := quantI8(u)
	for i := range sent {
		sent[i] = -sent[i]
	}
	p, _ := newSpotTest(0.05)
	p.Open(Lease{ID: 1, Base: 3, Task: Task{Count: 8}},
		SpotResult{Volunteer: "a", Hint: "browser/wasm", Update: sent, Examples: 8, Applied: true, Slack: slack})
	if o := copyTo(t, p, 2, "b", "native/go", u, nil); o.Done {
		t.Fatalf("first copy settled it: %+v", o)
	}
	o := refereeDecides(t, p, u)
	if !o.Done || len(o.Struck) != 1 || o.Struck[0] != "a" || len(o.Refute) != 1 {
		t.Fatalf("outcome %+v, want a struck and refuted", o)
	}
}
