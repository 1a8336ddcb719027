//go:build cgo

package main

import (
	"flag"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// abuseFlags are serve's per-address and hostage limits (docs/SECURITY.md,
// section Volunteers and abuse).
type abuseFlags struct {
	leasesPerAddress int
	helloRate        float64
	resultBytesRate  int64
	maxResultPause   time.Duration
	expiriesInARow   int
	hostageCoolOff   time.Duration
}

func (a *abuseFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&a.leasesPerAddress, "max-leases-per-address", coordinator.DefaultMaxLeasesPerAddress,
		"leases one client address may hold at once, all its connections together (loopback: plus 2 per --local-workers)")
	fs.Float64Var(&a.helloRate, "hellos-per-second", coordinator.DefaultHelloRate,
		"worker hellos per second one address may send, after a burst of --max-conns-per-address; more are refused as rate_limited")
	fs.Int64Var(&a.resultBytesRate, "result-bytes-per-second", coordinator.DefaultResultBytesRate,
		"`BYTES` of results per second one address may send; a faster one's connections pause reading")
	fs.DurationVar(&a.maxResultPause, "max-result-pause", coordinator.DefaultMaxResultPause,
		"longest pause of a connection over --result-bytes-per-second; past it, its result is refused as rate_limited and the lease queued again")
	fs.IntVar(&a.expiriesInARow, "max-expiries-in-a-row", coordinator.DefaultMaxExpiriesInARow,
		"a volunteer whose leases expire this many times in a row with no accepted result is dropped for --hostage-cool-off")
	fs.DurationVar(&a.hostageCoolOff, "hostage-cool-off", coordinator.DefaultHostageCoolOff,
		"how long a dropped hostage's hellos are refused (rate_limited)")
}

func (a *abuseFlags) check() error {
	if a.leasesPerAddress < 1 || a.helloRate <= 0 || a.resultBytesRate < 1<<10 || a.maxResultPause <= 0 || a.expiriesInARow < 1 || a.hostageCoolOff <= 0 {
		return usagef("--max-leases-per-address and --max-expiries-in-a-row must be >= 1, --hellos-per-second, --max-result-pause and --hostage-cool-off positive, --result-bytes-per-second >= 1024")
	}
	return nil
}

func (a *abuseFlags) apply(cfg *coordinator.Config, localWorkers int) {
	// The local workers connect over loopback, on top of the share.
	cfg.MaxLeasesPerAddress = a.leasesPerAddress + coordinator.DefaultMaxLeases*localWorkers
	cfg.HelloRate = a.helloRate
	cfg.ResultBytesRate = a.resultBytesRate
	cfg.MaxResultPause = a.maxResultPause
	cfg.MaxExpiriesInARow = a.expiriesInARow
	cfg.HostageCoolOff = a.hostageCoolOff
}
