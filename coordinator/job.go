package coordinator

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/rljob"
	"github.com/crowdtrain/crowdtrain/rltask"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/engine/placement"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
	"github.com/crowdtrain/crowdtrain/tokenizer"
)

// Job states, as the API shows them.
const (
	StateRunning = "running"
	StatePaused  = "paused"
	StateDone    = "done"
	StateFailed  = "failed"
	// StateFinishing is a job that has ended (done, failed or stopped) but
	// whose final checkpoint, the one that records the end, is not durable
	// yet: the API shows it until that write succeeds. A job is never
	// "done" while a restart could still find it running.
	StateFinishing = "finishing"
)

// errJobStopped is returned to callers of a job whose loop has ended.
var errJobStopped = errors.New("job loop stopped")

// snapshot is the model at one version, published as an immutable HTTP
// resource. Its bytes are never modified after publication.
type snapshot struct {
	version int64
	body    []byte
	f16Once sync.Once // deltas.go: the f16 body, built on first request
	f16     []byte
	// In the job's snapshot cache (snapcache.go), under its pool's mutex.
	owner *snapCache
	cost  int64
	elem  *list.Element
}

// Job is one training run. A single goroutine (run) owns the model, the
// optimizer, the task queue and the leases; everything else reaches that
// state through exec, so no lock guards it. Snapshots and shards are
// immutable and served straight from their own read-locked maps.
type Job struct {
	ID   string
	Spec jobspec.Spec

	model *nn.Model
	test  *dataset.Set
	// rl, rlTask and rlLeases are an RL job's rules, task and the RL
	// leases it handed out (rljob.go); nil for any other job. Loop only.
	rl       *rljob.Job
	rlTask   rltask.Task
	rlLeases map[uint64]rlLease
	// rlCodec is how the policy's tokens stand for text: bytes, or its
	// tokenizer's ids.
	rlCodec *rljob.Codec
	// rlRefused counts rollout results applyRollout refused, for any
	// reason. Loop only.
	rlRefused int64
	// rlChecks are its checks of rollouts' log-probabilities
	// (rlcheck.go). Loop only.
	rlChecks rolloutChecks
	// learnChecks are its checks of learn results (learncheck.go). Loop
	// only.
	learnChecks learnChecks
	// rlReference is an RL job's KL reference, its version 0 as a
	// snapshot's f32 body, when kl_coef is above 0 (rlreference.go);
	// set before the job starts, then read only.
	rlReference []byte
	// validator scores the updates the robust clip flags on a fixed
	// held-out batch of the training data (validate.go).
	validator *validator
	// text is set for a model that reads token sequences: its
	// evaluations carry bits_per_char (bits_per_byte when tokenized) and
	// a sample.
	text bool
	// tok is a tokenized text job's tokenizer (nil: bytes), which encodes
	// prompts and decodes samples; testBytes is the bytes of text the
	// test windows' label tokens stand for (the divisor of bits per byte).
	tok       *tokenizer.Tokenizer
	testBytes int64
	// sampling is held while a sample is generated: one at a time.
	sampling sync.Mutex
	// shards holds every shard's encoded bytes, built once: they are
	// immutable resources served with strong ETags.
	shards    []dataset.Shard
	shardBody [][]byte
	shardSet  *shardSet // shards and bodies, maybe shared with other jobs (shardsets.go)

	// route.go: whether the job hands out work now, and what placement
	// knows of it (its weight and priority change with its spec), for
	// routing without a trip through the loop. onState hears every change
	// of state, on the loop. parent is the sweep it is a trial of.
	active  atomic.Bool
	place   atomic.Pointer[placement.Job]
	onState func(state string)
	// onVersion hears each new version, on the loop (relays are told).
	onVersion func(version int64)
	parent    string
	epochSize int // examples per epoch
	// log carries the job attribute on every line (logging.go).
	log *slog.Logger
	// refusals keeps a worker repeating one refusal from repeating its
	// WARN line (refusals.go).
	refusals warnLimiter

	reqs    chan func()
	stopped chan struct{}
	evals   sync.WaitGroup // evaluations in flight; Server.Close waits for them

	snaps  snapCache   // published snapshots and deltas (snapcache.go)
	bodies warmBodies  // warmbodies.go: the next snapshot's body
	grants startGrants // startgrants.go: started leases, for the snapshot handlers

	nextLeaseID *atomic.Uint64

	// ledger hears each volunteer's credit and strikes (the server's).
	ledger ledger
	// credits hands over the credit the job's results earned since its
	// last checkpoint (the server's book, with a store; nil without).
	credits creditSource
	// flopsPerExample is the model's training cost per example
	// (nn.Model.FLOPsPerExample): each accepted example's compute credit.
	flopsPerExample float64
	// limits are the server's per-address and per-volunteer limits
	// (limits.go; zero: the defaults).
	limits jobLimits

	// Persistence; store is nil when the coordinator runs without one.
	store    *store.Store
	run      int64 // incarnation: how many times a coordinator has started this job
	verbose  bool
	ckptCh   chan *checkpointOp
	ckptPool chan *ckptBuffers // two: one being written, one being filled
	metricCh chan store.Metric
	lastCkpt atomic.Pointer[CheckpointStats]
	// saveCheckpoint writes a checkpoint with the job's state (the store's
	// SaveCheckpointState; tests put failing ones in).
	saveCheckpoint func(context.Context, store.Checkpoint, int, store.JobState) error
	health         ckptHealth // what the writer has made durable, and what it has not
	// onMetric, when set, sees every metrics row as it is recorded (the
	// admin page's live charts); it runs on the loop and must not block.
	onMetric func(store.Metric)
	// onCheckpoint, when set, sees how long each checkpoint write took.
	onCheckpoint func(time.Duration)
	// nonFiniteEvalEvery is the least time between evaluations that runs
	// of non-finite results start (Config.NonFiniteEvalInterval).
	nonFiniteEvalEvery time.Duration

	// wire counts the bytes of its results and of what is served for it
	// (wire.go); HTTP handlers add to it directly.
	wire jobWire

	// mirror is set on a relay's copy of its root's job (relaymirror.go);
	// what it holds is the loop's.
	mirror *mirror

	// Loop-owned state below.
	st jobState
}

