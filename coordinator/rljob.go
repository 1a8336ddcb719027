package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rljob"
	"github.com/crowdtrain/crowdtrain/rltask"
)

// An RL job (kind: rl, docs/TRAINING.md "How an RL job runs") is an
// async, sync or DiLoCo job whose leases are rollout and learn leases
// instead of shard tasks. The scheduler still hands out its leases (ids, deadlines,
// the policy version, expiry, each worker's share), one queue task each,
// but an RL lease's task goes back to the queue when the lease settles:
// the queue only paces the leases. Rollout results are scored by
// package rljob, a share of them after the coordinator recomputed their
// log-probabilities (rlcheck.go), and never touch the model; learn results go through the
// path every gradient takes (norm gate, robust aggregation, staleness, the
// outer optimizer): one step each in async, one a round in sync and
// DiLoCo (whose learn leases take local steps), where rollouts take no
// place in the rounds (rlGrantInRounds). Mode and local_steps are fixed
// when the job is created. An epoch is rlEpochCompletions completions
// learnt from.

// rlEpochCompletions is an RL job's epoch: the completions its learn
// leases carry before max_epochs counts one.
const rlEpochCompletions = 1024

// rlDataExamples is how many of the task's problems make the text set an
// RL job's evaluation loss and validation read.
const rlDataExamples = 2000

// rlLease is what an RL job remembers of a lease it handed out.
type rlLease struct {
	learn       bool
	completions int // a learn lease's
	// task is a learn lease's work as sent, for its spot check
	// (learncheck.go).
	task *protocol.LearnTask
}

// refuseRL refuses what the coordinator cannot run of an RL spec yet.
func refuseRL(spec jobspec.Spec) error {
	if spec.Kind != jobspec.KindRL {
		return nil
	}
	if spec.RL.Task.Name == rltask.JSONL {
		return nil // its file is read with the data (rlDataset), its prompts checked by newRL
	}
	if _, err := rltask.New(spec.RL.Task); err != nil {
		return &jobspec.Error{Key: "task", Problem: err.Error()}
	}
	return nil // whether its prompts fit the context, newRL says, in the policy's tokens
}

// rlDataset is the data set an RL job's evaluation loss and validation
// read: its task's problems as text, as `dataset: {type: task}` makes
// them.
func rlDataset(spec jobspec.Spec) dataset.Spec {
	t := spec.RL.Task
	if t.Name == rltask.JSONL {
		// Drawn from the file's lines as the built-in tasks' are made.
		return dataset.Spec{Type: dataset.TypeTask, Task: t.Name, Path: t.Path,
			Examples: rlDataExamples, TaskSeed: uint64(spec.Seed), ValFraction: dataset.DefaultValFraction}
	}
	return dataset.Spec{Type: dataset.TypeTask, Task: t.Name, Digits: t.Digits, Length: t.Length,
		Examples: rlDataExamples, TaskSeed: uint64(spec.Seed), ValFraction: dataset.DefaultValFraction}
}

// JobData is the data set a job reads: its spec's, or an RL job's
// (rlDataset).
func JobData(spec jobspec.Spec) dataset.Spec {
	if spec.Kind == jobspec.KindRL {
		return rlDataset(spec)
	}
	return spec.Dataset
}

// newRL sets up an RL job's rules on j.
func (j *Job) newRL(spec jobspec.Spec) error {
	r := spec.RL
	j.rlCodec = rljob.Bytes()
	if j.tok != nil {
		j.rlCodec = rljob.Tokenized(j.tok) // a tokenized policy (gpt-mini)
	}
	task, err := rlTask(r.Task, j.rlCodec, uint64(spec.Seed), j.model.InputSize)
	if err != nil {
		return err
	}
	if n := rlLearnSteps(spec) * rlGroupsPerLearn; n > protocol.MaxLearnGroups {
		return &jobspec.Error{Key: "local_steps", Problem: fmt.Sprintf("an RL learn lease takes %d groups a local step: %d steps are %d groups, more than a lease carries (%d); give at most %d",
			rlGroupsPerLearn, spec.LocalSteps, n, protocol.MaxLearnGroups, protocol.MaxLearnGroups/rlGroupsPerLearn)}
	}
	j.rl, err = rljob.New(task, rljob.Config{GroupSize: r.GroupSize, MaxNewTokens: r.MaxNewTokens, Temperature: r.Temperature,
		Clip: r.Clip, MaxRolloutStaleness: int64(r.MaxRolloutStaleness), Seed: uint64(spec.Seed),
		Vocab: j.model.NumClasses, Context: j.model.InputSize, GroupsPerLearn: rlLearnSteps(spec) * rlGroupsPerLearn, Codec: j.rlCodec})
	if err != nil {
		return &jobspec.Error{Key: "model", Problem: err.Error()}
	}
	j.rlTask, j.rlLeases = task, map[uint64]rlLease{}
	j.epochSize = rlEpochCompletions
	return nil
}

