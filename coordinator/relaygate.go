package coordinator

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	relaymsg "github.com/crowdtrain/crowdtrain/protocol/relay"
)

// relayGate is the root's side of its relays over NATS (docs/RELAYS.md):
// it answers joins and lease requests, takes aggregates from the
// JetStream stream, announces versions, and keeps the topology the API
// and the admin page show.
type relayGate struct {
	s       *Server
	nc      *nats.Conn // control: joins, leases, releases, status, versions
	bulk    *nats.Conn // the aggregate stream (nc unless RelayGateOptions.Bulk)
	rootURL string
	token   string // relays' HTTP token (relaymsg.HeaderRelayToken)
	o       RelayGateOptions
	cc      jetstream.ConsumeContext
	subs    []*nats.Subscription

	mu     sync.Mutex
	relays map[string]*relayRecord
	parts  map[string]*partialAggregate
	// partsRefused counts every refused message, also of relays past
	// maxRelayRecords.
	partsRefused int64
	// The NATS connection's trouble (nats.go's handlers).
	slowConsumers, disconnects atomic.Int64
}

// relayRecord is what the root knows of one relay.
type relayRecord struct {
	relaymsg.Status
	LastSeen time.Time `json:"last_seen"`
	// Applied, Refused and Duplicates count its aggregates here.
	Applied    int64 `json:"aggregates_applied"`
	Refused    int64 `json:"aggregates_refused"`
	Duplicates int64 `json:"aggregates_duplicate"`
	// BytesIn is the aggregate bytes the root took from it.
	BytesIn int64 `json:"bytes_in"`
	// Forged counts refusals for claims no honest relay makes (a subset
	// of Refused); PartsRefused the messages dropped before they made an
	// aggregate; StrikesRefused the strikes without evidence.
	Forged         int64 `json:"aggregates_forged"`
	PartsRefused   int64 `json:"parts_refused"`
	StrikesRefused int64 `json:"strikes_refused"`
	// Approved: the root vouches for URL, the one the relay registered
	// (or first joined with), and lists it.
	Approved bool `json:"approved"`
	decided  bool // by an operator (external NATS: the root's memory)
	// Quarantined: past the limit of forged aggregates the root takes
	// nothing more from it (aggregates, leases, joins) until an operator
	// lifts it; Reason is the last refusal.
	Quarantined bool   `json:"quarantined"`
	Reason      string `json:"quarantine_reason,omitempty"`
	score       float64
	// inflight is the bytes of its incomplete aggregates the root holds,
	// partials how many there are.
	inflight int64
	partials int
	// lastRound and inRound count the aggregates applied in the newest
	// round it answered; MaxPerRound is the most in any round.
	lastRound   uint64
	inRound     int
	rate        float64   // upstream bytes per second, smoothed
	statusAt    time.Time // the last heartbeat
	MaxPerRound int       `json:"max_aggregates_per_round"`
}

// partialAggregate gathers the parts of an aggregate split to fit the
// payload limit.
type partialAggregate struct {
	relay, job string
	parts      [][]byte
	msgs       []jetstream.Msg
	got, bytes int
	first      time.Time
}

// Limits on what parts may hold: a relay cannot make the root keep
// unbounded partial aggregates.
const (
	maxPartialAggregates = 64
	// maxRelayPartials is the most incomplete aggregates of one relay the
	// root holds: a relay publishes its parts in order, so it has one
	// most of the time, two while a part is delivered again.
	maxRelayPartials = 4
	// relayPartTimeout is how long an aggregate's parts wait for the rest
	// before they are terminated.
	relayPartTimeout = 30 * time.Second
	// relayMinInflight is the least in-flight byte budget of a relay.
	relayMinInflight = 8 << 20
	relayAckWait     = 10 * time.Second
	relayLostAfter   = 15 * time.Second
	maxRelayRecords  = 1024
)

// DefaultRelayQuarantine is how many forged aggregates quarantine a relay
// (RelayGateOptions.QuarantineAfter): each adds one to its score, each
// applied one takes half away, and at this score it is quarantined.
const DefaultRelayQuarantine = 8

// RelayGateOptions configure ServeRelays.
type RelayGateOptions struct {
	// RootURL is the root's public HTTP URL, from which relays fetch
	// snapshots.
	RootURL string
	// QuarantineAfter is the forged-aggregate score that quarantines a
	// relay (0: DefaultRelayQuarantine).
	QuarantineAfter int
	// Bulk, if set, is the connection the aggregates are consumed on, so
	// that joins and lease requests on the other never wait behind them
	// (nor share its fate when the server drops a slow consumer).
	Bulk *nats.Conn
	// StreamMaxBytes bounds the aggregate stream on disk (0:
	// DefaultRelayStreamBytes); each relay may hold a quarter of it, and
	// a relay past its share has its publishes refused.
	StreamMaxBytes int64
	// StreamMaxAge drops aggregates nobody took (0: relayStreamMaxAge).
	StreamMaxAge time.Duration
	// RelayInflightBytes is the bytes of incomplete aggregates the root
	// holds per relay (0: two aggregates of the job, at least 8 MiB).
	RelayInflightBytes int64
	// Approval is RelayApprovalAuto or RelayApprovalManual ("": auto):
	// whether a relay reaches GET /api/v1/relays and the pages' CSP at
	// its first join, or once an operator approved it.
	Approval string
	// Credentials issues and revokes the relays' NATS credentials (the
	// embedded server's, internal/natsbox); nil with an external server,
	// whose operator issues them.
	Credentials RelayCredentials
}

