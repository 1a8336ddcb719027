package protocol

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/crowdtrain/crowdtrain/nn"
)

// maxLabelsPerExample bounds a result's correct per example: a sequence
// model scores each of its example's positions (at most the largest
// example a shard holds). The coordinator checks the exact bound, its
// model's labels per example.
const maxLabelsPerExample = 1 << 20

// Version is the protocol version. A peer speaking another version is
// refused with a message that says which one to upgrade.
const Version = 3

// Type names a message kind on the wire.
type Type string

const (
	TypeHello   Type = "hello"   // worker → coordinator, first message
	TypeWelcome Type = "welcome" // coordinator → worker, answer to hello
	TypeWant    Type = "want"    // worker → coordinator: give me N more leases
	TypeLease   Type = "lease"   // coordinator → worker: one task
	TypeResult  Type = "result"  // worker → coordinator: a finished task
	TypeAck     Type = "ack"     // coordinator → worker: result accepted or rejected
	TypeIdle    Type = "idle"    // coordinator → worker: no work now, ask again later
	TypeStart   Type = "start"   // worker → coordinator: computing this lease now (snapshot "latest")
	TypeStarted Type = "started" // coordinator → worker: the base version a started lease computes from
	TypeRelease Type = "release" // worker → coordinator: give leases back unfinished
	TypeBye     Type = "bye"     // worker → coordinator: leaving
	TypeError   Type = "error"   // either way: a problem, usually followed by a close
	TypeAssign  Type = "assign"  // coordinator → worker: the job the next leases are for (jobs.go)
	TypeRevoke  Type = "revoke"  // coordinator → worker: a job's leases are void (jobs.go)
)

// Worker kinds a hello may carry.
const (
	KindNative  = "native"
	KindBrowser = "browser"
	KindGPU     = "gpu"
)

// Update codecs: how a result's update travels (docs/PROTOCOL.md, Update
// codecs). Every peer speaks CodecF32; the others are negotiated: the
// worker names those it speaks in hello, and welcome says which one the
// job wants from it.
const (
	// CodecF32 is little-endian float32s in Result.Update.
	CodecF32 = "f32"
	// CodecF16 is IEEE half floats in Result.Packed.
	CodecF16 = "f16"
	// CodecI8 is per-block min-max 8-bit quantisation in Result.Packed,
	// with error feedback kept on the worker.
	CodecI8 = "i8"
	// CodecTopK is the largest entries by magnitude (indices and float32
	// values) in Result.Packed, with error feedback kept on the worker.
	CodecTopK = "topk"
	// CodecSparse is per-chunk top-k with 2-bit values and bit-packed
	// offsets (SparseLoCo's) in Result.Packed, with error feedback kept
	// on the worker.
	CodecSparse = "sparse"
)

// UpdateCodecs are the update codecs this package encodes and decodes.
var UpdateCodecs = []string{CodecF32, CodecF16, CodecI8, CodecTopK, CodecSparse}

// Snapshot codecs: how a snapshot's parameters travel. A worker names
// those it reads in hello (SnapshotCodecs); absent means f32 only.
const (
	SnapshotF32 = "f32"
	SnapshotF16 = "f16"
)

// What a result's update holds (Lease.UpdateKind).
const (
	// UpdateGradient is the pseudo-gradient (w_base - w_after) / inner lr:
	// the gradient itself for one SGD step.
	UpdateGradient = "gradient"
	// UpdateDelta is the plain difference w_base - w_after (DiLoCo's
	// outer gradient, whatever the inner optimizer).
	UpdateDelta = "delta"
)

// Which snapshot a lease computes from (Lease.Snapshot).
const (
	// SnapshotGranted: BaseVersion and SnapshotURL are fixed in the lease.
	SnapshotGranted = "granted"
	// SnapshotLatest: the lease carries no base; the worker sends start
	// when it begins computing and the coordinator answers started with
	// the newest published snapshot.
	SnapshotLatest = "latest"
)

// Inner optimizers a lease may ask for (InnerOptimizer.Type).
const (
	InnerSGD   = "sgd"
	InnerAdamW = "adamw"
)