// rlTask makes the RL task spec names. A jsonl task's file is read as the
// data sets read theirs (a regular file only, without blocking), and
// every prompt, in the policy's tokens (codec), must leave room for an
// answer in the model's context.
func rlTask(spec rltask.Spec, codec *rljob.Codec, seed uint64, context int) (rltask.Task, error) {
	if spec.Name != rltask.JSONL {
		task, err := rltask.New(spec)
		if err != nil {
			return nil, &jobspec.Error{Key: "task", Problem: err.Error()}
		}
		// A generated task's prompts all have one length in bytes, which
		// bounds their length in any tokenizer's ids (a token is at least
		// a byte): the first says whether an answer fits the context
		// after every one of them.
		if n := len(rljob.Prompt(task.Problem(seed, 0))); n+1 > context {
			return nil, &jobspec.Error{Key: "task", Problem: fmt.Sprintf("its prompts are %d bytes (with the newline before them): no room for an answer in the model's context of %d tokens; give a smaller task or a model with a longer context", n, context)}
		}
		return task, nil
	}
	jt, err := dataset.ReadJSONLTask("task.path", spec.Path)
	if err != nil {
		return nil, specError(err, "task.path")
	}
	if spec.SHA256 != "" && jt.SHA256 != spec.SHA256 {
		return nil, &jobspec.Error{Key: "task.sha256", Problem: fmt.Sprintf("%s has SHA-256 %s, not %s: it changed since the job was created, or sha256 names another file; put the original back (a new spec may leave sha256 out to take the file as it is)",
			spec.Path, jt.SHA256, spec.SHA256)}
	}
	for i, p := range jt.Problems {
		if n := len(codec.Prompt(p)); n+1 > context {
			return nil, &jobspec.Error{Key: "task.path", Problem: fmt.Sprintf("%s: problem %d's prompt is %d tokens (with the newline before it): no room for an answer in the model's context of %d; shorten it or give a model with a longer context",
				spec.Path, i+1, n, context)}
		}
	}
	return jt, nil
}

// rlLeaseMessage turns scheduler lease l into an RL lease: a learn lease
// while the buffer holds a learn lease's worth of fresh groups, else a
// rollout lease. ok is false when no RL lease can be made (the prompt
// does not fit); the caller gives l back.
func (j *Job) rlLeaseMessage(l *engine.Lease, baseURL string, kind rlKind) (protocol.Lease, bool) {
	st := &j.st
	pl := protocol.Lease{ID: l.ID, JobID: j.ID, Snapshot: protocol.SnapshotGranted, BaseVersion: l.Base,
		SnapshotURL: j.snapshotURL(l.Worker, l.Base, baseURL), DeadlineUnixMs: l.Deadline.UnixMilli(), Round: l.Round}
	if kind == rlLearn || kind == rlEither && j.rl.Buffered() >= j.rlGroupsPerLease() {
		if lt, ok := j.rl.NextLearn(st.model.Version); ok {
			n := 0
			for _, g := range lt.Groups {
				n += len(g.Completions)
			}
			if hasKL(j.Spec) { // rlreference.go
				lt.KLCoef, lt.ReferenceURL = j.Spec.RL.KLCoef, baseURL+j.referencePath()
			}
			if h := rlLearnSteps(j.Spec); h > 1 {
				// DiLoCo: the groups in h shares, a step of the inner
				// optimizer each (compute's learn).
				inner := innerOptimizer(&j.Spec)
				lt.Steps, lt.Inner = h, &inner
			}
			pl.Learn = &lt
			j.rlLeases[l.ID] = rlLease{learn: true, completions: n, task: pl.Learn}
			return pl, true
		}
		if kind == rlLearn {
			return protocol.Lease{}, false
		}
	}
	r, err := j.rl.NextRollout(l.ID, l.Base)
	if err != nil {
		j.log.Warn(fmt.Sprintf("job %s: %v", j.ID, err))
		return protocol.Lease{}, false
	}
	pl.Rollout = &r
	j.rlLeases[l.ID] = rlLease{}
	return pl, true
}