// RelayCredentials is the NATS server's book of relay identities: each
// relay its own credential, whose permissions bind it to its own
// subjects (relaymsg.RelayPublish, RelaySubscribe).
type RelayCredentials interface {
	// IssueRelay makes name a new credential registered with url (its
	// volunteers' websocket URL, "" for none yet) and returns the file's
	// text; an earlier one of name stops working.
	IssueRelay(name, url string) ([]byte, error)
	// RevokeRelay cuts name off at once; false if it had no credential.
	RevokeRelay(name string) (bool, error)
	// RelayRegistered reports whether name holds a credential, its URL
	// ("" until its first join) and whether the operator approved it.
	RelayRegistered(name string) (url string, approved, ok bool)
	// SetRelay records name's URL and approval (kept across restarts);
	// false if name holds no credential.
	SetRelay(name, url string, approved bool) (bool, error)
}

// Relay approval modes (RelayGateOptions.Approval, serve --relay-approval).
const (
	// RelayApprovalAuto lists a relay once it joins with a valid URL.
	RelayApprovalAuto = "auto"
	// RelayApprovalManual lists it once an operator approved it.
	RelayApprovalManual = "manual"
)

// ErrNoRelayCredentials: the relays' NATS server is not this root's.
var ErrNoRelayCredentials = errors.New("this root uses an external NATS server (serve --nats): its operator issues the relays' credentials, one NATS user per relay with the permissions in docs/RELAYS.md")

// IssueRelayCredential issues relay name a NATS credential of its own
// (docs/RELAYS.md), registered with its volunteers' websocket URL.
func (s *Server) IssueRelayCredential(name, url string) ([]byte, error) {
	g := s.gate.Load()
	if g == nil {
		return nil, errors.New("this coordinator serves no relays: start it with --nats-listen")
	}
	if g.o.Credentials == nil {
		return nil, ErrNoRelayCredentials
	}
	if url != "" {
		if err := checkRelayURL(url); err != nil {
			return nil, err
		}
	}
	cred, err := g.o.Credentials.IssueRelay(name, url)
	if err != nil {
		return nil, err
	}
	if url != "" && g.o.Approval != RelayApprovalManual {
		// Auto approval: the operator named the URL it vouches for.
		if _, err := g.o.Credentials.SetRelay(name, url, true); err != nil {
			return nil, err
		}
	}
	g.s.cfg.Logger.Info(fmt.Sprintf("relays: a credential was issued to relay %s (url %q); any earlier one of it is void", name, url), logRelay, name)
	return cred, nil
}

// RevokeRelayCredential cuts relay name off at once: NATS closes its
// connections and refuses its credential, and its leases are requeued.
// It reports whether the relay had a credential, and how many leases it
// held that were queued again.
func (s *Server) RevokeRelayCredential(name string) (requeued int, ok bool, err error) {
	g := s.gate.Load()
	if g == nil {
		return 0, false, errors.New("this coordinator serves no relays: start it with --nats-listen")
	}
	if g.o.Credentials == nil {
		return 0, false, ErrNoRelayCredentials
	}
	ok, err = g.o.Credentials.RevokeRelay(name)
	if err != nil || !ok {
		return 0, ok, err
	}
	g.mu.Lock()
	delete(g.relays, name)
	g.mu.Unlock()
	requeued = g.dropLeases(name, "relay "+name+"'s credential was revoked")
	g.s.cfg.Logger.Info(fmt.Sprintf("relays: relay %s's credential was revoked: it is disconnected and its %d leases are queued again", name, requeued), logRelay, name)
	return requeued, true, nil
}

// checkRelayURL is why url cannot be a relay's volunteers' URL, or nil.
func checkRelayURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("relay URL %q: want ws://HOST[:PORT]/PATH or wss://HOST[:PORT]/PATH, the websocket URL its volunteers connect to", raw)
	}
	return nil
}

// DefaultRelayStreamBytes bounds the aggregate stream (serve
// --relay-stream-bytes).
const DefaultRelayStreamBytes = 1 << 30

// Limits of the aggregate stream and the root's consumer of it.
const (
	relayStreamMaxAge  = time.Hour
	relayStreamMaxMsgs = 1 << 16
	// relayMaxDeliver: a message delivered this often without an ack is
	// given up by the server.
	relayMaxDeliver    = 8
	relayMaxAckPending = 1024
)