type jobState struct {
	state string
	// spec is the job's spec as it is now: the live settings an operator
	// changed (mode, rates, ...) are read here, on the loop; j.Spec is the
	// spec the job started with and never changes.
	spec           jobspec.Spec
	members        map[string]member  // connected workers by id
	spot           *engine.SpotChecks // spotcheck.go
	referee        refereeState       // spotreferee.go: the coordinator's recomputations
	recheck        recheckState       // recheck.go: validation's second opinions
	model          engine.Model
	sched          engine.Scheduler
	agg            engine.Aggregator
	published      int64 // newest published snapshot version, -1 before the first
	epoch          int
	remaining      int64 // examples of this epoch not yet in an accepted result
	examplesSeen   int64
	epochExamples  int64
	applied        int64
	rejected       int64
	rejections     map[string]int64
	leasesExpired  int64
	lateRevived    int64 // expired leases whose late result answered their task (late.go)
	leasesReleased int64
	rebased        int64 // requests for evicted snapshots served the current one (rebase.go)
	rebasedResults int64 // results that named the version served in place of their lease's
	lastRelease    string
	roundsShort    int64
	clipped        int64 // results (or buckets) applied clipped by the robust rule
	colluding      int64 // results a DiLoCo round left out as colluding (engine/collusion.go)
	climbing       int64 // results a DiLoCo round left out as climbing (engine/descent.go)
	leasesIssued   int64
	stalenessSum   int64
	norms          engine.NormGate        // max_update_norm_ratio's gate and the near-zero one
	empty          emptyUpdates           // updates that move nothing (emptyupdates.go)
	shares         engine.VolunteerShares // each volunteer's share of the recent grants
	validationSeen int64                  // accepted updates, for observeValidation's sample
	nonFiniteRun   int                    // results with NaN/Inf since the last accepted one
	evalRunning    bool
	lastEvalAt     int64 // version of the last evaluation started
	// lastEvalApplied is st.applied then: an asynchronous mode's relay
	// aggregate is one version of many results.
	lastEvalApplied int64
	eval            *EvalResult
	finalEvalAfter  bool // stop once the running evaluation finishes
	startedAt       time.Time
	doneAt          time.Time
	reason          string              // why the job is done or failed
	ckptVersion     int64               // version of the newest checkpoint handed to the writer, which retries it until durable
	ckptApplied     int64               // accepted results then: a partial round moves them, not the version
	ckptSpot        engine.SpotCounters // the spot checks' counters then
	ckptAt          time.Time
	metricAt        time.Time // when the last metrics row was taken, and the counters then
	metricExamples  int64
	metricApplied   int64
	// stalenessHist[i] counts updates applied at staleness i; the last
	// bucket holds every staleness at or above its index.
	stalenessHist []int64

	// Weight prediction (predict.go): the smoothed staleness of applied
	// results, and the model as last published with its version.
	predictStaleness   float64
	predictFrom        []float32
	predictFromVersion int64

	// Throughput, smoothed over the loop's ticks.
	rateAt                    time.Time
	rateExamples              int64
	rateApplied               int64
	examplesPerSec, updPerSec float64

	// nonFiniteEvalAt is when a run of non-finite results last started
	// an evaluation (see apply).
	nonFiniteEvalAt time.Time

	abuse abuseState // hostages.go: lease caps, backups, the replay window

	relay relayRootState // relayroot.go: relays' aggregates
	held  heldCounts     // limits.go: leases held per address and volunteer
}

