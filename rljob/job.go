package rljob

import (
	"errors"
	"fmt"

	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rl"
	"github.com/crowdtrain/crowdtrain/rltask"
)

// Newline ends an answer: a rollout stops after it.
const Newline = '\n'

// Config is an RL job's settings (its spec's RL keys).
type Config struct {
	GroupSize           int
	MaxNewTokens        int
	Temperature         float64
	Clip                float64
	MaxRolloutStaleness int64
	// Seed picks the job's stream of training problems and the sampling
	// seeds of its rollout leases.
	Seed uint64
	// Vocab is the policy's vocabulary: a completion token must be below.
	Vocab int
	// Context is the policy's context: a prompt and its completion fit.
	Context int
	// GroupsPerLearn is how many scored groups a learn lease carries
	// (0: 4).
	GroupsPerLearn int
	// MaxBuffered bounds the scored groups kept (0: 256): past it the
	// oldest go first.
	MaxBuffered int
	// Codec is how the policy's tokens stand for text (nil: bytes).
	Codec *Codec
}

// Job is an RL job's rollout, scoring and buffer state. It is not safe
// for concurrent use: the coordinator holds its job's lock.
type Job struct {
	cfg  Config
	task rltask.Task
	// next is the index of the next training problem to roll out.
	next    int64
	pending map[uint64]pendingRollout
	buffer  []Group
	stats   Stats
}

type pendingRollout struct {
	problem int64
	version int64
	prompt  []int32
}

// Group is a scored group: its prompt, completions and their rewards,
// and the policy version it was sampled from.
type Group struct {
	Problem  int64
	Version  int64
	Prompt   []int32
	Rollouts []protocol.Rollout
	Rewards  []float64
}

// Stats count what the job's rollouts did.
type Stats struct {
	Rollouts int64 // completions scored
	Solved   int64 // of them, exactly right
	Refused  int64 // rollout results refused
	Groups   int64 // groups that fed a learn lease
	// Forged is how many refused results were refused because their
	// log-probabilities were not the policy's (CheckLogProbs).
	Forged int64
	// Flat is how many scored groups were dropped because every
	// completion had the same reward: GRPO gets no signal from them.
	Flat int64
	// Stale is how many buffered groups aged past max_rollout_staleness
	// before a learn lease took them.
	Stale int64
	// UsedStaleness[s] counts groups that fed a learn lease s versions
	// after the version they were sampled from.
	UsedStaleness map[int64]int64
}

// New returns the RL state of a job on task.
func New(task rltask.Task, cfg Config) (*Job, error) {
	switch {
	case task == nil:
		return nil, errors.New("rljob: no task")
	case cfg.GroupSize < 2 || cfg.MaxNewTokens < 1 || cfg.Vocab < 1 || cfg.Context < 2:
		return nil, fmt.Errorf("rljob: group size %d, max new tokens %d, vocabulary %d and context %d; want at least 2, 1, 1, 2", cfg.GroupSize, cfg.MaxNewTokens, cfg.Vocab, cfg.Context)
	case cfg.Codec == nil && cfg.Vocab <= Newline:
		return nil, fmt.Errorf("rljob: a vocabulary of %d tokens has no newline: the policy must read bytes, or give its tokenizer", cfg.Vocab)
	case cfg.Codec != nil && cfg.Codec.tok != nil && cfg.Codec.tok.VocabSize() > cfg.Vocab:
		return nil, fmt.Errorf("rljob: the tokenizer has %d tokens, the policy's vocabulary %d", cfg.Codec.tok.VocabSize(), cfg.Vocab)
	case cfg.Codec != nil && len(cfg.Codec.stops) == 0:
		return nil, errors.New("rljob: no token of the tokenizer holds a newline: a completion could never end")
	case cfg.Codec != nil && len(cfg.Codec.stops) > protocol.MaxStopTokens:
		return nil, fmt.Errorf("rljob: %d tokens of the tokenizer hold a newline, more than a rollout lease carries (%d): train the policy with a tokenizer of fewer", len(cfg.Codec.stops), protocol.MaxStopTokens)
	case !(cfg.Temperature > 0) || !(cfg.Clip > 0 && cfg.Clip < 1) || cfg.MaxRolloutStaleness < 0:
		return nil, fmt.Errorf("rljob: temperature %v, clip %v, max rollout staleness %d out of range", cfg.Temperature, cfg.Clip, cfg.MaxRolloutStaleness)
	}
	if cfg.GroupsPerLearn == 0 {
		cfg.GroupsPerLearn = 4
	}
	if cfg.MaxBuffered == 0 {
		cfg.MaxBuffered = 256
	}
	if cfg.Codec == nil {
		cfg.Codec = Bytes()
	}
	return &Job{cfg: cfg, task: task, pending: map[uint64]pendingRollout{}, stats: Stats{UsedStaleness: map[int64]int64{}}}, nil
}

