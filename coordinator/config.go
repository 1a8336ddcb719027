package coordinator

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// Config configures a Server. Train and Test, or LoadData, are required.
type Config struct {
	// Train and Test, when set, are the `mnist` data set (already loaded:
	// tests pass small fixtures here).
	Train, Test *dataset.Set
	// LoadData loads the data a job spec names (dataset.Load, say). The
	// server calls it once per distinct data set (and text context) and
	// shares the sets among the jobs that name it.
	LoadData LoadDataFunc
	// DataRoot is the only directory whose files a spec submitted over
	// the API may name (relative paths are relative to it); "" is the
	// working directory. Specs given to AddJob directly (serve's --job)
	// are not restricted.
	DataRoot string
	// DataLoadTimeout bounds how long a submission waits for the data its
	// spec names to load (DefaultDataLoadTimeout when 0): a slower load is
	// refused, and other submissions never wait behind it.
	DataLoadTimeout time.Duration
	// MaxParams is the largest model, in parameters, a job may have: a
	// submitted (or sweep's) job over it is refused, naming both sizes.
	// 0 takes any model; serve's default is DefaultMaxParams. Jobs
	// resumed from the store are not checked again.
	MaxParams int64
	// Logger receives progress and problems, with job, worker, volunteer
	// and relay attributes where they apply (logging.go). Nil means a
	// logger made from Logf when that is set, else slog.Default().
	Logger *slog.Logger
	// Logf is the printf-style logger of before Logger, for callers (and
	// tests) that still have one: used only when Logger is nil, through
	// LogfLogger.
	Logf func(format string, args ...any)
	// IdleRetry is how soon a worker with nothing to do asks again.
	IdleRetry time.Duration
	// HelloTimeout bounds how long a new connection may take to say hello.
	HelloTimeout time.Duration
	// WriteTimeout bounds every websocket write; a worker that cannot take
	// a message in time is disconnected, never waited on.
	WriteTimeout time.Duration
	// MaxLeases is how many leases one worker may hold at once.
	MaxLeases int
	// Store keeps jobs, checkpoints, metrics and workers; nil keeps
	// nothing (a coordinator that dies loses its jobs).
	Store *store.Store
	// CheckpointInterval is the longest time between checkpoints of a job
	// whose model has moved.
	CheckpointInterval time.Duration
	// SnapshotCacheBytes bounds the snapshot bodies and deltas the
	// coordinator holds, all jobs together (snapcache.go); 0 is
	// DefaultSnapshotCacheBytes. Each job's current version is kept even
	// past it.
	SnapshotCacheBytes int64
	// KeepCheckpoints is how many checkpoints of each job are kept.
	KeepCheckpoints int
	// Verbose logs every checkpoint written.
	Verbose bool
	// AdminToken guards the admin API and page (see auth.go). Empty
	// disables them: every admin route answers 401.
	AdminToken string
	// Join is who may volunteer: JoinOpen (the default) anyone, JoinToken
	// only those with a join token the operator issued (join.go).
	Join string
	// Pages serves every path the coordinator does not (the contribute
	// page at / and its assets; see package web). Nil serves a plain index
	// that links the API.
	Pages http.Handler

	// HTTP access: who may reach what (access.go, docs/SECURITY.md).
	//
	// PublicURLs are the URLs volunteers and the operator reach the
	// coordinator by ("https://grid.example.org", "http://10.0.0.5:8080"):
	// requests naming another Host, and browser requests from another
	// Origin (scheme, host and port), are refused. Loopback names are
	// always allowed.
	PublicURLs []string
	// TrustedProxies are addresses or CIDRs whose X-Forwarded-For header
	// names the client; from anyone else it is ignored.
	TrustedProxies []string
	// AuthFailBurst failed token checks per client address, then one per
	// AuthFailEvery; while an address is over, even the right token from
	// it is refused (a signed-in session still works).
	AuthFailBurst int
	AuthFailEvery time.Duration
	// ClientTableSize bounds each per-address table; the least recently
	// seen address is forgotten first.
	ClientTableSize int
	// AnonBulkRate (bytes/s) and AnonBulkBurst (bytes) are what an address
	// holding no lease may download of snapshots, shards and the pages'
	// assets. A worker's own leases' snapshots and shards are free.
	AnonBulkRate, AnonBulkBurst int64
	// MinReadRate (bytes/s) is the slowest a client may read a snapshot,
	// shard, download or page asset once MinReadGrace has passed; a slower
	// one is disconnected.
	MinReadRate  int64
	MinReadGrace time.Duration
	// MetricsToken, when set, must come as "Authorization: Bearer TOKEN"
	// to read /metrics.
	MetricsToken string
	// MetricsPageMax is the most rows one /api/v1/jobs/{id}/metrics
	// response holds.
	MetricsPageMax int
	// ReadBodyTimeout bounds how long a client may take to send a
	// request's body (the header timeout is the HTTP server's).
	ReadBodyTimeout time.Duration

	// Durability (see durability.go and docs/SECURITY.md).
	// CheckpointRetryMin and CheckpointRetryMax bound the backoff between
	// attempts to write a checkpoint that failed (disk full, file system
	// read-only): the wait doubles from Min up to Max.
	CheckpointRetryMin, CheckpointRetryMax time.Duration
	// StoreShutdownTimeout bounds how long Close waits for the store: the
	// final checkpoints (retried until then if they fail) and the last
	// worker records. A frozen file system cannot hang shutdown past it.
	StoreShutdownTimeout time.Duration
	// MaxWorkerRecords is how many worker records the store keeps (the
	// most recently seen); WorkerRecordMaxAge drops records not seen for
	// that long (0 keeps any age).
	MaxWorkerRecords   int
	WorkerRecordMaxAge time.Duration
	// WorkerRecordQueue bounds the worker records waiting to be written;
	// past it, a record is dropped (and counted), never waited for.
	WorkerRecordQueue int

	// Wire: what one websocket connection may send, hold and owe
	// (docs/SECURITY.md, section Wire).
	//
	// MaxControlBytes is the size limit of every message but a result
	// (hello, want, release, bye); only results get the job's limit of
	// one full update plus 64 KiB.
	MaxControlBytes int64
	// FrameBounds limit every received frame's nesting and element count
	// (protocol.CheckFrame); zero fields take protocol.DefaultBounds'.
	FrameBounds protocol.Bounds
	// DecodeBuffers is how many decode buffers are kept between messages,
	// shared by every connection; each holds one received frame and the
	// update decoded from it (about two fp32 updates' worth). More are
	// allocated while that many are in use and dropped afterwards, so
	// what an idle connection holds does not depend on what it sent.
	DecodeBuffers int
	// PingInterval is how often each connection is pinged; a connection
	// that leaves MaxMissedPings pings in a row unanswered (no pong
	// within PingInterval each) is closed. Negative disables pings.
	PingInterval   time.Duration
	MaxMissedPings int
	// NonFiniteEvalInterval is the least time between the evaluations
	// that runs of non-finite results start (each scores the test set).
	NonFiniteEvalInterval time.Duration
	// MaxHTTPConnsPerAddress is how many HTTP connections one peer
	// address (an IPv6 /64) may hold open at once, served by an
	// http.Server whose ConnState is Server.ConnState; more are closed
	// as they arrive. A trusted proxy's connections are not counted.
	MaxHTTPConnsPerAddress int
	// MaxConnsPerAddress is how many websocket connections one client
	// address (an IPv6 /64) may hold open at once, from the upgrade on,
	// hello or not; more are refused with 429 before the upgrade.
	MaxConnsPerAddress int

	// Volunteers and abuse (limits.go, hostages.go; docs/SECURITY.md).
	//
	// MaxLeasesPerAddress is how many leases one client address may hold
	// at once, all its connections together; a want beyond that share is
	// answered with an idle message saying so.
	MaxLeasesPerAddress int
	// HelloRate is hellos per second one address may send after a burst
	// of HelloBurst (default MaxConnsPerAddress); a hello over it is
	// refused with the error code rate_limited, saying when to retry.
	HelloRate  float64
	HelloBurst int
	// ResultBytesRate (bytes/s) and ResultBytesBurst (bytes) are what one
	// address may send of results: a faster sender's connections pause
	// reading; when the pause would pass MaxResultPause, its result is
	// refused as rate_limited and its lease queued again.
	ResultBytesRate, ResultBytesBurst int64
	MaxResultPause                    time.Duration
	// MaxExpiriesInARow leases of one volunteer expiring with no accepted
	// result between drop its connections and refuse its hellos for
	// HostageCoolOff. Each expiry halves its lease cap (at least 1).
	MaxExpiriesInARow int
	HostageCoolOff    time.Duration
}