// stalenessBuckets is the staleness histogram's size: 0..31 and 32+.
const stalenessBuckets = 33

// updateRates folds the counters since the last call into the smoothed
// throughput.
func (j *Job) updateRates(now time.Time) {
	st := &j.st
	if st.rateAt.IsZero() {
		st.rateAt, st.rateExamples, st.rateApplied = now, st.examplesSeen, st.applied
		return
	}
	dt := now.Sub(st.rateAt).Seconds()
	if dt < 0.5 {
		return
	}
	ex := float64(st.examplesSeen-st.rateExamples) / dt
	up := float64(st.applied-st.rateApplied) / dt
	const keep = 0.6 // about the last 3 s
	st.examplesPerSec = keep*st.examplesPerSec + (1-keep)*ex
	st.updPerSec = keep*st.updPerSec + (1-keep)*up
	st.rateAt, st.rateExamples, st.rateApplied = now, st.examplesSeen, st.applied
}

// newJob builds a job at version 0 from spec.
// sets, when not nil, shares the encoded shards with other jobs.
func newJob(id string, spec jobspec.Spec, train, test *dataset.Set, leaseIDs *atomic.Uint64, log *slog.Logger, sets ...*shardSets) (*Job, error) {
	model, err := nn.NewModel(spec.Model)
	if err != nil {
		return nil, &jobspec.Error{Key: "model", Problem: err.Error()}
	}
	if err := fitsData(model, spec, train); err != nil {
		return nil, err
	}
	if train.Kind == dataset.NextTokens {
		// Text is scored on a fixed, evenly spread sample of validation
		// windows, so an evaluation stays cheap however long the text.
		sub, err := test.Subset(test.Name, test.Spread(EvalWindows))
		if err != nil {
			return nil, err
		}
		test = sub
	}
	j := &Job{
		ID: id, Spec: spec, model: model, test: test, log: log.With(logJob, id), text: train.Kind == dataset.NextTokens || isTextModel(model),
		reqs:        make(chan func()),
		stopped:     make(chan struct{}),
		nextLeaseID: leaseIDs,
		run:         1,
		ledger:      newVolunteerBook(), // the server's replaces it
	}
	if j.tok, err = jobTokenizer(spec); err != nil {
		return nil, err
	}
	j.testBytes = textBytes(test, j.tok)
	j.flopsPerExample = model.FLOPsPerExample()
	j.validator = newValidator(model, train, j.text)
	if len(sets) > 0 && sets[0] != nil {
		j.shardSet = sets[0].get(train, spec.ShardSize, spec.Seed)
	} else {
		j.shardSet = cutShards(train, spec.ShardSize, spec.Seed)
	}
	j.shards, j.shardBody = j.shardSet.shards, j.shardSet.bodies
	j.epochSize = train.N
	st := &j.st
	st.state = StateRunning
	st.model.Params = make([]float32, model.NumParams)
	model.Init(st.model.Params, spec.Seed)
	st.sched.Now = time.Now
	st.sched.NextID = func() uint64 { return leaseIDs.Add(1) }
	st.sched.OnHeld = j.onHeld
	if err := j.configure(spec); err != nil {
		return nil, err
	}
	st.stalenessHist = make([]int64, stalenessBuckets)
	st.members = map[string]member{}
	j.initSpot(spec)
	if spec.Kind == jobspec.KindRL {
		if err := j.newRL(spec); err != nil {
			return nil, err
		}
	}
	st.published = -1
	st.rejections = map[string]int64{protocol.ReasonStale: 0, protocol.ReasonInvalid: 0, protocol.ReasonLate: 0}
	st.startedAt = time.Now()
	j.startEpoch()
	return j, nil
}