// Rejection reasons an Ack carries, also the keys of a job's rejections.
const (
	ReasonStale        = "stale"         // base version further behind than max_staleness
	ReasonInvalid      = "invalid"       // wrong length, non-finite values, bad fields
	ReasonUnknownLease = "unknown_lease" // never issued, expired, or not this worker's
	ReasonNotRunning   = "not_running"   // the job is paused, done or failed
	ReasonLate         = "late"          // its round closed before it arrived (sync, diloco), or its lease expired and another took the task
	// ReasonClipped is on an accepted ack: the result was applied, clipped
	// by the job's robust aggregation.
	ReasonClipped = "clipped"
	// ReasonQuarantined: the result is held, not applied, until a spot
	// check settles it (its volunteer has a strike, or its copy disagreed),
	// or a validation on the coordinator's own data refused it.
	ReasonQuarantined = "quarantined"
	// ReasonBanned: the volunteer is banned; nothing it sends is applied.
	ReasonBanned = "banned"
	// ReasonRateLimited: the volunteer or its address is over a limit.
	ReasonRateLimited = "rate_limited"
	// ReasonDuplicate: the same update was already applied (a replay), or
	// another copy of the task was already accepted.
	ReasonDuplicate = "duplicate"
	// ReasonForged: an RL rollout's logged log-probabilities are not the
	// ones the policy version its lease named gives its tokens (the
	// coordinator recomputed them): its tokens were not sampled from
	// that policy; or an RL learn result is not the update its lease
	// gives (the coordinator computed the lease again). Its volunteer is
	// struck.
	ReasonForged = "forged"
)

// Bounds on what a peer may ask for, checked by Validate.
const (
	MaxWant       = 8
	maxThreads    = 4096
	MaxShortText  = 128 // bytes in a name, client or reason
	maxLongText   = 4096
	maxCodecs     = 16
	maxReleaseIDs = 64
)

// Message is implemented by every message body.
type Message interface {
	MessageType() Type
	// Validate checks the fields a receiver can check without context.
	Validate() error
}

// Hello is the first message on every connection.
type Hello struct {
	Protocol int      `msgpack:"protocol"`
	Kind     string   `msgpack:"kind"`    // native, browser or gpu
	Backend  string   `msgpack:"backend"` // e.g. "cpu-gonum", "wasm", "cuda"
	Threads  int      `msgpack:"threads"`
	Client   string   `msgpack:"client"` // client software and version
	Codecs   []string `msgpack:"codecs,omitempty"`
	Token    string   `msgpack:"token,omitempty"` // join token, for a coordinator run with --join token
	// VolunteerKey is a random secret the volunteer generated once and
	// keeps (the browser's storage, a file for the native worker): credit
	// and standing attach to it. Empty: the coordinator counts the
	// connection under its address.
	VolunteerKey string `msgpack:"volunteer_key,omitempty"`
	// Name is the display name the volunteer chose for the leaderboard.
	Name string `msgpack:"name,omitempty"`
	// SnapshotCodecs are the snapshot encodings the worker reads
	// (SnapshotF32, SnapshotF16); absent: f32 only.
	SnapshotCodecs []string `msgpack:"snapshot_codecs,omitempty"`
	// Caps is what the worker can run (jobs.go); nil: unknown, and only
	// jobs that require nothing are placed on it.
	Caps *Caps `msgpack:"caps,omitempty"`
	// SnapshotRebase says the worker reads a snapshot response's
	// X-Crowdtrain-Snapshot-Version header: when the version its lease
	// names is no longer kept, the coordinator serves the current one,
	// names it there, and the worker reports it as its result's base.
	SnapshotRebase bool `msgpack:"snapshot_rebase,omitempty"`
	// Job pins the worker to one job (or a sweep's trials) by id; empty:
	// any job the coordinator chooses.
	Job string `msgpack:"job,omitempty"`
}

// Limits are what the coordinator enforces on this connection.
type Limits struct {
	MaxMessageBytes int64 `msgpack:"max_message_bytes"`
	LeaseTimeoutMs  int64 `msgpack:"lease_timeout_ms"`
	MaxLeases       int   `msgpack:"max_leases"` // leases a worker may hold at once
}