// ServeRelays lets relays connect through nc (a NATS connection with
// JetStream and the root's permissions). It returns once the stream, the
// consumer and the subscriptions are in place; Close stops them.
func (s *Server) ServeRelays(ctx context.Context, nc *nats.Conn, o RelayGateOptions) error {
	if o.QuarantineAfter <= 0 {
		o.QuarantineAfter = DefaultRelayQuarantine
	}
	if o.StreamMaxBytes <= 0 {
		o.StreamMaxBytes = DefaultRelayStreamBytes
	}
	if o.StreamMaxAge <= 0 {
		o.StreamMaxAge = relayStreamMaxAge
	}
	bulk := o.Bulk
	if bulk == nil {
		bulk = nc
	}
	g := &relayGate{s: s, nc: nc, bulk: bulk, o: o, rootURL: strings.TrimRight(o.RootURL, "/"), token: NewAdminToken(),
		relays: map[string]*relayRecord{}, parts: map[string]*partialAggregate{}}
	g.watch(nc, "control")
	if bulk != nc {
		g.watch(bulk, "aggregates")
	}
	js, err := jetstream.New(bulk)
	if err != nil {
		return err
	}
	payload := bulk.MaxPayload()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: relaymsg.Stream, Subjects: []string{relaymsg.SubjectAggregates + ".>"},
		Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, Duplicates: 2 * time.Minute,
		MaxBytes: o.StreamMaxBytes, MaxMsgs: relayStreamMaxMsgs, MaxAge: o.StreamMaxAge, MaxMsgSize: int32(payload),
		// Each relay its share: a relay past it has its publishes refused
		// and retries; the others go on.
		MaxMsgsPerSubject: max(64, o.StreamMaxBytes/(4*payload)), Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
	}); err != nil {
		return fmt.Errorf("relays: the aggregates stream: %w", err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, relaymsg.Stream, jetstream.ConsumerConfig{
		Durable: relaymsg.Consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: relayAckWait,
		MaxAckPending: relayMaxAckPending, MaxDeliver: relayMaxDeliver,
	})
	if err != nil {
		return fmt.Errorf("relays: the root's consumer: %w", err)
	}
	for op, h := range map[string]nats.MsgHandler{
		relaymsg.OpJoin: g.onJoin, relaymsg.OpLease: g.onLease, relaymsg.OpStatus: g.onStatus,
		relaymsg.OpRelease: g.onRelease,
	} {
		sub, err := nc.Subscribe(relaymsg.ControlWildcard(op), h)
		if err != nil {
			return err
		}
		g.subs = append(g.subs, sub)
	}
	// The client buffers a few parts, not hundreds: a flood waits in the
	// stream, on disk and bounded, not in the root's memory.
	if g.cc, err = cons.Consume(g.onAggregatePart, jetstream.PullMaxBytes(int(8*payload))); err != nil {
		return fmt.Errorf("relays: consuming aggregates: %w", err)
	}
	if err := bulk.Flush(); err != nil {
		return err
	}
	s.gate.Store(g)
	return nc.Flush()
}

// stop ends the subscriptions (Server.Close), and waits until the NATS
// server has them: a coordinator started next on the same connection's
// server must not share this one's requests.
func (g *relayGate) stop() {
	g.cc.Stop()
	for _, sub := range g.subs {
		sub.Unsubscribe()
	}
	g.nc.FlushTimeout(5 * time.Second)
	if g.bulk != g.nc {
		g.bulk.FlushTimeout(5 * time.Second)
	}
}

// watch logs and counts what goes wrong with a connection of the root's:
// a subscription falling behind (slow consumer), a disconnect.
func (g *relayGate) watch(nc *nats.Conn, what string) {
	var slowLogged atomic.Int64
	nc.SetErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			n := g.slowConsumers.Add(1)
			if last := slowLogged.Load(); time.Now().Unix()-last >= 10 && slowLogged.CompareAndSwap(last, time.Now().Unix()) {
				subj := ""
				if sub != nil {
					subj = sub.Subject
				}
				g.s.cfg.Logger.Warn(fmt.Sprintf("relays: the root's NATS %s connection fell behind on %q and NATS dropped messages (%d times so far)", what, subj, n))
			}
			return
		}
		g.s.cfg.Logger.Warn(fmt.Sprintf("relays: the root's NATS %s connection: %v", what, err))
	})
	nc.SetDisconnectErrHandler(func(_ *nats.Conn, err error) {
		g.disconnects.Add(1)
		g.s.cfg.Logger.Warn(fmt.Sprintf("relays: the root's NATS %s connection was lost (%v); reconnecting", what, err))
	})
	nc.SetReconnectHandler(func(c *nats.Conn) {
		g.s.cfg.Logf("relays: the root's NATS %s connection is back (%s)", what, c.ConnectedUrlRedacted())
	})
}

func (g *relayGate) reply(m *nats.Msg, v any) {
	b, _ := json.Marshal(v)
	if err := m.Respond(b); err != nil {
		g.s.cfg.Logger.Warn(fmt.Sprintf("relays: answering on %s: %v", m.Subject, err))
	}
}

func (g *relayGate) onJoin(m *nats.Msg) {
	var req relaymsg.Join
	if err := json.Unmarshal(m.Data, &req); err != nil {
		g.reply(m, relaymsg.JoinReply{Error: "a join is JSON: {\"relay\": NAME, \"url\": URL}"})
		return
	}
	if why := g.admit(m.Subject, &req.Relay); why != "" {
		g.reply(m, relaymsg.JoinReply{Error: why})
		return
	}
	approved, why := g.vouch(req.Relay, req.URL)
	if why != "" {
		g.s.cfg.Logger.Warn(fmt.Sprintf("relays: relay %s's join REFUSED: %s", req.Relay, why), logRelay, req.Relay)
		g.reply(m, relaymsg.JoinReply{Error: why})
		return
	}
	g.seen(relaymsg.Status{Relay: req.Relay, URL: req.URL}, true)
	g.mu.Lock()
	if r := g.relays[req.Relay]; r != nil {
		if !r.Approved && !approved {
			defer g.s.cfg.Logger.Info(fmt.Sprintf("relays: relay %s at %s joined; it is listed once an operator approves it (POST /api/v1/relays/%s/approve, or the admin page)", req.Relay, req.URL, req.Relay), logRelay, req.Relay)
		}
		r.Approved = approved
	}
	g.mu.Unlock()
	reply := relaymsg.JoinReply{RootURL: g.rootURL, Token: g.token}
	g.s.mu.Lock()
	jobs := slices.Clone(g.s.jobs)
	g.s.mu.Unlock()
	for _, j := range jobs {
		var info relaymsg.JobInfo
		err := j.exec(g.s.ctx, func(st *jobState) {
			if st.state == StateRunning {
				info.Spec, _ = json.Marshal(st.spec)
				info.ID, info.Run, info.State = j.ID, j.run, st.state
			}
		})
		if err == nil && info.ID != "" {
			reply.Jobs = append(reply.Jobs, info)
		}
	}
	g.reply(m, reply)
}