// rlKind is the kind of RL lease rlLeaseMessage may make of a scheduler
// lease.
type rlKind int

const (
	rlEither  rlKind = iota // a learn lease if the buffer holds enough, else a rollout
	rlLearn                 // a learn lease, or none
	rlRollout               // a rollout lease
)

// rlGrantInRounds grants worker one lease of an RL job in rounds (mode
// sync or diloco). A learn lease is a place in the open round: the
// round's step averages round_size GRPO gradients (sync) or deltas of
// local steps (diloco), all computed from its version. A
// rollout lease takes no place (round 0 to the scheduler and the
// aggregator): rollouts only feed the buffer the learn leases draw from,
// and a worker holding a learn place generates while the round fills. A
// learn place goes out only when a full learn lease of fresh groups is
// buffered; rollouts stop while the buffer and the rollouts out would
// fill every place of this round and the next twice over, so that
// generation does not run far ahead of what rounds can learn from before
// it is stale. ok is false when nothing is to be granted now.
func (j *Job) rlGrantInRounds(worker string, rounds *engine.Rounds, baseURL string) (protocol.Lease, bool) {
	st := &j.st
	now := st.sched.Now()
	fresh := j.rl.Fresh(st.model.Version)
	need := j.rlGroupsPerLease()
	if fresh >= need && !st.sched.HoldsInRound(worker, rounds.Round()) {
		if round, ok := st.agg.Lease(now); ok {
			l, ok := st.sched.Grant(worker, st.published, round)
			if !ok {
				st.agg.Unlease(round)
				return protocol.Lease{}, false
			}
			pl, ok := j.rlLeaseMessage(l, baseURL, rlLearn)
			if !ok { // Fresh said otherwise: cannot happen at one version
				j.unleased(st.sched.Release(worker, []uint64{l.ID}))
				return protocol.Lease{}, false
			}
			j.issued(worker)
			return pl, true
		}
	}
	if fresh+j.rl.Pending() >= 2*need*(rounds.Size+rounds.Backups) {
		return protocol.Lease{}, false
	}
	l, ok := st.sched.Grant(worker, st.published, 0)
	if !ok {
		return protocol.Lease{}, false
	}
	pl, ok := j.rlLeaseMessage(l, baseURL, rlRollout)
	if !ok {
		j.unleased(st.sched.Release(worker, []uint64{l.ID}))
		return protocol.Lease{}, false
	}
	j.issued(worker)
	return pl, true
}

// rlLearnSteps is how many local steps an RL job's learn lease takes:
// local_steps in mode diloco, else one gradient.
func rlLearnSteps(spec jobspec.Spec) int {
	if spec.Mode == jobspec.ModeDiLoCo {
		return max(1, spec.LocalSteps)
	}
	return 1
}

// rlGroupsPerLease is how many groups a learn lease of j carries:
// rlGroupsPerLearn a step.
func (j *Job) rlGroupsPerLease() int { return rlLearnSteps(j.Spec) * rlGroupsPerLearn }

// rlGroupsPerLearn is how many scored groups a learn lease carries a step: 64
// completions at the default group size, a gradient steady enough for
// one version each.
const rlGroupsPerLearn = 8

// rlSettle forgets RL lease l, which settled (its rollout, if it was one,
// is no longer pending). It returns what the lease was.
func (j *Job) rlSettle(l *engine.Lease) (rlLease, bool) {
	rl, ok := j.rlLeases[l.ID]
	delete(j.rlLeases, l.ID)
	if !rl.learn {
		j.rl.Forget(l.ID)
	}
	return rl, ok
}