// JobInfo tells a worker what it trains.
type JobInfo struct {
	ID        string       `msgpack:"id"`
	Name      string       `msgpack:"name"`
	Model     nn.ModelSpec `msgpack:"model"`
	NumParams int          `msgpack:"num_params"`
	// UpdateCodec is the codec this worker sends its updates in: the
	// job's, when the worker named it in hello, else CodecF32. Absent
	// means CodecF32.
	UpdateCodec string `msgpack:"update_codec,omitempty"`
	// TopKFraction is the share of entries a CodecTopK update sends.
	TopKFraction float64 `msgpack:"topk_fraction,omitempty"`
	// SparseFraction is the share of each chunk a CodecSparse update
	// sends, and SparseChunk the values per chunk.
	SparseFraction float64 `msgpack:"sparse_k,omitempty"`
	SparseChunk    int     `msgpack:"sparse_chunk,omitempty"`
	// SnapshotCodec is how this worker's snapshot URLs encode the
	// parameters (SnapshotF32 when absent).
	SnapshotCodec string `msgpack:"snapshot_codec,omitempty"`
}

// Welcome answers a hello. Job is the job the first leases are for, and
// Limits its limits; both are empty when no job can use the worker yet
// (it is then told by an assign when one can).
type Welcome struct {
	WorkerID string  `msgpack:"worker_id"`
	Job      JobInfo `msgpack:"job"`
	Limits   Limits  `msgpack:"limits"`
}

// Want asks for N more leases; 2 lets a worker fetch the next task's data
// while it computes the current one.
type Want struct {
	N int `msgpack:"n"`
}

// InnerOptimizer is the optimizer a worker runs its local steps with. Its
// state starts fresh with every lease: volunteers come and go, so no state
// is carried between tasks.
type InnerOptimizer struct {
	Type        string  `msgpack:"type"` // InnerSGD or InnerAdamW
	LR          float32 `msgpack:"lr"`
	WeightDecay float32 `msgpack:"weight_decay,omitempty"` // adamw: decoupled, lr * wd * w per step
	Beta1       float32 `msgpack:"beta1,omitempty"`        // adamw
	Beta2       float32 `msgpack:"beta2,omitempty"`        // adamw
	Epsilon     float32 `msgpack:"epsilon,omitempty"`      // adamw
	// ClipNorm (any type; 0 = off) scales each step's gradient by
	// min(1, clip_norm/‖g‖₂) first, as torch.nn.utils.clip_grad_norm_.
	ClipNorm float32 `msgpack:"clip_norm,omitempty"`
}

// Lease is one task: from the snapshot at BaseVersion, run LocalSteps
// steps of BatchSize examples each over examples [Start, Start+Count) of a
// shard with the inner optimizer, and return the update UpdateKind names.
// With Snapshot "latest" the lease has no base yet: BaseVersion is 0 and
// SnapshotURL empty until the coordinator answers the worker's start.
type Lease struct {
	ID             uint64 `msgpack:"id"`
	JobID          string `msgpack:"job_id"`
	ShardID        int    `msgpack:"shard_id"`
	ShardURL       string `msgpack:"shard_url"`
	Start          int    `msgpack:"start"`
	Count          int    `msgpack:"count"`
	BaseVersion    int64  `msgpack:"base_version"`
	SnapshotURL    string `msgpack:"snapshot_url"`
	BatchSize      int    `msgpack:"batch_size"`
	LocalSteps     int    `msgpack:"local_steps"`
	DeadlineUnixMs int64  `msgpack:"deadline_unix_ms"`

	Inner      InnerOptimizer `msgpack:"inner_optimizer"`
	UpdateKind string         `msgpack:"update_kind"` // UpdateGradient or UpdateDelta
	Snapshot   string         `msgpack:"snapshot"`    // SnapshotGranted or SnapshotLatest
	Round      uint64         `msgpack:"round,omitempty"`
	// CopyOf is set on a spot check's copy: the id of the lease whose task
	// it computes again. The copy draws that lease's dropout masks, so an
	// honest copy agrees with it.
	CopyOf uint64 `msgpack:"copy_of,omitempty"`
	// Rollout or Learn makes the lease one of an RL job's (rl.go): the
	// shard, batch and optimizer fields are then unused.
	Rollout *RolloutTask `msgpack:"rollout,omitempty"`
	Learn   *LearnTask   `msgpack:"learn,omitempty"`
}

// Start tells the coordinator the worker begins computing a lease whose
// Snapshot is "latest"; the coordinator fixes its base version now.
type Start struct {
	LeaseID uint64 `msgpack:"lease_id"`
	JobID   string `msgpack:"job_id,omitempty"` // the lease's job
}