func (g *relayGate) onLease(m *nats.Msg) {
	var req relaymsg.LeaseRequest
	if err := json.Unmarshal(m.Data, &req); err != nil || req.Want < 0 {
		g.reply(m, relaymsg.LeaseReply{Error: "a lease request names the job and want >= 0 (0: only the newest version)"})
		return
	}
	if why := g.admit(m.Subject, &req.Relay); why != "" {
		g.reply(m, relaymsg.LeaseReply{Error: why})
		return
	}
	j := g.s.job(req.Job)
	if j == nil || j.mirror != nil {
		g.reply(m, relaymsg.LeaseReply{Error: fmt.Sprintf("no job %q here", req.Job)})
		return
	}
	var reply relaymsg.LeaseReply
	if err := j.exec(g.s.ctx, func(*jobState) { reply = j.grantRelay(req) }); err != nil {
		reply = relaymsg.LeaseReply{State: StateStopped, Wait: "the job's loop has stopped"}
	}
	g.reply(m, reply)
}

func (g *relayGate) onRelease(m *nats.Msg) {
	var req relaymsg.Release
	if err := json.Unmarshal(m.Data, &req); err != nil || len(req.Leases) > 4*maxRelayBlock {
		g.reply(m, relaymsg.Released{Error: "a release names the job and at most 1024 leases"})
		return
	}
	if why := g.admit(m.Subject, &req.Relay); why != "" {
		g.reply(m, relaymsg.Released{Error: why})
		return
	}
	j := g.s.job(req.Job)
	if j == nil || j.mirror != nil {
		g.reply(m, relaymsg.Released{Error: fmt.Sprintf("no job %q here", req.Job)})
		return
	}
	var n int
	_ = j.exec(g.s.ctx, func(st *jobState) {
		before := st.leasesReleased
		j.releaseLeases(relayWorker(req.Relay), req.Leases, "relay "+req.Relay+" gave them back")
		n = int(st.leasesReleased - before)
	})
	g.reply(m, relaymsg.Released{Released: n})
}

func (g *relayGate) onStatus(m *nats.Msg) {
	var st relaymsg.Status
	if json.Unmarshal(m.Data, &st) == nil && g.identify(m.Subject, &st.Relay) == "" {
		g.seen(st, false)
	}
}

// vouch checks the URL a relay advertises at its join: ws or wss, and the
// one it was registered with (its credential's; else the first it joined
// with, recorded then); it reports whether the relay is approved for
// listing, or why the join is refused.
func (g *relayGate) vouch(relay, url string) (approved bool, why string) {
	if err := checkRelayURL(url); err != nil {
		return false, err.Error()
	}
	auto := g.o.Approval != RelayApprovalManual
	c := g.o.Credentials
	if c == nil { // an external server: the root's memory only
		g.mu.Lock()
		defer g.mu.Unlock()
		r := g.relays[relay]
		switch {
		case r != nil && r.URL != "" && r.URL != url:
			return false, fmt.Sprintf("relay %s advertises %s, but joined with %s before; the operator's relays keep one URL", relay, url, r.URL)
		case r != nil && r.decided: // the operator's word stands
			return r.Approved, ""
		}
		return auto, ""
	}
	registered, approved, ok := c.RelayRegistered(relay)
	switch {
	case !ok:
		return false, fmt.Sprintf("relay %s holds no credential here (revoked?): ask the root's operator for one (crowdtrain relay-credential %s)", relay, relay)
	case registered != "" && registered != url:
		return false, fmt.Sprintf("relay %s advertises %s, but its credential was registered with %s: run it with --public-url %s, or have the operator issue a new credential with --url", relay, url, registered, registered)
	}
	if registered == "" {
		// Its first join pins its URL; auto approves it then (a relay
		// registered with a URL was approved when its credential was
		// issued). An operator's withdrawal stands.
		approved = auto
		if _, err := c.SetRelay(relay, url, approved); err != nil {
			return false, fmt.Sprintf("recording relay %s's URL: %v", relay, err)
		}
	}
	return approved, ""
}

// ApproveRelay lets the root vouch for relay name at the URL it joined
// with (approve false withdraws it): it is listed in GET /api/v1/relays
// and the pages' Content-Security-Policy. It reports whether the relay is
// known.
func (s *Server) ApproveRelay(name string, approve bool) (bool, error) {
	g := s.gate.Load()
	if g == nil {
		return false, nil
	}
	g.mu.Lock()
	r := g.relays[name]
	url := ""
	if r != nil {
		url = r.URL
	}
	g.mu.Unlock()
	if c := g.o.Credentials; c != nil {
		registered, _, ok := c.RelayRegistered(name)
		if !ok {
			return false, nil
		}
		if registered == "" {
			registered = url
		}
		if registered == "" {
			return false, fmt.Errorf("relay %s has not joined yet, and was registered with no URL: approve it once it joined", name)
		}
		if _, err := c.SetRelay(name, registered, approve); err != nil {
			return false, err
		}
	} else if r == nil {
		return false, nil
	}
	g.mu.Lock()
	if r := g.relays[name]; r != nil {
		r.Approved, r.decided = approve, true
	}
	g.mu.Unlock()
	verb := "approved: it is listed"
	if !approve {
		verb = "no longer approved: it is not listed"
	}
	g.s.cfg.Logger.Info(fmt.Sprintf("relays: relay %s %s", name, verb), logRelay, name)
	return true, nil
}

