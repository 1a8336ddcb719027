package attack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/crowdtrain/crowdtrain/rljob"
	"github.com/crowdtrain/crowdtrain/worker"
)

// Config is one attack run.
type Config struct {
	// Coordinator is the websocket URL, e.g. ws://127.0.0.1:8080/ws.
	Coordinator string
	Kind        Kind
	// N is how many hostile volunteers run at once, each on its own
	// connection (0: DefaultN).
	N int
	// Scale is the kind's S (see the package doc); 0 means its default.
	Scale float64
	// Fraction is the share of results that lie (0 < F <= 1; 0 means 1):
	// each result is forged with this chance and computed honestly
	// otherwise, as a forger that hopes to pass spot checks would.
	Fraction float64
	// Bind is the local IP address to connect from ("" lets the system
	// choose), so that tests can give attackers their own loopback
	// addresses (127.0.0.N).
	Bind string
	// Binds, when set, gives attacker i the address Binds[i % len(Binds)]
	// instead of Bind: one loopback address per attacker, so that the
	// coordinator sees each as its own volunteer.
	Binds []string
	// Keys, when > 0, gives the attackers that many volunteer keys of
	// their own (attacker i presents key i % Keys), so that the
	// coordinator counts them as separate volunteers even on one address.
	Keys int
	// JoinToken is the join token every attacker presents, for a
	// coordinator run with --join token (issued on its admin page).
	JoinToken string
	// JobID, when set, is the job the attack expects the coordinator to
	// assign; a welcome for another job is an error.
	JobID string
	// Codec is how forge-rollout reads an RL job's prompts and writes its
	// answers: the policy's tokenizer (rljob.Tokenized); nil is bytes, a
	// byte-level policy's.
	Codec *rljob.Codec
	// NewBackend makes the backend an attacker computes its honest
	// updates with, one per attacker. Required for kinds that compute.
	NewBackend func() (worker.Backend, error)
	// Client names the software in hello.
	Client string
	// Logf receives connection events; nil discards them.
	Logf func(format string, args ...any)
}

// Count is what one variant of result sent got.
type Count struct {
	Sent     int
	Accepted int
	Clipped  int // accepted, applied clipped (ack reason clipped)
	Rejected int
	Reasons  map[string]int // rejection reason → count
}

// Report is what an attack sent and what the coordinator did with it.
type Report struct {
	Kind        Kind
	Attackers   int
	Connections int               // successful hellos, reconnects included
	WorkerIDs   []string          // distinct worker ids the coordinator gave
	Leases      int               // leases granted
	PeakHeld    int               // leases held at once, all attackers together
	Variants    map[string]*Count // by what was sent (e.g. "forged", "honest", "replay-same-lease")
	Details     []string          // the first distinct rejection details (at most 5)
	Errors      []string          // the first session errors (at most 5)
	Released    int               // leases given back (a snapshot gone before it was fetched, ...)
	Scale       float64           // the S used
	GateRatio   float64           // the job's max_update_norm_ratio, as read (scale)

	mu   sync.Mutex
	held int
}

// Totals sums the variants.
func (r *Report) Totals() Count {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := Count{Reasons: map[string]int{}}
	for _, c := range r.Variants {
		t.Sent += c.Sent
		t.Accepted += c.Accepted
		t.Clipped += c.Clipped
		t.Rejected += c.Rejected
		for k, v := range c.Reasons {
			t.Reasons[k] += v
		}
	}
	return t
}

func (r *Report) variant(v string) *Count {
	c := r.Variants[v]
	if c == nil {
		c = &Count{Reasons: map[string]int{}}
		r.Variants[v] = c
	}
	return c
}

func (r *Report) sent(v string) {
	r.mu.Lock()
	r.variant(v).Sent++
	r.mu.Unlock()
}

func (r *Report) acked(v string, accepted bool, reason, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.variant(v)
	if accepted {
		c.Accepted++
		if reason == "clipped" {
			c.Clipped++
		}
		return
	}
	c.Rejected++
	c.Reasons[reason]++
	if len(r.Details) < 5 && !slices.Contains(r.Details, reason+": "+detail) {
		r.Details = append(r.Details, reason+": "+detail)
	}
}

func (r *Report) released(err error) {
	r.mu.Lock()
	r.Released++
	if len(r.Errors) < 5 {
		r.Errors = append(r.Errors, "released "+err.Error())
	}
	r.mu.Unlock()
}

func (r *Report) leaseGranted() {
	r.mu.Lock()
	r.Leases++
	r.held++
	r.PeakHeld = max(r.PeakHeld, r.held)
	r.mu.Unlock()
}

func (r *Report) leaseDone(n int) {
	r.mu.Lock()
	r.held -= n
	r.mu.Unlock()
}

func (r *Report) connected(id string) {
	r.mu.Lock()
	r.Connections++
	if !slices.Contains(r.WorkerIDs, id) {
		r.WorkerIDs = append(r.WorkerIDs, id)
	}
	r.mu.Unlock()
}

func (r *Report) failed(err error) {
	r.mu.Lock()
	if len(r.Errors) < 5 {
		r.Errors = append(r.Errors, err.Error())
	}
	r.mu.Unlock()
}

