package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// A volunteer is who earns credit and standing: one person or machine,
// however many connections it opens. Its id is derived from what the
// coordinator can check, never from a name the worker chooses:
//
//   - "t-" and the id of the join token it presented (join.go): a named
//     volunteer the operator issued a token to;
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
	snapCodec string // the snapshot codec of its URLs (deltas.go)
	rebase    bool   // it takes a newer snapshot in place of an evicted one (rebase.go)
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

// banChecker is a ledger that knows bans: apply refuses the results of a
// banned volunteer, or of a banned address, with it (the server's book).
type banChecker interface {
	banned(volunteer, address string) bool
}

// bannedSubmission reports whether sub comes from a banned volunteer or
// address; it runs on the loop.
func (j *Job) bannedSubmission(sub submission) bool {
	b, ok := j.ledger.(banChecker)
	return ok && b.banned(sub.volunteer, j.st.members[sub.worker].address)
}

// maxVolunteerAddresses bounds the addresses kept per volunteer: the most
// recently seen. A ban covers them all.
const maxVolunteerAddresses = 8

// maxBanReason bounds a ban's reason, which goes into refusals and logs.
const maxBanReason = 200

// volunteerBook is the server's ledger: credit, strikes and bans per
// volunteer, the address bans, and the join tokens (join.go). It lives in
// memory; with a store it is loaded at start and written behind by a
// goroutine of its own (ledgerstore.go), so the job loops never wait on
// the disk.
type volunteerBook struct {
	mu       sync.Mutex
	byID     map[string]*volunteerStanding
	addrBans map[string]store.AddressBan // by address
	tokens   map[string]*joinToken       // by token id
	// onBan, when set, ends the banned volunteer's connections. It runs
	// on a goroutine of its own: Ban is called on job loops.
	onBan func(volunteer, reason string)
	now   func() time.Time

	w *ledgerWriter // nil without a store
	// pending is the credit each job's results earned since the job's
	// last checkpoint, by job and volunteer (only with a store): it
	// becomes durable with the checkpoint that holds those results
	// (takeCredit), never before. The standings above show it at once.
	pending map[string]map[string]*store.VolunteerCredit
}

// volunteerStanding is one volunteer's credit, strikes and ban.
type volunteerStanding struct {
	Name, TokenID   string
	Examples        int64
	FLOPs           float64
	RefutedExamples int64
	RefutedFLOPs    float64
	Strikes         int
	Banned          bool
	BanReason       string
	FirstSeen       time.Time
	LastSeen        time.Time
	// Addresses it was seen from, most recent last.
	Addresses []store.VolunteerAddress
}

func newVolunteerBook() *volunteerBook {
	return &volunteerBook{
		byID: map[string]*volunteerStanding{}, addrBans: map[string]store.AddressBan{},
		tokens: map[string]*joinToken{}, now: time.Now,
	}
}

// standing returns v's standing, made if new; mu is held.
func (b *volunteerBook) standing(v string) *volunteerStanding {
	s := b.byID[v]
	if s == nil {
		now := b.now()
		s = &volunteerStanding{FirstSeen: now, LastSeen: now}
		b.byID[v] = s
	}
	return s
}

func (b *volunteerBook) Credit(v, job string, examples int64, flops float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.standing(v)
	s.Examples += examples
	s.FLOPs += flops
	if c := b.pendingFor(job, v); c != nil {
		c.Examples += examples
		c.FLOPs += flops
	}
	b.dirty(v)
}

func (b *volunteerBook) Refute(v, job string, examples int64, flops float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.standing(v)
	s.Examples -= examples
	s.FLOPs -= flops
	s.RefutedExamples += examples
	s.RefutedFLOPs += flops
	if c := b.pendingFor(job, v); c != nil {
		c.Examples -= examples
		c.FLOPs -= flops
		c.RefutedExamples += examples
		c.RefutedFLOPs += flops
	}
	b.dirty(v)
}

// pendingFor is v's credit in job not yet checkpointed, made if new; nil
// without a store. mu is held.
func (b *volunteerBook) pendingFor(job, v string) *store.VolunteerCredit {
	if b.w == nil || v == "" {
		return nil
	}
	if b.pending == nil {
		b.pending = map[string]map[string]*store.VolunteerCredit{}
	}
	byVol := b.pending[job]
	if byVol == nil {
		byVol = map[string]*store.VolunteerCredit{}
		b.pending[job] = byVol
	}
	c := byVol[v]
	if c == nil {
		c = &store.VolunteerCredit{Volunteer: v}
		byVol[v] = c
	}
	return c
}

// takeCredit hands over job's credit not yet checkpointed, by volunteer
// id, and forgets it: the job's loop calls it as it copies the state the
// credit was earned for, and the checkpoint writes both in one
// transaction (persist.go).
func (b *volunteerBook) takeCredit(job string) []store.VolunteerCredit {
	b.mu.Lock()
	defer b.mu.Unlock()
	byVol := b.pending[job]
	delete(b.pending, job)
	out := make([]store.VolunteerCredit, 0, len(byVol))
	for _, v := range slices.Sorted(maps.Keys(byVol)) {
		out = append(out, *byVol[v])
	}
	return out
}