// identify sets *relay to the relay a control subject names: NATS lets a
// relay publish on its own subjects alone, so the subject is its
// identity. A message naming another relay in its body is refused.
func (g *relayGate) identify(subject string, relay *string) string {
	name := relaymsg.RelayOfControl(subject)
	switch {
	case name == "":
		return fmt.Sprintf("%s is no relay's subject", subject)
	case *relay != "" && *relay != name:
		g.s.cfg.Logger.Warn(fmt.Sprintf("relays: relay %s sent a request as relay %q on %s: REFUSED", name, *relay, subject), logRelay, name)
		return fmt.Sprintf("this connection is relay %s's; it cannot speak for relay %q", name, *relay)
	}
	if g.revoked(name) {
		return fmt.Sprintf("relay %s holds no credential here (revoked?): ask the root's operator for one (crowdtrain relay-credential %s)", name, name)
	}
	*relay = name
	return ""
}

// revoked reports whether relay holds no credential where the root
// issues them: its credential was revoked (or never issued). NATS closes
// a revoked relay's connections at once, but what it sent before can
// still be on its way: a heartbeat in the root's queue, an aggregate in
// the stream. Those must neither bring it back to the lists nor reach
// the model.
func (g *relayGate) revoked(relay string) bool {
	c := g.o.Credentials
	if c == nil {
		return false
	}
	_, _, ok := c.RelayRegistered(relay)
	return !ok
}

// seen records a relay's heartbeat, or its join (which says only its
// name and URL).
func (g *relayGate) seen(st relaymsg.Status, join bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.recordOf(st.Relay)
	if r == nil {
		return
	}
	if !join || r.URL != "" {
		st.URL = r.URL // a heartbeat's URL is not believed: the join's was checked
	}
	now := time.Now()
	if join {
		r.URL, r.LastSeen = st.URL, now
		return
	}
	if dt := now.Sub(r.statusAt).Seconds(); !r.statusAt.IsZero() && dt > 0.5 && st.UpstreamBytes >= r.UpstreamBytes {
		rate := float64(st.UpstreamBytes-r.UpstreamBytes) / dt
		r.rate = 0.5*r.rate + 0.5*rate // about the last few heartbeats
	}
	r.Status, r.LastSeen, r.statusAt = st, now, now
}

// recordOf is relay's record, made if there is room (g.mu held). Its
// aggregates may come before its join (a root that restarts takes what
// the stream kept first). A revoked relay's record stays gone: what it
// sent before the revocation (a heartbeat checked just before it, an
// aggregate the job's loop was applying) is handled after it, and must
// not list it again. RevokeRelayCredential revokes before it deletes the
// record, so a record made after the check is deleted after it.
func (g *relayGate) recordOf(relay string) *relayRecord {
	r := g.relays[relay]
	if r == nil && len(g.relays) < maxRelayRecords && !g.revoked(relay) {
		r = &relayRecord{LastSeen: time.Now()}
		g.relays[relay] = r
	}
	return r
}

// admit identifies the relay of a control request (identify) and says
// why it may not be served (identify, quarantined), or "".
func (g *relayGate) admit(subject string, relay *string) string {
	if why := g.identify(subject, relay); why != "" {
		return why
	}
	return g.quarantined(*relay)
}

// quarantined is why relay may not be served, or "".
func (g *relayGate) quarantined(relay string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.relays[relay]; r != nil && r.Quarantined {
		return fmt.Sprintf("relay %s is quarantined: the root refused %d of its aggregates as forged (the last: %s); the root's operator lifts it on the admin page (DELETE /api/v1/relays/%s/quarantine)",
			relay, r.Forged, r.Reason, relay)
	}
	return ""
}

// refusePart counts a message of relay's dropped before it made an
// aggregate, and logs it (every one for the first 16, then every 1000th:
// a flood must not flood the log).
func (g *relayGate) refusePart(relay, subject, why string) {
	g.mu.Lock()
	var n int64
	r := g.recordOf(relay)
	if r != nil {
		r.PartsRefused++
		n = r.PartsRefused
	}
	g.partsRefused++
	if r == nil {
		n = g.partsRefused // no record of its own: the log is throttled on all
	}
	g.mu.Unlock()
	if n <= 16 || n%1000 == 0 {
		g.s.cfg.Logger.Warn(fmt.Sprintf("relays: relay %s: a message on %s REFUSED (%d so far): %s", relay, subject, n, why), logRelay, relay)
	}
}

