package relay

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Subjects. Each relay has subjects of its own, named after it, and its
// NATS credential permits it those alone (internal/natsbox): the root
// takes a request's relay from its subject, never from its body.
//
//	crowdtrain.relay.NAME.join     request: Join → JoinReply
//	crowdtrain.relay.NAME.lease    request: LeaseRequest → LeaseReply
//	crowdtrain.relay.NAME.release  request: Release → Released
//	crowdtrain.relay.NAME.status   publish: Status, every few seconds
//	crowdtrain.up.agg.NAME         the stream's aggregates
//	_INBOX.NAME.>                  the relay's replies (its inbox prefix)
//
// Every relay may listen under "crowdtrain.down.".
const (
	// SubjectRelays prefixes the relays' control subjects.
	SubjectRelays = "crowdtrain.relay"
	// The last token of a control subject.
	OpJoin, OpLease, OpRelease, OpStatus = "join", "lease", "release", "status"
	// SubjectAggregates prefixes the stream's subjects: one per relay
	// (SubjectAggregates + "." + relay name).
	SubjectAggregates = "crowdtrain.up.agg"
	// SubjectVersions prefixes the version announcements, one subject per
	// job (VersionSubject).
	SubjectVersions = "crowdtrain.down.version"

	// Stream is the JetStream stream holding aggregates until the root
	// acknowledges them; Consumer is the root's durable consumer of it.
	Stream   = "CROWDTRAIN_AGGREGATES"
	Consumer = "crowdtrain-root"

	// RootUser is the root's NATS user on an embedded server.
	RootUser = "crowdtrain-root"
)

// ControlSubject is relay's subject for op (OpJoin, ...).
func ControlSubject(relay, op string) string { return SubjectRelays + "." + relay + "." + op }

// ControlWildcard is what the root subscribes to for op, all relays.
func ControlWildcard(op string) string { return SubjectRelays + ".*." + op }

// RelayOfControl is the relay a control subject names, or "".
func RelayOfControl(subject string) string {
	rest, ok := strings.CutPrefix(subject, SubjectRelays+".")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ".")
	if !ValidName(name) {
		return ""
	}
	return name
}

// InboxPrefix is relay's inbox prefix: its replies come under it.
func InboxPrefix(relay string) string { return "_INBOX." + relay }

// RelayPublish and RelaySubscribe are the subjects a relay's NATS
// credential lets it publish and subscribe to: its own, and nothing of
// another relay's.
func RelayPublish(relay string) []string {
	return []string{SubjectRelays + "." + relay + ".>", AggregateSubject(relay)}
}

func RelaySubscribe(relay string) []string {
	return []string{InboxPrefix(relay) + ".>", "crowdtrain.down.>"}
}

// VersionSubject is where job's new versions are announced.
func VersionSubject(job string) string { return SubjectVersions + "." + job }

// AggregateSubject is where relay publishes its aggregates.
func AggregateSubject(relay string) string { return SubjectAggregates + "." + relay }

// ValidName reports whether s may name a relay: it becomes a subject
// token, so no dots, spaces or wildcards.
func ValidName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Join is a relay's first request.
type Join struct {
	Relay string `json:"relay"`
	// URL is the relay's public websocket URL, for GET /api/v1/relays.
	URL string `json:"url"`
}

// JoinReply tells a relay what the root runs.
type JoinReply struct {
	// RootURL is the root's public HTTP URL: snapshots are fetched there.
	RootURL string `json:"root_url"`
	// Token goes with the relay's snapshot downloads (HeaderRelayToken):
	// the root does not count them against an address's anonymous share.
	Token string    `json:"token"`
	Jobs  []JobInfo `json:"jobs"`
	Error string    `json:"error,omitempty"`
}

// JobInfo is one running job: its spec as the root stores it.
type JobInfo struct {
	ID    string          `json:"id"`
	Spec  json.RawMessage `json:"spec"`
	Run   int64           `json:"run"`
	State string          `json:"state"`
}

// LeaseRequest asks for up to Want tasks of Job; Want 0 asks only for
// the newest version (its snapshot), which a relay in an asynchronous
// mode takes as soon as the root announces it.
type LeaseRequest struct {
	Relay string `json:"relay"`
	Job   string `json:"job"`
	Want  int    `json:"want"`
	// Answered is the newest round the relay sent an aggregate for: a
	// relay sends at most one per round, so it is given no more of it.
	Answered uint64 `json:"answered,omitempty"`
}

// LeaseReply is a block of tasks, all from Version (whose snapshot is at
// RootURL+SnapshotPath), in Round (0 outside round modes). An empty block
// with Wait set says why (a round full, an epoch's end); State is the
// job's state, and a relay ends its copy of a job that is no longer
// running.
type LeaseReply struct {
	Run          int64   `json:"run"`
	State        string  `json:"state"`
	Version      int64   `json:"version"`
	SnapshotPath string  `json:"snapshot_path"`
	Round        uint64  `json:"round,omitempty"`
	Leases       []Lease `json:"leases,omitempty"`
	Wait         string  `json:"wait,omitempty"`
	Error        string  `json:"error,omitempty"`
}