// Prompt is problem p's prompt as the policy reads it: a newline, then
// the prompt's bytes.
func Prompt(p rltask.Problem) []int32 {
	ids := make([]int32, 0, len(p.Prompt)+1)
	ids = append(ids, Newline)
	for _, c := range []byte(p.Prompt) {
		ids = append(ids, int32(c))
	}
	return ids
}

// Text is a completion's tokens as text, each token a byte.
func Text(tokens []int32) string {
	b := make([]byte, len(tokens))
	for i, t := range tokens {
		b[i] = byte(t)
	}
	return string(b)
}

// NextRollout returns the work of rollout lease id, computed from policy
// version: the next training problem's prompt, the group size and a
// sampling seed of its own. The lease is pending until Score or Forget.
func (j *Job) NextRollout(id uint64, version int64) (protocol.RolloutTask, error) {
	i := j.next
	p := j.task.Problem(j.cfg.Seed, int(i))
	prompt := j.cfg.Codec.Prompt(p)
	if len(prompt)+1 > j.cfg.Context {
		return protocol.RolloutTask{}, fmt.Errorf("problem %d's prompt is %d tokens: it leaves no room for an answer in the policy's context of %d", i, len(prompt), j.cfg.Context)
	}
	j.next++
	j.pending[id] = pendingRollout{problem: i, version: version, prompt: prompt}
	return protocol.RolloutTask{
		Prompt: prompt, Problem: i, GroupSize: j.cfg.GroupSize,
		MaxNewTokens: min(j.cfg.MaxNewTokens, j.cfg.Context-len(prompt)),
		Temperature:  j.cfg.Temperature, Seed: mix(j.cfg.Seed, uint64(i)), Stop: j.cfg.Codec.Stops(),
	}, nil
}

// Forget drops a pending rollout lease (expired, released).
func (j *Job) Forget(id uint64) { delete(j.pending, id) }

// Refusal is a rollout result refused: Reason is an ack reason
// (protocol.ReasonInvalid, ReasonStale, ReasonUnknownLease).
type Refusal struct {
	Reason string
	Detail string
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Detail }