// loop is the job's loop. It returns when ctx ends. checkpointEvery is the
// longest time between checkpoints (0: no store).
func (j *Job) loop(ctx context.Context, checkpointEvery time.Duration) {
	defer close(j.stopped)
	// A quarter second bounds how late a round past its round_timeout
	// closes; the lease timeout is at least 100ms.
	tick := time.NewTicker(min(250*time.Millisecond, j.Spec.LeaseTimeout.Duration/4))
	defer tick.Stop()
	var ckpt <-chan time.Time
	if j.store != nil && checkpointEvery > 0 {
		t := time.NewTicker(checkpointEvery)
		defer t.Stop()
		ckpt = t.C
	}
	for {
		select {
		case <-ctx.Done():
			j.dropWaitingRechecks("the job stopped while this result waited for the coordinator to recompute it")
			return
		case f := <-j.reqs:
			f()
		case now := <-tick.C:
			j.expireLeases()
			j.step(now) // a round past its round_timeout
			j.updateRates(now)
			j.flushRelayAcks(now)
		case <-ckpt:
			if j.dirty() {
				j.recordMetric(nil)
			}
			j.checkpoint(false)
		}
	}
}

// currentParams is a copy of the job's parameters as they are now, and
// their version.
func (j *Job) currentParams(ctx context.Context) (params []float32, version int64, err error) {
	err = j.exec(ctx, func(st *jobState) {
		params, version = append([]float32(nil), st.model.Params...), st.model.Version
	})
	return params, version, err
}

// post runs f on the job's loop, unless the loop stops first, without
// waiting for it to run: for the job's own goroutines, which hand their
// findings back to the loop.
func (j *Job) post(f func()) {
	select {
	case j.reqs <- f:
	case <-j.stopped:
	}
}