// Release hands Leases of Job back undone.
type Release struct {
	Relay  string   `json:"relay"`
	Job    string   `json:"job"`
	Leases []uint64 `json:"leases"`
}

// Released answers a Release: how many of the leases the root still held.
type Released struct {
	Released int    `json:"released"`
	Error    string `json:"error,omitempty"`
}

// HeaderRelayToken carries JoinReply.Token on a relay's HTTP requests.
const HeaderRelayToken = "X-Crowdtrain-Relay-Token"

// Lease is one task leased to a relay until DeadlineUnixMs.
type Lease struct {
	ID             uint64 `json:"id"`
	Shard          int    `json:"shard"`
	Start          int    `json:"start"`
	Count          int    `json:"count"`
	LocalSteps     int    `json:"local_steps"`
	DeadlineUnixMs int64  `json:"deadline_unix_ms"`
}

// Status is a relay's heartbeat: what the admin page's topology shows.
type Status struct {
	Relay   string `json:"relay"`
	URL     string `json:"url"`
	Workers int    `json:"workers"`
	// UpstreamBytes and Aggregates count what the relay has published.
	UpstreamBytes int64 `json:"upstream_bytes"`
	Aggregates    int64 `json:"aggregates"`
}

// Credit is what a relay's volunteer earned in an aggregate, and the
// strikes the relay's spot checks gave it. Examples must be exactly the
// examples of the aggregate's leases the relay names this volunteer for
// (Aggregate.Volunteers); each strike needs one Evidence entry: the root
// lease id of a task this volunteer answered through the relay (in this
// aggregate or an earlier one the root applied), each used once.
type Credit struct {
	Volunteer string   `json:"volunteer"`
	Examples  int64    `json:"examples"`
	Strikes   int      `json:"strikes,omitempty"`
	Evidence  []uint64 `json:"evidence,omitempty"`
}

// Aggregate is a relay's sum of its workers' accepted results for leases
// of one job: ID is unique per relay and is what the root checkpoints so
// that a redelivery is never applied twice.
type Aggregate struct {
	ID    string `json:"id"`
	Relay string `json:"relay"`
	Job   string `json:"job"`
	Run   int64  `json:"run"`
	// Base is the oldest version the summed results computed from.
	Base  int64  `json:"base"`
	Round uint64 `json:"round,omitempty"`
	// Leases are the leases the sum answers, each fully (Tasks their
	// tasks, in the same order); Released are leases handed back undone.
	Leases []uint64 `json:"leases"`
	Tasks  []Task   `json:"tasks"`
	// Volunteers names, per lease, the volunteer whose accepted result
	// answered it ("" for none known): the root credits only them, only
	// for those tasks.
	Volunteers []string `json:"volunteers"`
	Released   []uint64 `json:"released,omitempty"`
	Results    int      `json:"results"`
	Examples   int      `json:"examples"`
	Correct    int      `json:"correct"`
	Loss       float64  `json:"loss"`
	Credits    []Credit `json:"credits,omitempty"`
	// Sum is the sum of the results' updates (not in the JSON header).
	Sum []float32 `json:"-"`
}

// Task is a slice of a shard, as the lease gave it.
type Task struct {
	Shard int `json:"shard"`
	Start int `json:"start"`
	Count int `json:"count"`
}

// Headers of an aggregate's parts.
const (
	HeaderAggregate = "Crowdtrain-Aggregate" // the aggregate's ID
	HeaderPart      = "Crowdtrain-Part"      // "i/n", from 0
	// HeaderJob names the aggregate's job on every part: the root bounds
	// the parts and bytes it holds for it by the job's model size.
	HeaderJob = "Crowdtrain-Job"
)

// HeaderAllowance is what an aggregate may take beyond its sum (4 bytes a
// parameter): the length word and the JSON header, which grows with its
// leases. MaxBytes is the most an aggregate of a model of params
// parameters may take.
const HeaderAllowance = 2 << 20

// MaxBytes bounds an aggregate of a model of params parameters.
func MaxBytes(params int) int { return 4*params + HeaderAllowance }

// MaxPartsFor is the most parts such an aggregate needs in parts of
// partSize bytes.
func MaxPartsFor(params, partSize int) int {
	if partSize <= 0 {
		return 1
	}
	return min(MaxParts, (MaxBytes(params)+partSize-1)/partSize)
}

// Encode is a's bytes: a 4-byte header length, the JSON header, then Sum
// as little-endian float32s.
func Encode(a *Aggregate) ([]byte, error) {
	h, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4, 4+len(h)+4*len(a.Sum))
	binary.LittleEndian.PutUint32(out, uint32(len(h)))
	out = append(out, h...)
	for _, v := range a.Sum {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out, nil
}

// MaxHeader bounds an aggregate's JSON header.
const MaxHeader = HeaderAllowance - 4

