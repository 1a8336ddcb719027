//go:build cgo

package main

import (
	"flag"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// memoryFlags bound what the coordinator holds of large models
// (docs/DEPLOY.md, section Memory).
type memoryFlags struct {
	snapshotCacheMB int64
}

func (m *memoryFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&m.snapshotCacheMB, "snapshot-cache-mb", coordinator.DefaultSnapshotCacheBytes>>20,
		"`MB` of snapshot bodies and deltas all jobs together hold for workers, oldest evicted first (each job's current version always stays; "+
			"a worker whose lease's version was evicted is served the current one); the default keeps gpt-small's current version and nine older ones")
}

func (m *memoryFlags) check() error {
	if m.snapshotCacheMB < 1 || m.snapshotCacheMB > 1<<30 {
		return usagef("--snapshot-cache-mb must be from 1 to %d", 1<<30)
	}
	return nil
}

func (m *memoryFlags) apply(cfg *coordinator.Config) {
	cfg.SnapshotCacheBytes = m.snapshotCacheMB << 20
}