// exec runs f on the job's loop and waits for it. It gives up when ctx
// ends or the loop has stopped before f was taken; once the loop has
// taken f it waits for f to finish, however ctx ends: f may read memory
// the caller frees on return (a connection's decode buffer). The loop
// runs f at once, and it cannot stop while f runs, so the wait is short.
func (j *Job) exec(ctx context.Context, f func(st *jobState)) error {
	done := make(chan struct{})
	select {
	case j.reqs <- func() { f(&j.st); close(done) }:
	case <-j.stopped:
		return errJobStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	<-done
	return nil
}

// setState moves the job to state, on the loop.
func (j *Job) setState(state string) {
	j.st.state = state
	j.active.Store(state == StateRunning)
	if j.onState != nil {
		j.onState(state)
	}
}

func (j *Job) finish(state, reason string) {
	st := &j.st
	st.reason, st.doneAt = reason, time.Now()
	j.setState(state)
	st.sched.SetQueue(nil)
	st.sched.Clear()
	level := slog.LevelInfo
	if state == StateFailed {
		level = slog.LevelWarn
	}
	j.log.Log(context.Background(), level, fmt.Sprintf("job %s: %s: %s", j.ID, state, reason), "state", state)
	j.checkpoint(true)
}

// EvalWindows is the most validation windows a text job is scored on.
const EvalWindows = 64

// fitsData checks that the model's input and output fit the data set,
// naming what to change.
func fitsData(model *nn.Model, spec jobspec.Spec, train *dataset.Set) error {
	if train.Kind == dataset.NextTokens {
		if model.InputSize != train.ExampleSize() {
			return jobspec.Errorf("model.input", "is %s (%d tokens) but the text is cut into windows of %d: give the model input [t] with t its context",
				dataset.ShapeString(spec.Model.Input), model.InputSize, train.ExampleSize())
		}
		if err := fitsVocab(model, train); err != nil {
			return err
		}
	} else if model.InputSize != train.ExampleSize() {
		return jobspec.Errorf("model.input", "is %s (%d values) but %s has examples of %s: %d values; make the model's input hold %d values (input: %s)",
			dataset.ShapeString(spec.Model.Input), model.InputSize, train.Name, train.ShapeString(), train.ExampleSize(), train.ExampleSize(), train.ShapeString())
	}
	if model.NumClasses < train.Classes {
		what := "classes"
		if train.Kind == dataset.NextTokens {
			what = "tokens in its vocabulary"
		}
		return jobspec.Errorf("model", "the last layer has %d outputs but the data has %d %s: give the last layer %d units", model.NumClasses, train.Classes, what, train.Classes)
	}
	if lpe := model.LabelsPerExample; lpe != train.LabelsPerExample() {
		if train.Kind == dataset.NextTokens {
			return jobspec.Errorf("model", "predicts %d label(s) per example but text windows of %d need one per position: end the model in a per-position dense layer over the sequence (as the charlm preset does)",
				lpe, train.LabelsPerExample())
		}
		return jobspec.Errorf("model", "predicts %d labels per example but %s has one class per example: end the model in a dense layer over the flattened input", lpe, train.Name)
	}
	return nil
}

// fitsVocab checks that a model of text reads the text's tokens: its
// embedding's vocabulary is the data's (bytes: 256; tokenized text: its
// tokenizer's size). A larger one would never see most of its ids, and a
// smaller one would meet ids it has no row for.
func fitsVocab(model *nn.Model, train *dataset.Set) error {
	v := model.InputVocab()
	if v == 0 || v == train.Classes {
		return nil
	}
	if v > train.Classes && train.Classes == 256 {
		return jobspec.Errorf("model", "the embedding has a vocabulary of %d tokens but %s is read as bytes (256 tokens): give the job a tokenizer of %d tokens (tokenizer: {type: bpe, vocab: %d}, or a file crowdtrain tokenizer train wrote), or the embedding vocab: 256",
			v, train.Name, v, v)
	}
	return jobspec.Errorf("model", "the embedding has a vocabulary of %d tokens but %s has %d: give the embedding vocab: %d", v, train.Name, train.Classes, train.Classes)
}

// ended reports whether a job in state will hand out no more work.
func ended(state string) bool {
	return state == StateDone || state == StateFailed || state == StateStopped
}

// JobView is a job as the API shows it.
type JobView struct {
	ID              string           `json:"id"`
	Name            string           `json:"name"`
	State           string           `json:"state"`
	Reason          string           `json:"reason,omitempty"`
	Version         int64            `json:"version"`
	Epoch           int              `json:"epoch"`
	EpochProgress   float64          `json:"epoch_progress"`
	ExamplesSeen    int64            `json:"examples_seen"`
	UpdatesApplied  int64            `json:"updates_applied"`
	UpdatesRejected int64            `json:"updates_rejected"`
	Rejections      map[string]int64 `json:"rejections"`
	// Validated counts the updates the coordinator scored on its own
	// held-out batch (those the robust clip flagged); the refused ones are
	// rejections["quarantined"].
	Validated int64 `json:"validated"`
	// Rechecks is what the coordinator's recomputations of the results
	// validation refused decided (recheck.go).
	Rechecks RecheckView `json:"validation_rechecks"`
	// ClipRadius is the asynchronous robust clip's radius now (0 in its
	// warm-up and in round modes).
	ClipRadius float64 `json:"clip_radius,omitempty"`

	// Clipped counts results applied clipped by the robust rule (in
	// sync and diloco, the results or buckets a round's clip clipped).
	Clipped int64 `json:"clipped"`
	// Colluding counts results a DiLoCo round left out of its step as far
	// more alike another volunteer's than the round's others
	// (engine/collusion.go): accepted and credited, not applied.
	Colluding int64 `json:"colluding"`
	// Climbing counts results a DiLoCo round left out of its step as
	// climbing on the coordinator's held-out batch by at least half of
	// what the round's descending results typically gain
	// (engine/descent.go): accepted and credited, not applied.
	Climbing int64 `json:"climbing"`
	// SpotChecks is what the spot checks did (docs/SPOTCHECKS.md).
	SpotChecks *SpotCheckView `json:"spot_checks"`
	// RL is an RL job's rollouts and what became of them (rljob.go).
	RL            *RLView `json:"rl,omitempty"`
	LeasesIssued  int64   `json:"leases_issued"`
	LeasesExpired int64   `json:"leases_expired"`
	// LateRevived counts the results of expired leases that answered
	// their task after all: no one had taken it since (late.go).
	LateRevived   int64   `json:"late_revived"`
	LeasesHeld    int     `json:"leases_held"`
	MeanStaleness float64 `json:"mean_staleness"`
	// StalenessHistogram[i] counts updates applied at staleness i; the
	// last bucket counts every staleness at or above its index.
	StalenessHistogram []int64 `json:"staleness_histogram"`
	ExamplesPerSec     float64 `json:"examples_per_sec"` // smoothed over a few seconds
	UpdatesPerSec      float64 `json:"updates_per_sec"`
	LR                 float64 `json:"lr"` // the outer optimizer's rate now
	Workers            int     `json:"workers"`
	// WorkerUtilisation is the mean of its workers' utilisation (the
	// share of their wall time spent computing), 0 before any has sent
	// two results.
	WorkerUtilisation float64 `json:"worker_utilisation"`
	// Weight and Priority place the job among the others (route.go);
	// Warning says why it waits when no connected worker can run it.
	Weight         float64          `json:"weight"`
	Priority       int              `json:"priority"`
	Warning        string           `json:"warning,omitempty"`
	MaxStaleness   int              `json:"max_staleness"`
	NumParams      int              `json:"num_params"`
	Shards         int              `json:"shards"`
	Eval           *EvalResult      `json:"eval"`
	Run            int64            `json:"run"` // how many times a coordinator has started this job
	LastCheckpoint *CheckpointStats `json:"last_checkpoint"`
	StartedAt      time.Time        `json:"started_at"`
	DoneAt         *time.Time       `json:"done_at,omitempty"`
	Spec           jobspec.Spec     `json:"spec"`
	// Mode is the spec's mode now (an operator may change it).
	Mode string `json:"mode"`
	// Round is the open round of a round mode, RoundResults the results
	// it holds so far.
	Round        uint64 `json:"round,omitempty"`
	RoundResults int    `json:"round_results,omitempty"`
	// RoundsShort counts rounds closed with fewer than round_size
	// results: by round_timeout, or with nothing left they could lease.
	RoundsShort int64 `json:"rounds_short,omitempty"`
	// LeasesReleased counts leases workers gave back unfinished, and
	// LastRelease says why the last one was (a worker that cannot run
	// the job's mode says so there).
	LeasesReleased int64  `json:"leases_released"`
	LastRelease    string `json:"last_release,omitempty"`

	// CheckpointFailure is set while the newest checkpoint could not be
	// written and is being retried.
	CheckpointFailure *CheckpointFailure `json:"checkpoint_failure,omitempty"`

	// Abuse counts the hostage and straggler rules' work (hostages.go).
	Abuse AbuseView `json:"abuse"`

	// The wire (wire.go): result frame bytes received, snapshot and delta
	// bytes served, shard bytes served (apart: cacheable, once per
	// epoch); (bytes_in+bytes_out)/examples_seen; and the compression,
	// the fp32 size of the results and snapshots (4 bytes a parameter
	// each) over the bytes they actually took. UpdateCompression is the
	// results' alone (what update_codec saves, about 1 with fp32), and
	// SnapshotCompression the snapshots' and deltas' alone (what
	// snapshot_codec and deltas save, above 1 even for an fp32 job).
	BytesIn             int64   `json:"bytes_in"`
	BytesOut            int64   `json:"bytes_out"`
	ShardBytesOut       int64   `json:"shard_bytes_out"`
	BytesPerExample     float64 `json:"bytes_per_example"`
	Compression         float64 `json:"compression"`
	UpdateCompression   float64 `json:"update_compression"`
	SnapshotCompression float64 `json:"snapshot_compression"`

	// SnapshotCache is the job's snapshot cache (snapcache.go).
	SnapshotCache SnapshotCacheView `json:"snapshot_cache"`

	// Relays' aggregates (docs/RELAYS.md): applied, refused, and
	// delivered again after being applied (acknowledged, not applied).
	RelayAggregates          int64 `json:"relay_aggregates,omitempty"`
	RelayAggregatesRefused   int64 `json:"relay_aggregates_refused,omitempty"`
	RelayAggregatesDuplicate int64 `json:"relay_aggregates_duplicate,omitempty"`
}

// view copies the loop's state; call it on the loop.
func (j *Job) view(st *jobState) JobView {
	v := JobView{
		ID: j.ID, Name: j.Spec.Name, State: st.state, Reason: st.reason,
		Version: st.model.Version, Epoch: st.epoch, ExamplesSeen: st.examplesSeen,
		UpdatesApplied: st.applied, UpdatesRejected: st.rejected,
		Rejections:   make(map[string]int64, len(st.rejections)),
		LeasesIssued: st.leasesIssued, LeasesExpired: st.leasesExpired, LateRevived: st.lateRevived, LeasesHeld: len(st.sched.Leases()),
		MaxStaleness: st.spec.MaxStaleness, NumParams: j.model.NumParams, Shards: len(j.shards),
		StartedAt: st.startedAt, Spec: viewSpec(st.spec), Mode: st.spec.Mode, Run: j.run, LastCheckpoint: j.lastCkpt.Load(),
		StalenessHistogram: slices.Clone(st.stalenessHist), LR: st.spec.OuterOptimizer.LR,
		Weight: st.spec.EffectiveWeight(), Priority: st.spec.Priority,
	}
	if r, ok := st.agg.(*engine.Rounds); ok {
		v.Round, v.RoundResults = r.Round(), r.Partial().Results
	}
	v.RoundsShort, v.LeasesReleased, v.LastRelease = st.roundsShort, st.leasesReleased, st.lastRelease
	v.SnapshotCache = j.snapshotCacheView(st.rebased, st.rebasedResults)
	v.Clipped = st.clipped
	v.Colluding = st.colluding
	v.Climbing = st.climbing
	v.RelayAggregates, v.RelayAggregatesRefused, v.RelayAggregatesDuplicate = st.relay.aggregates, st.relay.refused, st.relay.duplicates
	v.SpotChecks = j.spotView()
	if j.rl != nil {
		v.RL = j.rlView()
	}
	v.Abuse = j.abuseView()
	j.wireView(&v)
	if j.validator != nil {
		v.Validated = j.validator.zeno.Checked
		v.Rechecks = j.recheckView()
	}
	if a, ok := st.agg.(*engine.Async); ok && a.Clip != nil {
		v.ClipRadius = a.Clip.Radius()
	}
	if st.state == StateRunning {
		v.ExamplesPerSec, v.UpdatesPerSec = st.examplesPerSec, st.updPerSec
	}
	if j.store != nil {
		failure, _, durable := j.health.get()
		v.CheckpointFailure = failure
		if ended(st.state) && (durable == nil || durable.state != st.state) {
			v.State = StateFinishing
		}
	}
	for k, n := range st.rejections {
		v.Rejections[k] = n
	}
	if st.applied > 0 {
		v.MeanStaleness = float64(st.stalenessSum) / float64(st.applied)
	}
	if st.state == StateRunning || st.state == StatePaused {
		v.EpochProgress = float64(st.epochExamples) / float64(j.epochSize)
	}
	if st.eval != nil {
		e := *st.eval
		v.Eval = &e
	}
	if !st.doneAt.IsZero() {
		t := st.doneAt
		v.DoneAt = &t
	}
	return v
}

// logf logs an INFO line with the job's attribute: the lines not yet
// given a level of their own.
func (j *Job) logf(format string, args ...any) { j.log.Info(fmt.Sprintf(format, args...)) }