// Decode reads an aggregate Encode wrote. It checks the shape, not the
// meaning: the root checks that against the job.
func Decode(b []byte) (*Aggregate, error) {
	if len(b) < 4 {
		return nil, errors.New("aggregate: shorter than its header length")
	}
	n := binary.LittleEndian.Uint32(b)
	if n > MaxHeader || int(n) > len(b)-4 {
		return nil, fmt.Errorf("aggregate: header of %d bytes does not fit the %d-byte message", n, len(b))
	}
	var a Aggregate
	if err := json.Unmarshal(b[4:4+n], &a); err != nil {
		return nil, fmt.Errorf("aggregate: header: %w", err)
	}
	body := b[4+n:]
	if len(body)%4 != 0 {
		return nil, fmt.Errorf("aggregate: %d bytes of update are not whole float32s", len(body))
	}
	a.Sum = make([]float32, len(body)/4)
	for i := range a.Sum {
		a.Sum[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:]))
	}
	if len(a.Leases) != len(a.Tasks) {
		return nil, fmt.Errorf("aggregate %s: %d leases but %d tasks", a.ID, len(a.Leases), len(a.Tasks))
	}
	if len(a.Volunteers) != len(a.Leases) {
		return nil, fmt.Errorf("aggregate %s: %d leases but %d volunteers named for them", a.ID, len(a.Leases), len(a.Volunteers))
	}
	return &a, nil
}

// MaxStrikes bounds the strikes one aggregate may carry, all volunteers
// together: a relay's spot checks strike rarely, and a relay cannot
// flood the root's ledger with them.
const MaxStrikes = 8

// CheckCredits reports why a's credit list disagrees with its leases, or
// nil: every credit is >= 0 and names a volunteer the aggregate names for
// some of its leases, once; each volunteer's credit is exactly the
// examples of its leases; so the credits add up to the examples of the
// leases with a volunteer. Strikes are >= 0, at most MaxStrikes in all,
// and each has one evidence lease id (CheckCredits does not say whose
// task that is: the root knows).
func (a *Aggregate) CheckCredits() error {
	owed := map[string]int64{}
	for i, v := range a.Volunteers {
		if v == "" {
			continue
		}
		if len(v) > 64 {
			return fmt.Errorf("lease %d names a volunteer id of %d bytes", a.Leases[i], len(v))
		}
		owed[v] += int64(a.Tasks[i].Count)
	}
	seen := map[string]bool{}
	strikes := 0
	var sum, want int64
	for _, n := range owed {
		want += n
	}
	for _, c := range a.Credits {
		switch {
		case c.Examples < 0:
			return fmt.Errorf("credit of %d examples to volunteer %q: credit is never negative", c.Examples, c.Volunteer)
		case c.Strikes < 0:
			return fmt.Errorf("%d strikes for volunteer %q", c.Strikes, c.Volunteer)
		case seen[c.Volunteer]:
			return fmt.Errorf("volunteer %q is credited twice", c.Volunteer)
		case c.Volunteer == "":
			return errors.New("a credit names no volunteer")
		}
		seen[c.Volunteer] = true
		owe, ok := owed[c.Volunteer]
		if !ok && c.Examples > 0 {
			return fmt.Errorf("credit of %d examples to volunteer %q, whom the aggregate names for none of its leases", c.Examples, c.Volunteer)
		}
		if ok && c.Examples != owe {
			return fmt.Errorf("credit of %d examples to volunteer %q, whose leases in the aggregate hold %d", c.Examples, c.Volunteer, owe)
		}
		if c.Strikes != len(c.Evidence) {
			return fmt.Errorf("%d strikes for volunteer %q with %d tasks as evidence: each strike names the task it refuted", c.Strikes, c.Volunteer, len(c.Evidence))
		}
		strikes += c.Strikes
		sum += c.Examples
	}
	if strikes > MaxStrikes {
		return fmt.Errorf("%d strikes in one aggregate, at most %d", strikes, MaxStrikes)
	}
	if sum != want {
		return fmt.Errorf("credits add up to %d examples, the leases named for volunteers hold %d", sum, want)
	}
	return nil
}

// Split cuts b into parts of at most max bytes.
func Split(b []byte, max int) [][]byte {
	if max <= 0 || len(b) <= max {
		return [][]byte{b}
	}
	var parts [][]byte
	for len(b) > 0 {
		n := min(max, len(b))
		parts = append(parts, b[:n])
		b = b[n:]
	}
	return parts
}

// PartHeader is the HeaderPart value of part i of n.
func PartHeader(i, n int) string { return strconv.Itoa(i) + "/" + strconv.Itoa(n) }

// ParsePart reads a HeaderPart value.
func ParsePart(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if ok {
		i, err = strconv.Atoi(a)
		if err == nil {
			n, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || n < 1 || n > MaxParts || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("part %q: want i/n with 0 <= i < n <= %d", s, MaxParts)
	}
	return i, n, nil
}

// MaxParts bounds how many parts one aggregate may have.
const MaxParts = 4096