// applyRollout scores the result of rollout lease l. It never changes
// the model; a refused result changes nothing at all.
func (j *Job) applyRollout(sub submission, l *engine.Lease, ack protocol.Ack, refuse func(reason, detail string) protocol.Ack) protocol.Ack {
	st := &j.st
	reject := func(reason, detail string) protocol.Ack {
		j.rlRefused++
		return refuse(reason, detail)
	}
	defer j.rlRequeue(l)
	if sub.reason != "" {
		j.rlSettle(l)
		return reject(sub.reason, sub.detail)
	}
	if sub.res.JobID != j.ID {
		j.rlSettle(l)
		return reject(protocol.ReasonInvalid, fmt.Sprintf("result names job %q, the lease is for %q", sub.res.JobID, j.ID))
	}
	g, err := j.rl.ScoreVerified(l.ID, st.model.Version, sub.res, j.rolloutVerifier(sub, l.ID)) // rlcheck.go
	j.rlSettle(l)
	var ref *rljob.Refusal
	if errors.As(err, &ref) {
		return reject(ref.Reason, ref.Detail)
	} else if err != nil {
		return reject(protocol.ReasonInvalid, err.Error())
	}
	ack.Accepted, ack.Staleness = true, st.model.Version-g.Version
	// A rollout is inference: a prompt and its completions' forward passes.
	n := int64(len(g.Rollouts))
	j.ledger.Credit(sub.volunteer, j.ID, n, float64(n)*j.flopsPerExample/3)
	st.sched.Observe(sub.worker, int(n), st.sched.Now().Sub(l.Since))
	return ack
}

// rlEval evaluates an RL job's policy on the held-out prompts.
func (j *Job) rlEval(params []float32, res *EvalResult) {
	e, err := rljob.EvaluateWith(j.model, params, j.rlTask, j.rlCodec, rljob.DefaultEvalProblems, j.Spec.RL.MaxNewTokens)
	if err != nil {
		j.log.Warn(fmt.Sprintf("job %s: evaluating the policy: %v", j.ID, err))
		return
	}
	res.Reward, res.Solved = &e.Reward, &e.Solved
}

// rlPolicy reads an RL job's policy (spec.Policy, in the forms of init)
// and records where it came from in spec.Policy.
func (s *Server) rlPolicy(spec *jobspec.Spec) ([]float32, error) {
	model, err := nn.NewModel(spec.Model)
	if err != nil {
		return nil, &jobspec.Error{Key: "model", Problem: err.Error()}
	}
	c := *spec
	c.Init = spec.Policy
	params, err := s.initParams(context.Background(), &c, model)
	if err != nil {
		return nil, policyError(err)
	}
	spec.Policy, spec.Tokenizer = c.Init, c.Tokenizer // the policy's tokenizer, when the spec gave none (initParams)
	return params, nil
}

// InheritPolicyTokenizer gives an RL spec whose policy is a file, and
// which names no tokenizer, the tokenizer the file's job was trained with
// (the export's crowdtrain.spec): `serve --job` needs it before the
// task's text loads. AddJob does the same for every policy (initParams).
func InheritPolicyTokenizer(spec *jobspec.Spec) error {
	if spec.Kind != jobspec.KindRL || spec.Tokenizer != nil || spec.Policy == nil || spec.Policy.File == "" {
		return nil
	}
	model, err := nn.NewModel(spec.Model)
	if err != nil {
		return &jobspec.Error{Key: "model", Problem: err.Error()}
	}
	src, err := readPinnedInit(*spec.Policy, model)
	if err != nil {
		return policyError(err)
	}
	if src.spec != nil && src.spec.Tokenizer != nil && src.spec.Tokenizer.Data != "" {
		t := *src.spec.Tokenizer
		spec.Tokenizer = &t
	}
	return nil
}

// policyError is an error about an RL job's policy, which is read as an
// init is: a *jobspec.Error on init.KEY becomes one on policy.KEY.
func policyError(err error) error {
	var se *jobspec.Error
	if !errors.As(err, &se) {
		return err
	}
	e := *se
	e.Key = "policy" + strings.TrimPrefix(e.Key, "init")
	return &e
}

// leaseExamples is the examples a result of l must cover: its task's, or
// the completions of an RL job's learn lease.
func (j *Job) leaseExamples(l *engine.Lease) int {
	if rl, ok := j.rlLeases[l.ID]; ok {
		return rl.completions
	}
	return l.Task.Count
}

// pinTaskFile records in spec the SHA-256 of an RL job's jsonl task file
// (task.sha256) when the spec does not pin one, so that a resumed job
// refuses a file that changed under it (rlTask) rather than train on
// other problems under the same name.
func pinTaskFile(spec *jobspec.Spec) error {
	if spec.RL == nil || spec.RL.Task.Name != rltask.JSONL || spec.RL.Task.SHA256 != "" {
		return nil
	}
	jt, err := dataset.ReadJSONLTask("task.path", spec.RL.Task.Path)
	if err != nil {
		return specError(err, "task.path")
	}
	spec.RL.Task.SHA256 = jt.SHA256
	return nil
}