// Wire defaults (docs/SECURITY.md, section Wire).
const (
	DefaultMaxControlBytes       = 64 << 10
	DefaultDecodeBuffers         = 8
	DefaultPingInterval          = 30 * time.Second
	DefaultMaxMissedPings        = 3
	DefaultNonFiniteEvalInterval = 30 * time.Second
	DefaultMaxConnsPerAddress    = 32
)

// DefaultMaxHTTPConnsPerAddress is the default of
// Config.MaxHTTPConnsPerAddress (docs/SECURITY.md, section HTTP access).
const DefaultMaxHTTPConnsPerAddress = 64

// DefaultDataLoadTimeout is how long a submission waits for its data by
// default: Fashion-MNIST loads in about a second, a large .npy from a
// local disk in tens of seconds.
const DefaultDataLoadTimeout = 2 * time.Minute

func (c *Config) setDefaults() {
	if c.Logger == nil {
		if c.Logf != nil {
			c.Logger = LogfLogger(c.Logf)
		} else {
			c.Logger = slog.Default()
		}
	}
	// Lines not yet given a level and attributes of their own.
	c.Logf = printfLogger(c.Logger)
	if c.Join == "" {
		c.Join = JoinOpen
	}
	orDefault(&c.IdleRetry, 100*time.Millisecond)
	orDefault(&c.HelloTimeout, 10*time.Second)
	orDefault(&c.WriteTimeout, 10*time.Second)
	orDefault(&c.MaxLeases, DefaultMaxLeases)
	orDefault(&c.CheckpointInterval, 10*time.Second)
	orDefault(&c.KeepCheckpoints, 5)
	orDefault(&c.DataLoadTimeout, DefaultDataLoadTimeout)
	c.setAccessDefaults()
	c.setDurabilityDefaults()
	orDefault(&c.MaxControlBytes, DefaultMaxControlBytes)
	orDefault(&c.DecodeBuffers, DefaultDecodeBuffers)
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	orDefault(&c.MaxMissedPings, DefaultMaxMissedPings)
	orDefault(&c.NonFiniteEvalInterval, DefaultNonFiniteEvalInterval)
	orDefault(&c.MaxConnsPerAddress, DefaultMaxConnsPerAddress)
	orDefault(&c.MaxHTTPConnsPerAddress, DefaultMaxHTTPConnsPerAddress)
	c.setLimitDefaults()
}

// orDefault sets *v to def when it is not positive (unset).
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
