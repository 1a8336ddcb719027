package rljob

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rltask"
)

func addJob(t *testing.T, cfg Config) (*Job, rltask.Task) {
	t.Helper()
	task, err := rltask.New(rltask.Spec{Name: rltask.Add, Digits: 2})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GroupSize == 0 {
		cfg.GroupSize = 4
	}
	if cfg.MaxNewTokens == 0 {
		cfg.MaxNewTokens = 5
	}
	cfg.Temperature, cfg.Clip, cfg.Context = 1, 0.2, 32
	if cfg.Vocab == 0 {
		cfg.Vocab = 256
	}
	if cfg.MaxRolloutStaleness == 0 {
		cfg.MaxRolloutStaleness = 2
	}
	j, err := New(task, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return j, task
}

func tokens(s string) []int32 {
	out := make([]int32, len(s))
	for i := range s {
		out[i] = int32(s[i])
	}
	return out
}

func completion(s string) protocol.Rollout {
	lp := make([]float32, len(s))
	for i := range lp {
		lp[i] = -0.5
	}
	return protocol.Rollout{Tokens: tokens(s), LogProbs: lp}
}

// result answers a rollout lease with the given completions.
func result(id uint64, version int64, texts ...string) *protocol.Result {
	r := &protocol.Result{LeaseID: id, JobID: "rl", BaseVersion: version, Examples: len(texts)}
	for _, s := range texts {
		r.Rollouts = append(r.Rollouts, completion(s))
	}
	return r
}

// Rollout leases walk the task's problems in order, each prompt a newline
// and the problem's prompt, each with a sampling seed of its own.
func TestNextRolloutWalksTheProblems(t *testing.T) {
	j, task := addJob(t, Config{Seed: 3})
	seeds := map[uint64]bool{}
	for i := range 3 {
		r, err := j.NextRollout(uint64(10+i), 7)
		if err != nil {
			t.Fatal(err)
		}
		p := task.Problem(3, i)
		if Text(r.Prompt) != "\n"+p.Prompt || r.Problem != int64(i) || r.GroupSize != 4 || r.MaxNewTokens != 5 || len(r.Stop) != 1 || r.Stop[0] != '\n' {
			t.Errorf("rollout %d: %+v; want the prompt %q, group 4, 5 new tokens, stop at a newline", i, r, p.Prompt)
		}
		seeds[r.Seed] = true
	}
	if len(seeds) != 3 || j.Pending() != 3 {
		t.Errorf("%d distinct seeds, %d pending; want 3 and 3", len(seeds), j.Pending())
	}
}

// The coordinator scores each completion from its tokens with the task's
// checker: the right sum then a newline earns 1, anything else 0.
func TestScoreRewardsFromTokens(t *testing.T) {
	j, task := addJob(t, Config{Seed: 1})
	if _, err := j.NextRollout(1, 0); err != nil {
		t.Fatal(err)
	}
	ans := task.Problem(1, 0).Answer
	g, err := j.Score(1, 0, result(1, 0, ans+"\n", ans+"1\n", "x", ans))
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1, 0, 0, 1}
	for i := range want {
		if g.Rewards[i] != want[i] {
			t.Errorf("rewards %v, want %v", g.Rewards, want)
			break
		}
	}
	st := j.Stats()
	if st.Rollouts != 4 || st.Solved != 2 || j.Buffered() != 1 || j.Pending() != 0 {
		t.Errorf("stats %+v, buffered %d, pending %d; want 4 rollouts, 2 solved, 1 group buffered, none pending", st, j.Buffered(), j.Pending())
	}
	// A group whose rewards are all equal gives GRPO nothing: counted, not buffered.
	if _, err := j.NextRollout(2, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Score(2, 0, result(2, 0, "x", "y", "z", "0")); err != nil {
		t.Fatal(err)
	}
	if st := j.Stats(); st.Flat != 1 || j.Buffered() != 1 {
		t.Errorf("flat %d, buffered %d; want 1 and 1", st.Flat, j.Buffered())
	}
}

// A bad rollout result is refused with its reason and leaves the job as
// it was: nothing scored or buffered, the lease still pending.
func TestScoreRefusesBadRollouts(t *testing.T) {
	j, task := addJob(t, Config{Seed: 1})
	if _, err := j.NextRollout(1, 5); err != nil {
		t.Fatal(err)
	}
	ans := task.Problem(1, 0).Answer + "\n"
	for _, c := range []struct {
		name    string
		current int64
		res     *protocol.Result
		reason  string
		words   string
	}{
		{"out of vocabulary", 5, func() *protocol.Result {
			r := result(1, 5, ans, ans, ans, ans)
			r.Rollouts[2].Tokens[0] = 256
			return r
		}(), protocol.ReasonInvalid, "outside the vocabulary"},
		{"longer than max_new_tokens", 5, result(1, 5, ans, "123456", ans, ans), protocol.ReasonInvalid, "max_new_tokens"},
		{"too stale", 8, result(1, 5, ans, ans, ans, ans), protocol.ReasonStale, "3 versions behind"},
		{"positive log-prob", 5, func() *protocol.Result {
			r := result(1, 5, ans, ans, ans, ans)
			r.Rollouts[0].LogProbs[0] = 0.1
			return r
		}(), protocol.ReasonInvalid, "log_probs"},
		{"NaN log-prob", 5, func() *protocol.Result {
			r := result(1, 5, ans, ans, ans, ans)
			r.Rollouts[1].LogProbs[0] = float32(math.NaN())
			return r
		}(), protocol.ReasonInvalid, "log_probs"},
		{"group too small", 5, result(1, 5, ans, ans), protocol.ReasonInvalid, "asked for 4"},
		{"another version", 5, result(1, 4, ans, ans, ans, ans), protocol.ReasonInvalid, "named 5"},
		{"after its newline", 5, result(1, 5, ans, "1\n2", ans, ans), protocol.ReasonInvalid, "after the newline"},
		{"unknown lease", 5, result(9, 5, ans, ans, ans, ans), protocol.ReasonUnknownLease, "not pending"},
	} {
		id := c.res.LeaseID
		_, err := j.Score(id, c.current, c.res)
		var ref *Refusal
		if !errors.As(err, &ref) || ref.Reason != c.reason || !strings.Contains(ref.Detail, c.words) {
			t.Errorf("%s: %v; want %s mentioning %q", c.name, err, c.reason, c.words)
		}
		if st := j.Stats(); st.Rollouts != 0 || j.Buffered() != 0 || j.Pending() != 1 {
			t.Errorf("%s: the job changed: %d rollouts scored, %d buffered, %d pending", c.name, st.Rollouts, j.Buffered(), j.Pending())
		}
	}
	// The honest result is still taken.
	if _, err := j.Score(1, 7, result(1, 5, ans, ans, "0", ans)); err != nil {
		t.Errorf("the honest result after the refusals: %v", err)
	}
}

// Learn leases take the oldest fresh groups with the group-normalised
// advantages of their rewards, and never a group more than
// max_rollout_staleness versions old.
func TestNextLearnDrawsFreshGroups(t *testing.T) {
	j, task := addJob(t, Config{Seed: 1, GroupsPerLearn: 2})
	for i, v := range []int64{0, 1, 2, 3} {
		id := uint64(i + 1)
		if _, err := j.NextRollout(id, v); err != nil {
			t.Fatal(err)
		}
		ans := task.Problem(1, i).Answer + "\n"
		if _, err := j.Score(id, v, result(id, v, ans, "0", ans, "0")); err != nil {
			t.Fatal(err)
		}
	}
	// At version 4 the groups of versions 0 and 1 are 4 and 3 versions
	// old: dropped.
	if n := j.Fresh(4); n != 2 || j.Buffered() != 2 || j.Stats().Stale != 2 {
		t.Fatalf("at version 4: %d fresh, %d buffered, %d stale; want 2, 2, 2", n, j.Buffered(), j.Stats().Stale)
	}
	l, ok := j.NextLearn(4)
	if !ok || len(l.Groups) != 2 {
		t.Fatalf("learn at version 4: ok %v, %d groups; want the groups of versions 2 and 3", ok, len(l.Groups))
	}
	a := 0.5 / (0.5 + 1e-4)
	for _, g := range l.Groups {
		for i, c := range g.Completions {
			want := a
			if i%2 == 1 {
				want = -a
			}
			if math.Abs(c.Advantage-want) > 1e-9 {
				t.Errorf("advantage %v, want %v", c.Advantage, want)
			}
		}
	}
	if l.Clip != 0.2 || l.Temperature != 1 {
		t.Errorf("clip %v, temperature %v", l.Clip, l.Temperature)
	}
	if _, ok := j.NextLearn(4); ok {
		t.Error("a learn lease from an empty buffer")
	}
	st := j.Stats()
	if st.Groups != 2 || st.Stale != 2 || st.UsedStaleness[2] != 1 || st.UsedStaleness[1] != 1 {
		t.Errorf("stats %+v; want 2 groups used (at staleness 2 and 1) and 2 dropped as stale", st)
	}
}