// Print writes the report: per variant what was sent and accepted, the
// reasons of the rejections, and their first details.
func (r *Report) Print(w io.Writer) {
	t := r.Totals()
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, "attack %s: %d attackers, %d connections (%d worker ids), %d leases granted, at most %d held at once, %d given back\n",
		r.Kind, r.Attackers, r.Connections, len(r.WorkerIDs), r.Leases, r.PeakHeld, r.Released)
	if r.Scale != 0 {
		fmt.Fprintf(w, "  scale %g", r.Scale)
		if r.GateRatio != 0 {
			fmt.Fprintf(w, " (the job's max_update_norm_ratio is %g)", r.GateRatio)
		}
		fmt.Fprintln(w)
	}
	names := slices.Sorted(maps.Keys(r.Variants))
	for _, n := range names {
		c := r.Variants[n]
		fmt.Fprintf(w, "  %-18s sent %d, accepted %d, rejected %d%s%s\n", n, c.Sent, c.Accepted, c.Rejected, reasons(c.Reasons), clippedNote(c.Clipped))
	}
	fmt.Fprintf(w, "  %-18s sent %d, accepted %d, rejected %d%s%s\n", "total", t.Sent, t.Accepted, t.Rejected, reasons(t.Reasons), clippedNote(t.Clipped))
	for _, d := range r.Details {
		fmt.Fprintf(w, "  rejected: %q\n", d)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "  error: %q\n", e)
	}
}

// clippedNote says how many accepted results were applied clipped.
func clippedNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d of the accepted applied clipped", n)
}

func reasons(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// Check validates cfg and fills its defaults.
func (cfg *Config) Check() error {
	u, err := url.Parse(cfg.Coordinator)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return fmt.Errorf("coordinator URL %q must look like ws://HOST:PORT/ws (or wss://)", cfg.Coordinator)
	}
	if _, err := ParseKind(string(cfg.Kind)); err != nil {
		return err
	}
	if cfg.N < 0 || cfg.N > 10000 {
		return fmt.Errorf("n must be in 1..10000 (0 for the kind's default), got %d", cfg.N)
	}
	if cfg.N == 0 {
		cfg.N = DefaultN(cfg.Kind)
	}
	if cfg.Scale < 0 || cfg.Scale != cfg.Scale || cfg.Scale > 1e30 {
		return fmt.Errorf("scale must be a finite number in [0, 1e30] (0 for the kind's default), got %v", cfg.Scale)
	}
	if cfg.Scale == 0 {
		cfg.Scale = DefaultScale(cfg.Kind)
	}
	if !(cfg.Fraction >= 0 && cfg.Fraction <= 1) {
		return fmt.Errorf("fraction must be in (0, 1] (the share of results that lie; 0 for 1), got %v", cfg.Fraction)
	}
	if cfg.Fraction == 0 {
		cfg.Fraction = 1
	}
	if cfg.Fraction < 1 && (cfg.Kind == Hostage || cfg.Kind == Replay) {
		return fmt.Errorf("fraction applies to kinds that send forged results; %s has its own pattern (give fraction 1)", cfg.Kind)
	}
	for _, b := range append([]string{cfg.Bind}, cfg.Binds...) {
		if b != "" && net.ParseIP(b) == nil {
			return fmt.Errorf("bind %q is not an IP address", b)
		}
	}
	if cfg.Keys < 0 || cfg.Keys > cfg.N {
		return fmt.Errorf("keys must be in 0..n (%d), got %d", cfg.N, cfg.Keys)
	}
	if cfg.computes() && cfg.NewBackend == nil {
		return errors.New("attack: Config.NewBackend is required for kind " + string(cfg.Kind))
	}
	if cfg.Client == "" {
		cfg.Client = "crowdtrain-attack"
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return nil
}

// ErrRefused means retrying cannot help: the coordinator assigned another
// job than Config.JobID, or refused the hello.
var ErrRefused = errors.New("attack refused")

// Run runs cfg.N attackers until ctx ends and returns what they did.
// Sessions that fail are retried after a pause and their errors are in the
// report; an error wrapping ErrRefused stops the run, and Run returns it
// with the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var fatalOnce sync.Once
	var fatal error
	r := &Report{Kind: cfg.Kind, Attackers: cfg.N, Variants: map[string]*Count{}}
	if cfg.Kind != Scale {
		r.Scale = cfg.Scale
	}
	shared := &shared{cfg: cfg, report: r, pool: newPool(), keys: newKeys(cfg.Keys)}
	var wg sync.WaitGroup
	for i := range cfg.N {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &attacker{id: i, sh: shared}
			for ctx.Err() == nil {
				if err := a.session(ctx); err != nil && ctx.Err() == nil {
					r.failed(err)
					if errors.Is(err, ErrRefused) {
						fatalOnce.Do(func() { fatal = err; cancel() })
						return
					}
					cfg.Logf("attacker %d: %v; reconnecting in 1s", i, err)
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
			}
		}()
	}
	wg.Wait()
	return r, fatal
}

// shared is what the attackers of one run share.
type shared struct {
	cfg    Config
	report *Report
	pool   *pool
	keys   []string // the volunteer keys the attackers present (Config.Keys)

	mu        sync.Mutex
	gateRatio float64
	gateRead  bool
}
