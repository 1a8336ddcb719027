package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// A volunteer is who earns credit and standing: one person or machine,
// however many connections it opens. Its id is derived from what the
// coordinator can check, never from a name the worker chooses:
//
//   - "k-" and a hash of the volunteer key the worker keeps (hello's
//     volunteer_key): the key itself, a secret, is never stored or shown;
//   - "a-" and a hash of the client address, for a worker that sends no
//     key: every keyless connection from one address is one volunteer.
func volunteerID(hello *protocol.Hello, clientKey string) string {
	if hello.VolunteerKey != "" {
		return "k-" + shortHash("key:"+hello.VolunteerKey)
	}
	return "a-" + shortHash("addr:"+clientKey)
}

// shortHash is 16 hex digits of SHA-256: ids that are stable, short, and
// reveal nothing of what they hash.
func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

// member is a connected worker as its job's loop knows it: whose it is
// and where it connects from, for the rules that look past connections
// (spot checks pair different volunteers, lease shares are per address).
type member struct {
	volunteer string
	address   string // the client key of per-address limits
	kind      string // hello's kind: native, browser, gpu
	backend   string // hello's backend, as the worker claims it
}

// ledger hears what each volunteer's results came to. The job's loop
// calls it, so its methods must not block (a store write is queued).
type ledger interface {
	// Credit: a result of examples (flops of compute) was accepted.
	Credit(volunteer, job string, examples int64, flops float64)
	// Refute: an accepted result was later found false; its credit goes.
	Refute(volunteer, job string, examples int64, flops float64)
	// Strike: the volunteer disagreed with a spot check's majority. It
	// returns the volunteer's strikes so far, all jobs together.
	Strike(volunteer, job, detail string) int
	// Ban: the volunteer may send nothing more (its key and addresses).
	Ban(volunteer, reason string)
}

// volunteerBook is the server's ledger: credit and strikes per volunteer.
type volunteerBook struct {
	mu    sync.Mutex
	byID  map[string]*volunteerStanding
	names map[string]string // volunteer → display name (hello's name)
}

// volunteerStanding is one volunteer's credit and strikes.
type volunteerStanding struct {
	Examples  int64
	FLOPs     float64
	Strikes   int
	Banned    bool
	BanReason string
}

func newVolunteerBook() *volunteerBook {
	return &volunteerBook{byID: map[string]*volunteerStanding{}, names: map[string]string{}}
}

func (b *volunteerBook) standing(v string) *volunteerStanding {
	s := b.byID[v]
	if s == nil {
		s = &volunteerStanding{}
		b.byID[v] = s
	}
	return s
}

func (b *volunteerBook) Credit(v, _ string, examples int64, flops float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.standing(v)
	s.Examples += examples
	s.FLOPs += flops
}

func (b *volunteerBook) Refute(v, _ string, examples int64, flops float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.standing(v)
	s.Examples -= examples
	s.FLOPs -= flops
}

func (b *volunteerBook) Strike(v, _, _ string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.standing(v)
	s.Strikes++
	return s.Strikes
}

func (b *volunteerBook) Ban(v, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.standing(v)
	s.Banned, s.BanReason = true, reason
}

// seen records a volunteer's display name from its hello.
func (b *volunteerBook) seen(v, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.standing(v)
	if name != "" {
		b.names[v] = name
	}
}
