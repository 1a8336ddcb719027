package coordinator

import (
	"fmt"
	"math"
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
)

// Per-address limits (docs/SECURITY.md, section Volunteers and abuse).
// Anyone may join an open grid, and one person may open many connections
// or volunteer keys from one address; what an address may take at once is
// bounded here, whatever identities it uses: connections
// (Config.MaxConnsPerAddress, conn.go), hellos per second, leases held
// across all its connections, and bytes per second of results.

// Defaults of the per-address and per-volunteer limits.
const (
	// DefaultMaxLeases is Config.MaxLeases' default: leases per connection.
	DefaultMaxLeases = 2
	// DefaultMaxLeasesPerAddress is Config.MaxLeasesPerAddress' default.
	DefaultMaxLeasesPerAddress = 16
	// DefaultHelloRate is hellos per second per address, after a burst of
	// Config.MaxConnsPerAddress (an address may open all the connections
	// it is allowed at once, but not churn through them).
	DefaultHelloRate = 2.0
	// DefaultResultBytesRate is bytes per second of results per address:
	// far above what honest workers send (two native mnist-mlp workers on
	// loopback send about 160 MB/s together), so it only bounds floods.
	DefaultResultBytesRate = 1 << 30
	// DefaultMaxResultPause is the longest a connection's reading pauses
	// to keep its address within its result byte rate; a result that
	// would need a longer pause is refused as rate_limited.
	DefaultMaxResultPause = 10 * time.Second
	// DefaultMaxExpiriesInARow and DefaultHostageCoolOff: a volunteer
	// that lets this many leases expire in a row, with no accepted result
	// between, is dropped and refused for the cool-off (hostages.go).
	DefaultMaxExpiriesInARow = 3
	DefaultHostageCoolOff    = 10 * time.Minute
)

func (c *Config) setLimitDefaults() {
	orDefault(&c.MaxLeasesPerAddress, DefaultMaxLeasesPerAddress)
	if c.HelloRate <= 0 {
		c.HelloRate = DefaultHelloRate
	}
	orDefault(&c.HelloBurst, c.MaxConnsPerAddress)
	orDefault(&c.ResultBytesRate, DefaultResultBytesRate)
	// Two seconds' worth: short bursts (several workers answering at
	// once) pass unpaused.
	orDefault(&c.ResultBytesBurst, 2*c.ResultBytesRate)
	orDefault(&c.MaxResultPause, DefaultMaxResultPause)
	orDefault(&c.MaxExpiriesInARow, DefaultMaxExpiriesInARow)
	orDefault(&c.HostageCoolOff, DefaultHostageCoolOff)
}

// jobLimits are the server's limits a job's loop applies (startJob sets
// them; a job made without a server gets the defaults).
type jobLimits struct {
	maxLeases      int // per connection
	perAddress     int // leases held by one address, all connections
	expiriesInARow int
	coolOff        time.Duration
	// drop closes a volunteer's connections and refuses its hellos until
	// until; called on the loop, it must not block. Nil: nothing to drop.
	drop func(volunteer, reason string, until time.Time)
}

func (s *Server) jobLimits() jobLimits {
	return jobLimits{maxLeases: s.cfg.MaxLeases, perAddress: s.cfg.MaxLeasesPerAddress,
		expiriesInARow: s.cfg.MaxExpiriesInARow, coolOff: s.cfg.HostageCoolOff, drop: s.dropVolunteer}
}

func (l jobLimits) orDefaults() jobLimits {
	orDefault(&l.maxLeases, DefaultMaxLeases)
	orDefault(&l.perAddress, DefaultMaxLeasesPerAddress)
	orDefault(&l.expiriesInARow, DefaultMaxExpiriesInARow)
	orDefault(&l.coolOff, DefaultHostageCoolOff)
	return l
}