// record counts an aggregate's verdict for its relay, and quarantines a
// relay whose forged aggregates pass the limit: its leases go back to the
// queue at once.
func (g *relayGate) record(relay, verdict, detail string, bytes, strikesRefused int, round uint64) {
	g.mu.Lock()
	r := g.recordOf(relay)
	if r == nil {
		g.mu.Unlock()
		return
	}
	r.BytesIn += int64(bytes)
	r.StrikesRefused += int64(strikesRefused)
	quarantine := false
	switch verdict {
	case aggApplied:
		r.score = max(0, r.score-0.5)
		r.Applied++
		if round != 0 {
			if round != r.lastRound {
				r.lastRound, r.inRound = round, 0
			}
			r.inRound++
			r.MaxPerRound = max(r.MaxPerRound, r.inRound)
		}
	case aggDuplicate:
		r.Duplicates++
	case aggForged:
		r.Refused++
		r.Forged++
		r.score++
		if !r.Quarantined && r.score >= float64(g.o.QuarantineAfter) {
			r.Quarantined, r.Reason, quarantine = true, detail, true
		}
	default:
		r.Refused++
	}
	g.mu.Unlock()
	if quarantine {
		g.s.cfg.Logger.Error(fmt.Sprintf("relays: relay %s QUARANTINED: %d forged aggregates (the last: %s); its leases go back to the queue, and it gets nothing more until the operator lifts it",
			relay, r.Forged, detail), logRelay, relay)
		go g.dropLeases(relay, "relay "+relay+" was quarantined")
	}
}

// dropLeases requeues every lease relay holds, in every job.
func (g *relayGate) dropLeases(relay, reason string) (requeued int) {
	for _, j := range g.rootJobs() {
		_ = j.exec(g.s.ctx, func(st *jobState) {
			if n := j.releaseWorker(relayWorker(relay)); n > 0 {
				st.leasesReleased += int64(n)
				st.lastRelease = reason
				requeued += n
			}
		})
	}
	return requeued
}

// rootJobs are the jobs this coordinator trains itself: those relays
// lease from (not the mirrors of a relay's own upstream).
func (g *relayGate) rootJobs() []*Job {
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	var out []*Job
	for _, j := range g.s.jobs {
		if j.mirror == nil {
			out = append(out, j)
		}
	}
	return out
}

// leasesHeld counts the leases each relay holds now, across the jobs.
func (g *relayGate) leasesHeld() map[string]int {
	held := map[string]int{}
	for _, j := range g.rootJobs() {
		_ = j.exec(g.s.ctx, func(st *jobState) {
			for _, l := range st.sched.Leases() {
				if relay, ok := strings.CutPrefix(l.Worker, relayWorker("")); ok {
					held[relay]++
				}
			}
		})
	}
	return held
}

// LiftRelayQuarantine lets a quarantined relay back in, with a clean
// score; it reports whether the relay was quarantined.
func (s *Server) LiftRelayQuarantine(relay string) bool {
	g := s.gate.Load()
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.relays[relay]
	if r == nil || !r.Quarantined {
		return false
	}
	r.Quarantined, r.score = false, 0
	g.s.cfg.Logger.Info(fmt.Sprintf("relays: the quarantine of relay %s was lifted", relay), logRelay, relay)
	return true
}

// onAggregatePart takes one message of the stream: a whole aggregate, or
// a part of one. Everything a part claims is bounded before the root
// holds it: its count of parts and the bytes by its job's model size,
// the partial aggregates and their bytes per relay. A part that cannot
// complete is terminated, never left to be delivered again for ever.
func (g *relayGate) onAggregatePart(msg jetstream.Msg) {
	relay := strings.TrimPrefix(msg.Subject(), relaymsg.SubjectAggregates+".")
	if !relaymsg.ValidName(relay) { // an external server's permissions let it through
		g.mu.Lock()
		g.partsRefused++
		g.mu.Unlock()
		msg.Term()
		return
	}
	if why := g.quarantined(relay); why != "" {
		g.refusePart(relay, msg.Subject(), "the relay is quarantined")
		msg.Term()
		return
	}
	if g.revoked(relay) {
		g.refusePart(relay, msg.Subject(), "the relay holds no credential here (revoked?)")
		msg.Term()
		return
	}
	h := msg.Headers()
	id := h.Get(relaymsg.HeaderAggregate)
	i, n, err := relaymsg.ParsePart(h.Get(relaymsg.HeaderPart))
	if id == "" || err != nil {
		g.refusePart(relay, msg.Subject(), fmt.Sprintf("no valid aggregate id and part (%v)", err))
		msg.Term()
		return
	}
	size := len(msg.Data())
	if n == 1 {
		g.apply(relay, msg.Subject(), h.Get(relaymsg.HeaderJob), msg.Data(), []jetstream.Msg{msg})
		return
	}
	jobID := h.Get(relaymsg.HeaderJob)
	j := g.s.job(jobID)
	if j == nil || j.mirror != nil {
		g.refusePart(relay, msg.Subject(), fmt.Sprintf("aggregate %s: a part of %d names job %q, which is not here", id, n, jobID))
		msg.Term()
		return
	}
	partSize := int(g.bulk.MaxPayload()) - 4096
	if limit := relaymsg.MaxPartsFor(j.model.NumParams, partSize); n > limit || size > partSize || i < n-1 && size != partSize {
		g.refusePart(relay, msg.Subject(), fmt.Sprintf("aggregate %s: part %d/%d of %d bytes; an aggregate of job %s (%d parameters) is at most %d parts of %d bytes, each but the last full",
			id, i, n, size, jobID, j.model.NumParams, limit, partSize))
		msg.Term()
		return
	}
	now := time.Now()
	g.mu.Lock()
	stale := g.evictStale(now)
	key := relay + "\x00" + id
	p := g.parts[key]
	var refuse, busy string
	switch {
	case p != nil && (len(p.parts) != n || p.job != jobID):
		refuse = fmt.Sprintf("aggregate %s: part %d says %d parts of job %s, an earlier said %d of job %s", id, i, n, jobID, len(p.parts), p.job)
	case p == nil && len(g.parts) >= maxPartialAggregates:
		busy = "the root holds too many incomplete aggregates"
	case p == nil:
		r := g.recordOf(relay)
		if r == nil {
			refuse = "too many relays"
			break
		}
		if r.partials >= maxRelayPartials {
			refuse = fmt.Sprintf("aggregate %s: relay %s has %d incomplete aggregates at the root already, at most %d", id, relay, r.partials, maxRelayPartials)
			break
		}
		r.partials++
		p = &partialAggregate{relay: relay, job: jobID, parts: make([][]byte, n), msgs: make([]jetstream.Msg, n), first: now}
		g.parts[key] = p
	}
	if refuse == "" && busy == "" {
		if r := g.relays[relay]; p.parts[i] == nil && r.inflight+int64(size) > g.inflightBudget(j) {
			refuse = fmt.Sprintf("aggregate %s: relay %s holds %d bytes of incomplete aggregates at the root, its budget is %d", id, relay, r.inflight, g.inflightBudget(j))
		} else if p.parts[i] == nil {
			p.got++
			r.inflight += int64(size)
			p.bytes += size
		}
		if refuse == "" { // a part delivered again stands for the first delivery
			p.parts[i], p.msgs[i] = msg.Data(), msg
		}
	}
	done := p != nil && refuse == "" && busy == "" && p.got == n
	if done {
		g.dropPartial(key, p)
	}
	g.mu.Unlock()
	for _, sp := range stale {
		g.refusePart(sp.relay, relaymsg.AggregateSubject(sp.relay), fmt.Sprintf("an aggregate of %d parts got %d within %v: its parts are dropped", len(sp.parts), sp.got, relayPartTimeout))
		sp.term()
	}
	switch {
	case busy != "":
		msg.NakWithDelay(time.Second)
	case refuse != "":
		g.refusePart(relay, msg.Subject(), refuse)
		msg.Term()
	case done:
		g.apply(relay, msg.Subject(), jobID, bytes.Join(p.parts, nil), p.msgs)
	}
}