func refuse(reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Score checks the result of rollout lease id at the current policy
// version and, if it is sound, scores each completion with the task's
// checker and buffers the group. Refused, it returns a *Refusal and
// leaves the job as it was, the lease still pending (its worker may
// not send another result: the coordinator drops it). Only the tokens
// are read: a worker has no way to claim a reward.
func (j *Job) Score(id uint64, current int64, res *protocol.Result) (*Group, error) {
	return j.ScoreVerified(id, current, res, nil)
}

// ScoreVerified is Score with one more check before the group is
// scored: verify, when not nil, is given what the result claims it
// sampled once it passed the job's bounds (the coordinator's check of
// its log-probabilities, CheckLogProbs), and a refusal from it refuses
// the result as Score's own do (counted in Stats.Forged as well when its
// reason is protocol.ReasonForged).
func (j *Job) ScoreVerified(id uint64, current int64, res *protocol.Result, verify func(Claim) *Refusal) (*Group, error) {
	pr, ok := j.pending[id]
	if !ok {
		j.stats.Refused++
		return nil, refuse(protocol.ReasonUnknownLease, "rollout lease %d is not pending: never issued, expired or already scored", id)
	}
	if err := j.check(pr, current, res); err != nil {
		j.stats.Refused++
		return nil, err
	}
	if verify != nil {
		if err := verify(j.claim(pr, res)); err != nil {
			j.stats.Refused++
			if err.Reason == protocol.ReasonForged {
				j.stats.Forged++
			}
			return nil, err
		}
	}
	delete(j.pending, id)
	p := j.task.Problem(j.cfg.Seed, int(pr.problem))
	g := Group{Problem: pr.problem, Version: pr.version, Prompt: pr.prompt, Rollouts: res.Rollouts, Rewards: make([]float64, len(res.Rollouts))}
	for i, r := range res.Rollouts {
		g.Rewards[i] = rltask.Reward(p, j.cfg.Codec.Text(r.Tokens))
		j.stats.Solved += int64(g.Rewards[i])
	}
	j.stats.Rollouts += int64(len(res.Rollouts))
	if flat(g.Rewards) {
		j.stats.Flat++
		return &g, nil
	}
	j.buffer = append(j.buffer, g)
	if over := len(j.buffer) - j.cfg.MaxBuffered; over > 0 {
		j.buffer = append(j.buffer[:0], j.buffer[over:]...)
	}
	return &g, nil
}

// check applies the job's bounds to a rollout result.
func (j *Job) check(pr pendingRollout, current int64, res *protocol.Result) *Refusal {
	if err := res.Validate(); err != nil {
		return refuse(protocol.ReasonInvalid, "%v", err)
	}
	switch {
	case len(res.Rollouts) != j.cfg.GroupSize:
		return refuse(protocol.ReasonInvalid, "%d completions, the lease asked for %d", len(res.Rollouts), j.cfg.GroupSize)
	case res.BaseVersion != pr.version:
		return refuse(protocol.ReasonInvalid, "computed from version %d, the lease named %d", res.BaseVersion, pr.version)
	case current-pr.version > j.cfg.MaxRolloutStaleness:
		return refuse(protocol.ReasonStale, "sampled from version %d, %d versions behind the current %d (max_rollout_staleness %d)",
			pr.version, current-pr.version, current, j.cfg.MaxRolloutStaleness)
	}
	maxNew := min(j.cfg.MaxNewTokens, j.cfg.Context-len(pr.prompt))
	for i, r := range res.Rollouts {
		if len(r.Tokens) > maxNew {
			return refuse(protocol.ReasonInvalid, "completion %d has %d tokens, more than max_new_tokens (%d)", i, len(r.Tokens), maxNew)
		}
		for k, tok := range r.Tokens {
			if int(tok) >= j.cfg.Vocab {
				return refuse(protocol.ReasonInvalid, "completion %d: token %d is %d, outside the vocabulary 0..%d", i, k, tok, j.cfg.Vocab-1)
			}
			if k != len(r.Tokens)-1 && j.cfg.Codec.stopsAt(tok) {
				return refuse(protocol.ReasonInvalid, "completion %d goes on after the newline that ends it (token %d)", i, k)
			}
		}
	}
	return nil
}

// NextLearn returns the work of a learn lease at the current version:
// up to GroupsPerLearn buffered groups, oldest first, none more than
// max_rollout_staleness versions behind (older ones are dropped), with
// the group-normalised advantages of their rewards. ok is false while
// the buffer holds no fresh group. The groups taken leave the buffer.
func (j *Job) NextLearn(current int64) (task protocol.LearnTask, ok bool) {
	n := min(j.Fresh(current), j.cfg.GroupsPerLearn)
	if n == 0 {
		return protocol.LearnTask{}, false
	}
	task = protocol.LearnTask{Clip: j.cfg.Clip, Temperature: j.cfg.Temperature}
	for _, g := range j.buffer[:n] {
		adv := rl.Advantages(g.Rewards, rl.DefaultEps)
		lg := protocol.LearnGroup{Prompt: g.Prompt}
		for i, r := range g.Rollouts {
			lg.Completions = append(lg.Completions, protocol.LearnCompletion{Tokens: r.Tokens, LogProbs: r.LogProbs, Advantage: adv[i]})
		}
		task.Groups = append(task.Groups, lg)
		j.stats.Groups++
		j.stats.UsedStaleness[current-g.Version]++
	}
	j.buffer = append(j.buffer[:0], j.buffer[n:]...)
	return task, true
}

// Fresh drops the buffered groups more than max_rollout_staleness
// versions behind current (counted in Stats.Stale) and returns how many
// are left: what NextLearn at current can draw from. A job in rounds
// gives a learn lease a place in its round only when a full one is
// there (coordinator/rljob.go).
func (j *Job) Fresh(current int64) int {
	kept := j.buffer[:0]
	for _, g := range j.buffer {
		if current-g.Version > j.cfg.MaxRolloutStaleness {
			j.stats.Stale++
			continue
		}
		kept = append(kept, g)
	}
	clear(j.buffer[len(kept):]) // no dropped group stays reachable
	j.buffer = kept
	return len(j.buffer)
}

// Buffered is how many scored groups wait for a learn lease.
func (j *Job) Buffered() int { return len(j.buffer) }

// Pending is how many rollout leases wait for their result.
func (j *Job) Pending() int { return len(j.pending) }

// Stats returns a copy of the job's counts.
func (j *Job) Stats() Stats {
	s := j.stats
	s.UsedStaleness = make(map[int64]int64, len(j.stats.UsedStaleness))
	for k, v := range j.stats.UsedStaleness {
		s.UsedStaleness[k] = v
	}
	return s
}

// flat reports whether every reward is the same.
func flat(r []float64) bool {
	for _, x := range r[1:] {
		if x != r[0] {
			return false
		}
	}
	return true
}

// mix derives problem i's sampling seed from the job's.
func mix(seed, i uint64) uint64 {
	z := seed ^ (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