// resolvePolicy confines an RL job's policy file, as resolveInit does an
// init file.
func resolvePolicy(spec *jobspec.Spec, root string) error {
	if spec.RL != nil && spec.RL.Task.Path != "" {
		// A jsonl task's file, confined to the data root as a data set's.
		p, err := dataset.ResolveFileUnder(root, "task.path", spec.RL.Task.Path, false)
		if err != nil {
			return specError(err, "task.path")
		}
		spec.RL.Task.Path = p
	}
	if spec.Policy == nil || spec.Policy.File == "" {
		return nil
	}
	c := *spec
	c.Init = spec.Policy
	err := resolveInit(&c, root)
	if err != nil {
		return policyError(err)
	}
	spec.Policy = c.Init
	return nil
}

// rlRequeue settles RL lease l and puts its queue task back while the
// job still hands out leases (not after its last epoch emptied the queue).
func (j *Job) rlRequeue(l *engine.Lease) {
	if j.st.epoch < j.st.spec.MaxEpochs {
		j.requeue(l)
		return
	}
	j.rlSettle(l)
}

// rlLearnAccepted settles learn lease l, whose result the aggregator
// took: its queue task goes back (the queue only paces the leases), but
// in a round its place stays taken, as any result's does. Given back,
// it would let a third learn lease into a round of two, whose result
// comes back late with its groups thrown away.
func (j *Job) rlLearnAccepted(l *engine.Lease) {
	if j.st.epoch < j.st.spec.MaxEpochs {
		j.st.sched.Lost(l)
	}
	j.rlSettle(l)
}

// rlDataError names an RL job's key, task, in an error loading its data
// set (which the spec never names).
func rlDataError(spec jobspec.Spec, err error) error {
	var se *jobspec.Error
	if spec.Kind != jobspec.KindRL || !errors.As(err, &se) || !strings.HasPrefix(se.Key, "dataset") {
		return err
	}
	key := "task"
	if se.Key == "dataset.path" {
		key = "task.path" // a jsonl task's file
	}
	return &jobspec.Error{Key: key, Problem: "the task's problems as text, which the evaluation loss reads: " + se.Problem}
}

// RLView is what an RL job's rollouts did since this coordinator started
// the job (rljob.Stats): the completions scored, the groups they made and
// how stale each was when a learn lease took it, and the bytes their
// results took on the wire.
type RLView struct {
	// Rollouts counts completions scored, Solved those exactly right;
	// RolloutResults the rollout result frames received (a group each,
	// refused ones included) and RolloutBytes their bytes.
	Rollouts       int64 `json:"rollouts"`
	Solved         int64 `json:"solved"`
	RolloutResults int64 `json:"rollout_results"`
	RolloutBytes   int64 `json:"rollout_bytes"`
	// Refused counts rollout results refused, for any reason (the job's
	// rejections say which); Forged, those refused because their
	// log-probabilities were not the policy's.
	Refused int64 `json:"refused"`
	Forged  int64 `json:"forged"`
	// GroupsUsed counts scored groups a learn lease took; FlatGroups
	// those dropped because every completion had the same reward (no
	// signal for GRPO), StaleGroups those that aged past
	// max_rollout_staleness in the buffer; Buffered waits there now.
	GroupsUsed  int64 `json:"groups_used"`
	FlatGroups  int64 `json:"flat_groups"`
	StaleGroups int64 `json:"stale_groups"`
	Buffered    int   `json:"buffered_groups"`
	// UsedStaleness[s] counts the groups a learn lease took s versions
	// after the policy version they were sampled from.
	UsedStaleness []int64 `json:"used_staleness"`
}

// rlView is j's RLView; call it on the loop.
func (j *Job) rlView() *RLView {
	s := j.rl.Stats()
	v := &RLView{Rollouts: s.Rollouts, Solved: s.Solved, Refused: j.rlRefused, Forged: s.Forged,
		GroupsUsed: s.Groups, FlatGroups: s.Flat, StaleGroups: s.Stale, Buffered: j.rl.Buffered(),
		RolloutResults: j.wire.rolloutResults.Load(), RolloutBytes: j.wire.rolloutBytes.Load()}
	for st, n := range s.UsedStaleness {
		if st < 0 || st > jobspec.MaxMaxRolloutStaleness {
			continue // no learn lease takes such a group
		}
		for int64(len(v.UsedStaleness)) <= st {
			v.UsedStaleness = append(v.UsedStaleness, 0)
		}
		v.UsedStaleness[st] += n
	}
	return v
}