// evictStale takes out the partial aggregates older than relayPartTimeout
// (g.mu held); the caller terminates their parts.
func (g *relayGate) evictStale(now time.Time) []*partialAggregate {
	var out []*partialAggregate
	for k, p := range g.parts {
		if now.Sub(p.first) > relayPartTimeout {
			g.dropPartial(k, p)
			out = append(out, p)
		}
	}
	return out
}

// dropPartial forgets a partial aggregate and frees its relay's budget
// (g.mu held).
func (g *relayGate) dropPartial(key string, p *partialAggregate) {
	delete(g.parts, key)
	if r := g.relays[p.relay]; r != nil {
		r.partials--
		r.inflight -= int64(p.bytes)
	}
}

func (p *partialAggregate) term() {
	for _, m := range p.msgs {
		if m != nil {
			m.Term()
		}
	}
}

// inflightBudget is the bytes of incomplete aggregates the root holds for
// one relay: two of j's aggregates, and at least relayMinInflight.
func (g *relayGate) inflightBudget(j *Job) int64 {
	if g.o.RelayInflightBytes > 0 {
		return g.o.RelayInflightBytes
	}
	return max(relayMinInflight, 2*int64(relaymsg.MaxBytes(j.model.NumParams)))
}

// apply decodes an aggregate of relay (its subject's) and hands it to its
// job; jobHeader is the job its parts named, if any.
func (g *relayGate) apply(relay, subject, jobHeader string, body []byte, msgs []jetstream.Msg) {
	term := func() {
		for _, m := range msgs {
			m.Term()
		}
	}
	a, err := relaymsg.Decode(body)
	if err != nil {
		g.s.cfg.Logger.Warn(fmt.Sprintf("relays: aggregate of relay %s on %s REFUSED: %v", relay, subject, err), logRelay, relay)
		g.record(relay, aggForged, err.Error(), len(body), 0, 0)
		term()
		return
	}
	if a.Relay != relay || jobHeader != "" && jobHeader != a.Job {
		d := fmt.Sprintf("aggregate %s names relay %q and job %q but came on %s with parts of job %q", a.ID, a.Relay, a.Job, subject, jobHeader)
		g.s.cfg.Logger.Warn(fmt.Sprintf("relays: aggregate of relay %s REFUSED: %s", relay, d), logRelay, relay)
		g.record(relay, aggForged, d, len(body), 0, a.Round)
		term()
		return
	}
	j := g.s.job(a.Job)
	if j == nil || j.mirror != nil {
		g.s.cfg.Logger.Warn(fmt.Sprintf("relays: aggregate %s of relay %s names job %q, which is not here: REFUSED", a.ID, a.Relay, a.Job), logRelay, a.Relay)
		g.record(a.Relay, aggRefused, "no such job", len(body), 0, a.Round)
		term()
		return
	}
	ack := func() {
		for _, m := range msgs {
			m.Ack()
		}
	}
	var verdict, detail string
	var dropped int64
	if err := j.exec(g.s.ctx, func(st *jobState) {
		before := st.relay.strikesDropped
		verdict, detail = j.applyAggregate(a, ack)
		dropped = st.relay.strikesDropped - before
	}); err != nil {
		return // shutting down: the stream delivers it again to the next run
	}
	g.record(a.Relay, verdict, detail, len(body), int(dropped), a.Round)
	if dropped > 0 {
		g.s.cfg.Logger.Warn(fmt.Sprintf("relays: aggregate %s of relay %s for job %s: %s", a.ID, a.Relay, a.Job, detail), logRelay, a.Relay, logJob, a.Job)
	}
	if verdict == aggRefused || verdict == aggForged {
		g.s.cfg.Logger.Warn(fmt.Sprintf("relays: aggregate %s of relay %s for job %s REFUSED: %s", a.ID, a.Relay, a.Job, detail), logRelay, a.Relay, logJob, a.Job)
		term()
		return
	}
	if verdict == aggDuplicate || j.verbose {
		g.s.cfg.Logger.Debug(fmt.Sprintf("relays: aggregate %s of relay %s for job %s %s: %s", a.ID, a.Relay, a.Job, verdict, detail), logRelay, a.Relay, logJob, a.Job, "verdict", verdict)
	}
}