// creditPending reports whether job has credit not yet checkpointed.
func (b *volunteerBook) creditPending(job string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending[job]) > 0
}

// mergeCredits adds newer's credit to older's, by volunteer: the credit
// of a checkpoint that was superseded before it was written goes with the
// one that replaces it.
func mergeCredits(older, newer []store.VolunteerCredit) []store.VolunteerCredit {
	if len(older) == 0 {
		return newer
	}
	byVol := make(map[string]*store.VolunteerCredit, len(older)+len(newer))
	for _, list := range [][]store.VolunteerCredit{older, newer} {
		for _, c := range list {
			m := byVol[c.Volunteer]
			if m == nil {
				byVol[c.Volunteer] = &store.VolunteerCredit{Volunteer: c.Volunteer}
				m = byVol[c.Volunteer]
			}
			m.Examples += c.Examples
			m.FLOPs += c.FLOPs
			m.RefutedExamples += c.RefutedExamples
			m.RefutedFLOPs += c.RefutedFLOPs
		}
	}
	out := make([]store.VolunteerCredit, 0, len(byVol))
	for _, v := range slices.Sorted(maps.Keys(byVol)) {
		out = append(out, *byVol[v])
	}
	return out
}

func (b *volunteerBook) Strike(v, _, _ string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.standing(v)
	s.Strikes++
	b.dirty(v)
	return s.Strikes
}

// Ban bars v from now on: its results in flight are refused, its
// connections closed (onBan), its later hellos refused, and so are those
// of every address it was seen from. A second ban keeps the first reason.
func (b *volunteerBook) Ban(v, reason string) {
	reason = cleanReason(reason)
	b.mu.Lock()
	s := b.standing(v)
	if !s.Banned {
		s.Banned, s.BanReason = true, reason
		now := b.now()
		for _, a := range s.Addresses {
			ban := store.AddressBan{Address: a.Address, Volunteer: v, Reason: reason, BannedAt: now}
			b.addrBans[a.Address] = ban
			b.queueBan(ban)
		}
		b.dirty(v)
	}
	onBan := b.onBan
	b.mu.Unlock()
	if onBan != nil {
		go onBan(v, reason)
	}
}

// Pardon lifts v's ban and the bans of its addresses, and clears its
// strikes: a fresh start. It reports false for an unknown volunteer.
func (b *volunteerBook) Pardon(v string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.byID[v]
	if s == nil {
		return false
	}
	s.Banned, s.BanReason, s.Strikes = false, "", 0
	for addr, ban := range b.addrBans {
		if ban.Volunteer == v {
			delete(b.addrBans, addr)
		}
	}
	b.queueLift(v)
	b.dirty(v)
	return true
}

// known reports whether the book has a volunteer v.
func (b *volunteerBook) known(v string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byID[v] != nil
}

// banned reports whether v, or the address addr, is banned (banChecker).
func (b *volunteerBook) banned(v, addr string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.byID[v]; s != nil && s.Banned {
		return true
	}
	_, ok := b.addrBans[addr]
	return ok
}

// refusal says why a hello from volunteer v at address addr is refused
// for a ban, or "" if it is not.
func (b *volunteerBook) refusal(v, addr string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.byID[v]; s != nil && s.Banned {
		return "this volunteer is banned from this coordinator (" + s.BanReason + "); ask its operator if you think this is a mistake"
	}
	if ban, ok := b.addrBans[addr]; ok {
		return "connections from this address are banned from this coordinator (" + ban.Reason + "); ask its operator if you think this is a mistake"
	}
	return ""
}

// seen records a volunteer's hello: its display name (kept when the
// hello has none), its token, and the address it came from.
func (b *volunteerBook) seen(v, name, tokenID, addr string) {
	if protocol.CheckVolunteerName(name) != nil {
		name = "" // Hello.Validate has refused it already; never store one
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.standing(v)
	now := b.now()
	s.LastSeen = now
	if name != "" {
		s.Name = name
	}
	if tokenID != "" {
		s.TokenID = tokenID
	}
	s.Addresses = slices.DeleteFunc(s.Addresses, func(a store.VolunteerAddress) bool { return a.Address == addr })
	s.Addresses = append(s.Addresses, store.VolunteerAddress{Address: addr, LastSeen: now})
	if n := len(s.Addresses) - maxVolunteerAddresses; n > 0 {
		s.Addresses = slices.Delete(s.Addresses, 0, n)
	}
	b.dirty(v)
}

// cleanReason bounds a ban reason (a spot check's, say) and turns what
// could forge a log line or garble a refusal into spaces: control and
// format characters, and invalid UTF-8.
func cleanReason(r string) string {
	out := make([]rune, 0, len(r))
	n := 0
	for _, c := range r {
		if c == utf8.RuneError || unicode.IsControl(c) || unicode.Is(unicode.Cf, c) {
			c = ' '
		}
		if n += utf8.RuneLen(c); n > maxBanReason {
			break
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return "no reason given"
	}
	return string(out)
}