// Started answers a start: compute from the snapshot at BaseVersion.
type Started struct {
	LeaseID        uint64 `msgpack:"lease_id"`
	BaseVersion    int64  `msgpack:"base_version"`
	SnapshotURL    string `msgpack:"snapshot_url"`
	DeadlineUnixMs int64  `msgpack:"deadline_unix_ms"`
}

// Result carries a finished lease's pseudo-gradient
// (w_base - w_after) / inner_lr.
type Result struct {
	LeaseID     uint64 `msgpack:"lease_id"`
	JobID       string `msgpack:"job_id"`
	BaseVersion int64  `msgpack:"base_version"`
	Codec       string `msgpack:"codec"`
	// Update is the update itself with CodecF32; with another codec it is
	// absent on the wire and Packed holds it.
	Update    Floats  `msgpack:"update,omitempty"`
	Packed    Packed  `msgpack:"packed,omitempty"`
	Examples  int     `msgpack:"examples"`
	LossSum   float64 `msgpack:"loss_sum"`
	Correct   int     `msgpack:"correct"`
	ComputeMs float64 `msgpack:"compute_ms"`
	// CommMs is the wall time this worker spent on the wire for the lease:
	// downloading its snapshot (or delta), plus uploading its previous
	// result (that result's Ack.RecvMs). 0: not measured.
	CommMs float64 `msgpack:"comm_ms,omitempty"`
	// Link is the worker's estimate of its connection, nil if it has none.
	Link *Link `msgpack:"link,omitempty"`
	// Backend is the worker's backend as Hello names it, sent when it has
	// changed since the hello or the last result that carried it: a CPU
	// worker under --kernel auto chooses its kernel by timing the job's
	// model, after the hello. Empty: unchanged.
	Backend string `msgpack:"backend,omitempty"`
	// Rollouts is a rollout lease's result (rl.go): the completions, in
	// place of an update.
	Rollouts []Rollout `msgpack:"rollouts,omitempty"`
}

// Link is what a worker measured of its connection to the coordinator.
type Link struct {
	DownBps float64 `msgpack:"down_bps"` // bits per second, downloads
	UpBps   float64 `msgpack:"up_bps"`   // bits per second, uploads
	RttMs   float64 `msgpack:"rtt_ms"`   // round trip, milliseconds
}

// Ack answers a result.
type Ack struct {
	LeaseID   uint64 `msgpack:"lease_id"`
	Accepted  bool   `msgpack:"accepted"`
	Reason    string `msgpack:"reason,omitempty"` // a Reason* constant when rejected
	Detail    string `msgpack:"detail,omitempty"`
	Staleness int64  `msgpack:"staleness"`
	Version   int64  `msgpack:"version"` // the model version after this result
	// RecvMs is how long the coordinator took to receive the result's
	// frame, from its first byte to its last: the worker's upload time.
	RecvMs float64 `msgpack:"recv_ms,omitempty"`
}

// Idle says there is no work now.
type Idle struct {
	Reason  string `msgpack:"reason"`
	RetryMs int64  `msgpack:"retry_ms"`
}

// Release gives leases back without results (a snapshot that could not be
// fetched, a backend error); they are queued again at once.
type Release struct {
	LeaseIDs []uint64 `msgpack:"lease_ids"`
	Reason   string   `msgpack:"reason"`
	JobID    string   `msgpack:"job_id,omitempty"` // the leases' job
}

// Bye announces a clean departure: the worker's leases are queued again.
type Bye struct {
	Reason string `msgpack:"reason"`
}

// Error reports a problem to the peer.
type Error struct {
	Code    string `msgpack:"code"`
	Message string `msgpack:"message"`
}

func (*Hello) MessageType() Type   { return TypeHello }
func (*Welcome) MessageType() Type { return TypeWelcome }
func (*Want) MessageType() Type    { return TypeWant }
func (*Lease) MessageType() Type   { return TypeLease }
func (*Result) MessageType() Type  { return TypeResult }
func (*Ack) MessageType() Type     { return TypeAck }
func (*Idle) MessageType() Type    { return TypeIdle }
func (*Start) MessageType() Type   { return TypeStart }
func (*Started) MessageType() Type { return TypeStarted }
func (*Release) MessageType() Type { return TypeRelease }
func (*Bye) MessageType() Type     { return TypeBye }
func (*Error) MessageType() Type   { return TypeError }
func (*Assign) MessageType() Type  { return TypeAssign }
func (*Revoke) MessageType() Type  { return TypeRevoke }