// fromRelay reports whether r carries the relays' token.
func (s *Server) fromRelay(r *http.Request) bool {
	g := s.gate.Load()
	t := r.Header.Get(relaymsg.HeaderRelayToken)
	return g != nil && t != "" && subtle.ConstantTimeCompare([]byte(t), []byte(g.token)) == 1
}

// announce tells the relays that job moved to version (on the job's loop:
// the publish only buffers).
func (g *relayGate) announce(job string, version int64) {
	b, _ := json.Marshal(struct {
		Version int64 `json:"version"`
	}{version})
	if err := g.nc.Publish(relaymsg.VersionSubject(job), b); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		g.s.cfg.Logger.Error(fmt.Sprintf("relays: announcing version %d of job %s: %v", version, job, err), logJob, job)
	}
}

// RelayView is one relay as GET /api/v1/relays shows it.
type RelayView struct {
	Name    string `json:"name"`
	URL     string `json:"url"`
	Workers int    `json:"workers"`
	// UpstreamBytes and Aggregates count what it published; the rest
	// what the root made of it.
	UpstreamBytes       int64   `json:"upstream_bytes"`
	UpstreamBytesPerSec float64 `json:"upstream_bytes_per_sec"`
	AggregatesPublished int64   `json:"aggregates_published"`
	AggregatesApplied   int64   `json:"aggregates_applied"`
	AggregatesRefused   int64   `json:"aggregates_refused"`
	AggregatesDuplicate int64   `json:"aggregates_duplicate"`
	// MaxAggregatesPerRound is the most aggregates of it applied in one
	// round (round modes; a relay sends one per round).
	MaxAggregatesPerRound int       `json:"max_aggregates_per_round"`
	LastSeen              time.Time `json:"last_seen"`
}

// RelayAdminView is one relay as the operator sees it
// (GET /api/v1/relays/all): also those quarantined or gone quiet, and
// what the root refused of it.
type RelayAdminView struct {
	RelayView
	Approved bool `json:"approved"`
	// LeasesHeld counts the root's leases the relay holds now, across
	// the jobs: what a revocation would queue again.
	LeasesHeld       int    `json:"leases_held"`
	AggregatesForged int64  `json:"aggregates_forged"`
	PartsRefused     int64  `json:"parts_refused"`
	StrikesRefused   int64  `json:"strikes_refused"`
	Quarantined      bool   `json:"quarantined"`
	QuarantineReason string `json:"quarantine_reason,omitempty"`
}

func (r *relayRecord) view(name string) RelayView {
	return RelayView{Name: name, URL: r.URL, Workers: r.Workers, UpstreamBytes: r.UpstreamBytes, UpstreamBytesPerSec: r.rate,
		AggregatesPublished: r.Aggregates, AggregatesApplied: r.Applied, AggregatesRefused: r.Refused,
		AggregatesDuplicate: r.Duplicates, MaxAggregatesPerRound: r.MaxPerRound, LastSeen: r.LastSeen}
}

// RelaysAdmin lists every relay the root keeps a record of, by name.
func (s *Server) RelaysAdmin() []RelayAdminView {
	g := s.gate.Load()
	out := []RelayAdminView{}
	if g == nil {
		return out
	}
	held := g.leasesHeld() // before g.mu: a job's loop may wait on it
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, r := range g.relays {
		out = append(out, RelayAdminView{RelayView: r.view(name), Approved: r.Approved, LeasesHeld: held[name], AggregatesForged: r.Forged, PartsRefused: r.PartsRefused,
			StrikesRefused: r.StrikesRefused, Quarantined: r.Quarantined, QuarantineReason: r.Reason})
	}
	slices.SortFunc(out, func(a, b RelayAdminView) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Relays lists the relays heard from lately, by name.
func (s *Server) Relays() []RelayView {
	g := s.gate.Load()
	if g == nil {
		return []RelayView{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := []RelayView{}
	for name, r := range g.relays {
		if time.Since(r.LastSeen) > relayLostAfter || r.Quarantined || !r.Approved || r.URL == "" {
			continue
		}
		out = append(out, r.view(name))
	}
	slices.SortFunc(out, func(a, b RelayView) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// handleRelays is GET /api/v1/relays: public, since workers pick a relay
// from it.
func (s *Server) handleRelays(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(map[string]any{"relays": s.Relays()})
}

// RelayOrigins are the http(s) origins of the relays heard from lately:
// the pages' Content-Security-Policy lets tabs fetch their data there
// (web.Handler.AllowConnect).
func (s *Server) RelayOrigins() []string {
	var out []string
	for _, r := range s.Relays() {
		u, err := url.Parse(r.URL)
		if err != nil || u.Host == "" {
			continue
		}
		switch u.Scheme {
		case "ws":
			out = append(out, "http://"+u.Host)
		case "wss":
			out = append(out, "https://"+u.Host)
		}
	}
	return out
}
