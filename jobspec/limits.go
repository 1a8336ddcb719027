package jobspec

import "time"

// Upper bounds of keys that have no natural one. Each keeps a spec, or a
// live patch, from asking the coordinator for more than it can give (a
// lease held for years, a staleness window no model survives, a duration
// that overflows when the spot checks triple it); none is near a value a
// job needs. The counts are powers of two so that "never" in a benchmark
// (eval_every 1<<30, max_staleness 1<<20) stays allowed.
const (
	MaxMaxStaleness    = 1 << 20   // versions a result's base may lag
	MaxMaxEpochs       = 1 << 20   // passes over the data
	MaxEvalEvery       = 1 << 30   // updates between evaluations
	MaxCheckpointEvery = 1 << 30   // updates between checkpoints
	MaxNormRatio       = 1_000_000 // max_update_norm_ratio
	MaxWeight          = 1e6       // a job's share of the grid
	MaxPriority        = 1000      // priority is in -MaxPriority..MaxPriority
	MaxTargetLoss      = 1e6       // nats
	MaxLeaseTimeout    = 24 * time.Hour
	MaxRoundTimeout    = 24 * time.Hour
	MaxRelayWindow     = 10 * time.Minute
)