// newMessage returns an empty body for t, or nil for an unknown type.
func newMessage(t Type) Message {
	switch t {
	case TypeHello:
		return new(Hello)
	case TypeWelcome:
		return new(Welcome)
	case TypeWant:
		return new(Want)
	case TypeLease:
		return new(Lease)
	case TypeResult:
		return new(Result)
	case TypeAck:
		return new(Ack)
	case TypeIdle:
		return new(Idle)
	case TypeStart:
		return new(Start)
	case TypeStarted:
		return new(Started)
	case TypeRelease:
		return new(Release)
	case TypeBye:
		return new(Bye)
	case TypeError:
		return new(Error)
	case TypeAssign:
		return new(Assign)
	case TypeRevoke:
		return new(Revoke)
	}
	return nil
}

// ValidationError says which field of which message is wrong and why.
type ValidationError struct {
	Type    Type
	Field   string
	Problem string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid %s message: %s: %s", e.Type, e.Field, e.Problem)
}

func invalid(t Type, field, format string, args ...any) error {
	return &ValidationError{Type: t, Field: field, Problem: fmt.Sprintf(format, args...)}
}

func checkText(t Type, field, s string, max int, required bool) error {
	switch {
	case required && s == "":
		return invalid(t, field, "must not be empty")
	case len(s) > max:
		return invalid(t, field, "%d bytes, at most %d allowed", len(s), max)
	case !utf8.ValidString(s):
		return invalid(t, field, "not valid UTF-8")
	}
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func (m *Hello) Validate() error {
	if m.Protocol != Version {
		return fmt.Errorf("%w: worker speaks protocol %d, this coordinator speaks %d: upgrade the older side",
			ErrVersion, m.Protocol, Version)
	}
	switch m.Kind {
	case KindNative, KindBrowser, KindGPU:
	default:
		return invalid(TypeHello, "kind", "%q is not one of native, browser, gpu", m.Kind)
	}
	if err := checkText(TypeHello, "backend", m.Backend, MaxShortText, true); err != nil {
		return err
	}
	if m.Threads < 1 || m.Threads > maxThreads {
		return invalid(TypeHello, "threads", "%d is outside 1..%d", m.Threads, maxThreads)
	}
	if err := checkText(TypeHello, "client", m.Client, MaxShortText, false); err != nil {
		return err
	}
	if len(m.Codecs) > maxCodecs {
		return invalid(TypeHello, "codecs", "%d codecs, at most %d allowed", len(m.Codecs), maxCodecs)
	}
	for i, c := range m.Codecs {
		if err := checkText(TypeHello, fmt.Sprintf("codecs[%d]", i), c, MaxShortText, true); err != nil {
			return err
		}
	}
	if len(m.SnapshotCodecs) > maxCodecs {
		return invalid(TypeHello, "snapshot_codecs", "%d codecs, at most %d allowed", len(m.SnapshotCodecs), maxCodecs)
	}
	for i, c := range m.SnapshotCodecs {
		if err := checkText(TypeHello, fmt.Sprintf("snapshot_codecs[%d]", i), c, MaxShortText, true); err != nil {
			return err
		}
	}
	if err := checkText(TypeHello, "token", m.Token, MaxShortText*2, false); err != nil {
		return err
	}
	if m.VolunteerKey != "" && !validVolunteerKey(m.VolunteerKey) {
		return invalid(TypeHello, "volunteer_key", "want %d..%d characters of A-Z, a-z, 0-9, '-' and '_' (a random key the worker generates once)",
			MinVolunteerKey, MaxShortText)
	}
	if err := CheckVolunteerName(m.Name); err != nil {
		return invalid(TypeHello, "name", "%v", err)
	}
	if err := checkText(TypeHello, "job", m.Job, MaxShortText, false); err != nil {
		return err
	}
	if m.Caps != nil {
		return m.Caps.validate()
	}
	return nil
}

func (m *Welcome) Validate() error {
	if err := checkText(TypeWelcome, "worker_id", m.WorkerID, MaxShortText, true); err != nil {
		return err
	}
	if m.Job.ID == "" {
		return nil // no job yet: an assign will name one
	}
	return validateJob(TypeWelcome, &m.Job, m.Limits)
}

func (m *Want) Validate() error {
	if m.N < 1 || m.N > MaxWant {
		return invalid(TypeWant, "n", "%d is outside 1..%d", m.N, MaxWant)
	}
	return nil
}

func (m *Lease) Validate() error {
	if m.ID == 0 {
		return invalid(TypeLease, "id", "must not be 0")
	}
	if m.Rollout != nil || m.Learn != nil {
		return m.validateRL()
	}
	switch {
	case m.ID == 0:
		return invalid(TypeLease, "id", "must not be 0")
	case m.ShardID < 0:
		return invalid(TypeLease, "shard_id", "must not be negative, got %d", m.ShardID)
	case m.Start < 0 || m.Count < 1:
		return invalid(TypeLease, "start/count", "need start >= 0 and count >= 1, got %d/%d", m.Start, m.Count)
	case m.BaseVersion < 0:
		return invalid(TypeLease, "base_version", "must not be negative, got %d", m.BaseVersion)
	case m.BatchSize < 1:
		return invalid(TypeLease, "batch_size", "must be positive, got %d", m.BatchSize)
	case m.LocalSteps < 1:
		return invalid(TypeLease, "local_steps", "must be positive, got %d", m.LocalSteps)
	case m.UpdateKind != UpdateGradient && m.UpdateKind != UpdateDelta:
		return invalid(TypeLease, "update_kind", "%q is not %q or %q", m.UpdateKind, UpdateGradient, UpdateDelta)
	}
	if err := m.Inner.validate(); err != nil {
		return err
	}
	if err := checkText(TypeLease, "shard_url", m.ShardURL, maxLongText, true); err != nil {
		return err
	}
	switch m.Snapshot {
	case SnapshotGranted:
		return checkText(TypeLease, "snapshot_url", m.SnapshotURL, maxLongText, true)
	case SnapshotLatest:
		if m.SnapshotURL != "" || m.BaseVersion != 0 {
			return invalid(TypeLease, "snapshot_url", "a lease with snapshot %q names no base until started", SnapshotLatest)
		}
		return nil
	default:
		return invalid(TypeLease, "snapshot", "%q is not %q or %q", m.Snapshot, SnapshotGranted, SnapshotLatest)
	}
}

func (o *InnerOptimizer) validate() error {
	f := func(v float32) bool { return finite(float64(v)) && v >= 0 }
	switch {
	case o.Type != InnerSGD && o.Type != InnerAdamW:
		return invalid(TypeLease, "inner_optimizer.type", "%q is not %q or %q", o.Type, InnerSGD, InnerAdamW)
	case !finite(float64(o.LR)) || o.LR <= 0:
		return invalid(TypeLease, "inner_optimizer.lr", "must be a finite number > 0, got %v", o.LR)
	case !f(o.WeightDecay) || !f(o.Epsilon):
		return invalid(TypeLease, "inner_optimizer", "weight_decay and epsilon must be finite and >= 0, got %v and %v", o.WeightDecay, o.Epsilon)
	case !f(o.Beta1) || o.Beta1 >= 1 || !f(o.Beta2) || o.Beta2 >= 1:
		return invalid(TypeLease, "inner_optimizer", "beta1 and beta2 must be in [0, 1), got %v and %v", o.Beta1, o.Beta2)
	case !f(o.ClipNorm):
		return invalid(TypeLease, "inner_optimizer.clip_norm", "must be finite and >= 0, got %v", o.ClipNorm)
	}
	return nil
}

func (m *Start) Validate() error {
	if m.LeaseID == 0 {
		return invalid(TypeStart, "lease_id", "must not be 0")
	}
	return checkText(TypeStart, "job_id", m.JobID, MaxShortText, false)
}

func (m *Started) Validate() error {
	switch {
	case m.LeaseID == 0:
		return invalid(TypeStarted, "lease_id", "must not be 0")
	case m.BaseVersion < 0:
		return invalid(TypeStarted, "base_version", "must not be negative, got %d", m.BaseVersion)
	}
	return checkText(TypeStarted, "snapshot_url", m.SnapshotURL, maxLongText, true)
}

func (m *Result) Validate() error {
	if m.LeaseID == 0 {
		return invalid(TypeResult, "lease_id", "must not be 0")
	}
	if len(m.Rollouts) > 0 {
		return m.validateRollouts()
	}
	switch {
	case m.LeaseID == 0:
		return invalid(TypeResult, "lease_id", "must not be 0")
	case m.BaseVersion < 0:
		return invalid(TypeResult, "base_version", "must not be negative, got %d", m.BaseVersion)
	case m.Codec != "" && !slices.Contains(UpdateCodecs, m.Codec):
		return invalid(TypeResult, "codec", "%q is not an update codec (want one of %s)", truncate(m.Codec, 32), strings.Join(UpdateCodecs, ", "))
	case (m.Codec == CodecF32 || m.Codec == "") && len(m.Update) == 0:
		return invalid(TypeResult, "update", "must not be empty")
	case (m.Codec == CodecF32 || m.Codec == "") && len(m.Packed) != 0:
		return invalid(TypeResult, "packed", "must be absent with codec %q (the update goes in update)", CodecF32)
	case m.Codec != CodecF32 && m.Codec != "" && len(m.Packed) == 0:
		return invalid(TypeResult, "packed", "must not be empty with codec %q", m.Codec)
	case m.Codec != CodecF32 && m.Codec != "" && len(m.Update) != 0:
		return invalid(TypeResult, "update", "must be absent with codec %q (the update goes in packed)", m.Codec)
	case !finite(m.CommMs) || m.CommMs < 0:
		return invalid(TypeResult, "comm_ms", "must be a finite number >= 0, got %v", m.CommMs)
	case m.Link != nil && !(finite(m.Link.DownBps) && finite(m.Link.UpBps) && finite(m.Link.RttMs)):
		return invalid(TypeResult, "link", "down_bps, up_bps and rtt_ms must be finite numbers")
	case m.Examples < 1:
		return invalid(TypeResult, "examples", "must be positive, got %d", m.Examples)
	case !finite(m.LossSum) || m.LossSum < 0:
		return invalid(TypeResult, "loss_sum", "must be a finite number >= 0, got %v", m.LossSum)
	case m.Correct < 0 || int64(m.Correct) > int64(m.Examples)*maxLabelsPerExample:
		// A sequence model scores every position of an example; the
		// coordinator checks correct against its model's labels per
		// example.
		return invalid(TypeResult, "correct", "%d is more than examples (%d) times %d labels each", m.Correct, m.Examples, maxLabelsPerExample)
	case !finite(m.ComputeMs) || m.ComputeMs < 0:
		return invalid(TypeResult, "compute_ms", "must be a finite number >= 0, got %v", m.ComputeMs)
	}
	if i := m.Update.FirstNonFinite(); i >= 0 {
		return invalid(TypeResult, "update", "value at index %d is %v: the worker's computation diverged or is broken", i, m.Update[i])
	}
	if err := checkText(TypeResult, "backend", m.Backend, MaxShortText, false); err != nil {
		return err
	}
	return checkText(TypeResult, "job_id", m.JobID, MaxShortText, true)
}

func (m *Ack) Validate() error {
	if !m.Accepted && m.Reason == "" {
		return invalid(TypeAck, "reason", "a rejection must say why")
	}
	return checkText(TypeAck, "detail", m.Detail, maxLongText, false)
}

func (m *Idle) Validate() error {
	if m.RetryMs < 0 {
		return invalid(TypeIdle, "retry_ms", "must not be negative, got %d", m.RetryMs)
	}
	return checkText(TypeIdle, "reason", m.Reason, maxLongText, false)
}

func (m *Release) Validate() error {
	if len(m.LeaseIDs) < 1 || len(m.LeaseIDs) > maxReleaseIDs {
		return invalid(TypeRelease, "lease_ids", "%d ids, want 1..%d", len(m.LeaseIDs), maxReleaseIDs)
	}
	if err := checkText(TypeRelease, "job_id", m.JobID, MaxShortText, false); err != nil {
		return err
	}
	return checkText(TypeRelease, "reason", m.Reason, maxLongText, false)
}

func (m *Bye) Validate() error {
	return checkText(TypeBye, "reason", m.Reason, maxLongText, false)
}

func (m *Error) Validate() error {
	return checkText(TypeError, "message", m.Message, maxLongText, false)
}