// leaseShare is how many more leases worker may take under the limits
// that look past its connection: its address's share of leases held, and
// its volunteer's cap after expiries (hostages.go). why says which limit
// binds, for the idle message. Call on the loop.
func (j *Job) leaseShare(worker string) (share int, why string) {
	st := &j.st
	lim := j.limits.orDefaults()
	m, ok := st.members[worker]
	if !ok {
		return math.MaxInt, "" // not joined (a test's direct grant): no share to apply
	}
	addrHeld, volHeld := st.held.addr[m.address], st.held.vol[m.volunteer]
	share = lim.perAddress - addrHeld
	why = fmt.Sprintf("this address holds %d leases, its share (max_leases_per_address %d); ask again when one is answered", addrHeld, lim.perAddress)
	if capNow, expired, ok := st.abuse.caps.Cap(m.volunteer); ok && capNow-volHeld < share {
		share = capNow - volHeld
		why = fmt.Sprintf("%d of this volunteer's leases expired without a result: it may hold %d until its results are accepted again", expired, capNow)
	}
	if s, w := j.volunteerShare(m.volunteer); s < share { // volunteershare.go
		share, why = s, w
	}
	return max(share, 0), why
}

// takeHello spends one of the address's hellos; when it is over its rate
// it says how long to wait.
func (s *Server) takeHello(key string) (ok bool, retry time.Duration) {
	return s.hellos.take(key, 1, time.Now())
}

// owe spends n tokens of key even when it has fewer (a result already
// read is handled, not dropped) and says how long until the balance is
// back at zero: how long the connection should pause before reading more.
func (l *rateLimiter) owe(key string, n float64, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key, now)
	e.tokens -= n
	if e.tokens >= 0 {
		return 0
	}
	return l.wait(e, 0)
}

// resultBytes charges a result frame of n bytes to wc's address. It
// returns how long the connection should pause reading (backpressure: a
// fast sender is slowed, not refused), or over when its address has been
// over its rate for so long that the pause would pass MaxResultPause:
// then the result is refused and its bytes are not charged, so the debt
// stays bounded.
func (s *Server) resultBytes(wc *workerConn, n int) (pause time.Duration, over bool) {
	now := time.Now()
	pause = s.resultRate.owe(wc.clientKey, float64(n), now)
	if pause <= s.cfg.MaxResultPause {
		return pause, false
	}
	s.resultRate.refund(wc.clientKey, float64(n), now)
	return min(pause, s.cfg.MaxResultPause), true
}

// pauseReading waits d before wc's next read, unless the server shuts
// down. The peer's frames wait in the TCP buffers meanwhile.
func (s *Server) pauseReading(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.ctx.Done():
	}
}

// rateLimitedResult is the detail of a result refused for its address's
// byte rate.
func (s *Server) rateLimitedResult(retry time.Duration) string {
	return fmt.Sprintf("this address sends results faster than %d bytes/s (result_bytes_rate) for longer than %v; the lease is queued again; slow down for %d s",
		s.cfg.ResultBytesRate, s.cfg.MaxResultPause, retryAfterSeconds(retry))
}

// heldCounts counts the leases held per member address and volunteer, kept
// as leases come and go (engine.Scheduler.OnHeld), so that a grant need
// not scan every lease.
type heldCounts struct {
	addr, vol map[string]int
	keys      map[uint64][2]string // a lease's address and volunteer, as granted
}

// onHeld is the scheduler's OnHeld: a lease counts for the member it was
// granted to (a relay's or a test's direct lease counts for none).
func (j *Job) onHeld(l *engine.Lease, delta int) {
	h := &j.st.held
	if h.keys == nil {
		h.addr, h.vol, h.keys = map[string]int{}, map[string]int{}, map[uint64][2]string{}
	}
	if delta > 0 {
		m, ok := j.st.members[l.Worker]
		if !ok {
			return
		}
		h.keys[l.ID] = [2]string{m.address, m.volunteer}
		h.addr[m.address]++
		h.vol[m.volunteer]++
		return
	}
	k, ok := h.keys[l.ID]
	if !ok {
		return
	}
	delete(h.keys, l.ID)
	for _, c := range []struct {
		m   map[string]int
		key string
	}{{h.addr, k[0]}, {h.vol, k[1]}} {
		if c.m[c.key]--; c.m[c.key] <= 0 {
			delete(c.m, c.key)
		}
	}
}
