package coordinator_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/natsbox"
	"github.com/crowdtrain/crowdtrain/jobspec"
	relaymsg "github.com/crowdtrain/crowdtrain/protocol/relay"
	"github.com/crowdtrain/crowdtrain/store"
)

// startNATS runs the embedded NATS server with a 64 KiB payload limit, so
// that every mnist-mlp aggregate (940 KB) travels in parts.
func startNATS(t *testing.T) *natsbox.Box {
	t.Helper()
	box, err := natsbox.Start(natsbox.Options{Listen: "127.0.0.1:0", Dir: filepath.Join(t.TempDir(), "nats"), MaxPayload: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(box.Close)
	return box
}

func connectNATS(t *testing.T, url string, c natsbox.Creds) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(c.User, c.Password))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// fakeRelay speaks the relay side of the protocol by hand: it sends
// whatever aggregate a test makes, good or bad.
type fakeRelay struct {
	t    *testing.T
	name string
	nc   *nats.Conn
	js   jetstream.JetStream
	sent int
}

func newFakeRelay(t *testing.T, box *natsbox.Box, name string) *fakeRelay {
	t.Helper()
	return fakeRelayWith(t, box, name, relayCredential(t, box, name))
}

// relayCredential issues relay name its credential on box and reads it.
func relayCredential(t *testing.T, box *natsbox.Box, name string) natsbox.RelayCredential {
	t.Helper()
	text, err := box.IssueRelay(name, "")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".creds")
	if err := os.WriteFile(path, text, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := natsbox.ReadRelayCredential(path, "")
	if err != nil || c.Name != name {
		t.Fatalf("reading relay %s's credential: %v (it names %q)", name, err, c.Name)
	}
	return c
}

// fakeRelayWith connects as relay name with credential c (a relay's own,
// or another's).
func fakeRelayWith(t *testing.T, box *natsbox.Box, name string, c natsbox.RelayCredential, opts ...nats.Option) *fakeRelay {
	t.Helper()
	nc, err := nats.Connect(box.URL, append(c.Options, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeRelay{t: t, name: name, nc: nc, js: js}
}

func (f *fakeRelay) request(subject string, req, reply any) {
	f.t.Helper()
	b, _ := json.Marshal(req)
	m, err := f.nc.Request(subject, b, 10*time.Second)
	if err != nil {
		f.t.Fatalf("%s: %v", subject, err)
	}
	if err := json.Unmarshal(m.Data, reply); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeRelay) join() relaymsg.JoinReply {
	var r relaymsg.JoinReply
	f.request(relaymsg.ControlSubject(f.name, relaymsg.OpJoin), relaymsg.Join{Relay: f.name, URL: "ws://127.0.0.9:1/ws"}, &r)
	return r
}

func (f *fakeRelay) lease(job string, want int) relaymsg.LeaseReply {
	var r relaymsg.LeaseReply
	f.request(relaymsg.ControlSubject(f.name, relaymsg.OpLease), relaymsg.LeaseRequest{Relay: f.name, Job: job, Want: want}, &r)
	if r.Error != "" {
		f.t.Fatal(r.Error)
	}
	return r
}

// publish sends a to the stream in parts that fit the payload limit, as
// a fresh message each time (a redelivery, to the root).
func (f *fakeRelay) publish(a *relaymsg.Aggregate) {
	f.t.Helper()
	body, err := relaymsg.Encode(a)
	if err != nil {
		f.t.Fatal(err)
	}
	f.sent++
	parts := relaymsg.Split(body, int(f.nc.MaxPayload())-4096)
	for i, p := range parts {
		msg := nats.NewMsg(relaymsg.AggregateSubject(f.name))
		msg.Data = p
		msg.Header.Set(relaymsg.HeaderAggregate, a.ID)
		msg.Header.Set(relaymsg.HeaderPart, relaymsg.PartHeader(i, len(parts)))
		msg.Header.Set(relaymsg.HeaderJob, a.Job)
		if _, err := f.js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(a.ID+"/"+strconv.Itoa(f.sent)+"/"+strconv.Itoa(i))); err != nil {
			f.t.Fatal(err)
		}
	}
}

// aggregateOf answers leases with a sum of small values, its own for its
// first lease (two alike would be a replay).
func aggregateOf(id string, relay string, job string, r relaymsg.LeaseReply, leases []relaymsg.Lease, n int) *relaymsg.Aggregate {
	a := &relaymsg.Aggregate{ID: id, Relay: relay, Job: job, Run: r.Run, Base: r.Version, Round: r.Round, Results: len(leases), Sum: make([]float32, n)}
	for _, l := range leases {
		a.Leases = append(a.Leases, l.ID)
		a.Tasks = append(a.Tasks, relaymsg.Task{Shard: l.Shard, Start: l.Start, Count: l.Count})
		a.Volunteers = append(a.Volunteers, "")
		a.Examples += l.Count
	}
	own := 1 + float32(leases[0].ID%1024)/4096
	for i := range a.Sum {
		a.Sum[i] = 1e-3 * own * float32(len(leases)) * float32(i%7-3)
	}
	return a
}

// metricValue is the sum of metric's samples on g's /metrics.
func metricValue(t *testing.T, g *testGrid, metric string) float64 {
	t.Helper()
	sum := 0.0
	for line := range strings.Lines(getMetrics(t, g)) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || (name != metric && !strings.HasPrefix(name, metric+"{")) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

func relayView(t *testing.T, srv *coordinator.Server, name string) coordinator.RelayView {
	for _, r := range srv.Relays() {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("relay %s not listed: %+v", name, srv.Relays())
	return coordinator.RelayView{}
}

// waitRelay waits until cond holds of the relay's record at the root.
func waitRelay(t *testing.T, srv *coordinator.Server, name, what string, cond func(coordinator.RelayView) bool) coordinator.RelayView {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := relayView(t, srv, name)
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay %s: %s: not within 30s: %+v", name, what, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAcknowledged waits until the root's consumer has nothing pending:
// every aggregate is acknowledged, so its checkpoint is durable.
func waitAcknowledged(t *testing.T, box *natsbox.Box) {
	t.Helper()
	nc := connectNATS(t, box.URL, box.Root)
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := js.Consumer(context.Background(), relaymsg.Stream, relaymsg.Consumer)
		if err == nil {
			info, err := c.Info(context.Background())
			if err == nil && info.NumAckPending == 0 && info.NumPending == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("aggregates still unacknowledged after 30s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func serveRelays(t *testing.T, g *testGrid, box *natsbox.Box) {
	t.Helper()
	serveRelaysWith(t, g, box, coordinator.RelayGateOptions{})
}

// serveRelaysWith is serveRelays with options (RootURL is the grid's).
func serveRelaysWith(t *testing.T, g *testGrid, box *natsbox.Box, o coordinator.RelayGateOptions) {
	t.Helper()
	o.RootURL = g.http.URL
	if err := g.srv.ServeRelays(context.Background(), connectNATS(t, box.URL, box.Root), o); err != nil {
		t.Fatal(err)
	}
}

// A relay's aggregate is applied whole, once: bad ones are refused with
// the model untouched, a second delivery of one is acknowledged and not
// applied, also after the root restarts from its checkpoint, and one
// published while the root was down is applied when it is back.
func TestRelayAggregatesAppliedOnceAndBadOnesRefused(t *testing.T) {
	box := startNATS(t)
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) { s.MaxEpochs = 100 })
	g := newStoredGrid(t, db, &spec)
	// Every bad aggregate below is counted, none quarantines the relay.
	serveRelaysWith(t, g, box, coordinator.RelayGateOptions{QuarantineAfter: 1000})
	n := modelParams(t, spec)
	relay := newFakeRelay(t, box, "r1")
	if j := relay.join(); len(j.Jobs) != 1 || j.Jobs[0].ID != g.job.ID || j.RootURL != g.http.URL || j.Token == "" {
		t.Fatalf("join: %+v", j)
	}
	r := relay.lease(g.job.ID, 6)
	if len(r.Leases) != 6 || r.Version != 0 || r.Run != 1 {
		t.Fatalf("lease: %+v", r)
	}
	// The relay fetches its snapshot with the token, past the anonymous share.
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, g.http.URL+r.SnapshotPath, nil)
		req.Header.Set(relaymsg.HeaderRelayToken, relay.join().Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET snapshot: %v %v", resp, err)
		}
		resp.Body.Close()
	}

	good := aggregateOf("r1-a-1", "r1", g.job.ID, r, r.Leases[:2], n)
	relay.publish(good)
	waitRelay(t, g.srv, "r1", "first aggregate applied", func(v coordinator.RelayView) bool { return v.AggregatesApplied == 1 })
	v := g.jobView()
	if v.Version != 1 || v.UpdatesApplied != 2 || v.ExamplesSeen != int64(good.Examples) {
		t.Fatalf("after one aggregate of 2 results: version %d, applied %d, examples %d", v.Version, v.UpdatesApplied, v.ExamplesSeen)
	}

	bad := map[string]func(a *relaymsg.Aggregate){
		"lease never granted": func(a *relaymsg.Aggregate) { a.Leases[0] = 1 << 40 },
		"lease answered": func(a *relaymsg.Aggregate) {
			a.Leases, a.Tasks, a.Volunteers = good.Leases[:1], good.Tasks[:1], good.Volunteers[:1]
		},
		"wrong result count": func(a *relaymsg.Aggregate) { a.Results = 2 },
		"wrong examples":     func(a *relaymsg.Aggregate) { a.Examples++ },
		"wrong task":         func(a *relaymsg.Aggregate) { a.Tasks[0].Start++ },
		"lease twice": func(a *relaymsg.Aggregate) {
			a.Leases, a.Tasks, a.Volunteers = append(a.Leases, a.Leases[0]), append(a.Tasks, a.Tasks[0]), append(a.Volunteers, "")
		},
		"not finite":         func(a *relaymsg.Aggregate) { a.Sum[5] = float32(math.NaN()) },
		"future base":        func(a *relaymsg.Aggregate) { a.Base = 50 },
		"short sum":          func(a *relaymsg.Aggregate) { a.Sum = a.Sum[:10] },
		"other relay's name": func(a *relaymsg.Aggregate) { a.Relay = "r2" },
		"no such job":        func(a *relaymsg.Aggregate) { a.Job = "nope" },
	}
	refused := int64(0)
	for what, spoil := range bad {
		a := aggregateOf("r1-bad-"+strings.ReplaceAll(what, " ", "-"), "r1", g.job.ID, r, r.Leases[2:3], n)
		spoil(a)
		relay.publish(a)
		// Counted to the relay whose subject it came on, whatever it says;
		// parts naming a job not here are refused before they are joined.
		if what == "no such job" {
			waitUntil(t, what+" refused", func() bool { return relayAdmin(t, g, "r1").PartsRefused > 0 })
		} else {
			refused++
			waitRelay(t, g.srv, "r1", what+" refused", func(v coordinator.RelayView) bool { return v.AggregatesRefused == refused })
		}
		if v := g.jobView(); v.Version != 1 || v.UpdatesApplied != 2 {
			t.Fatalf("%s: the model moved: version %d, applied %d", what, v.Version, v.UpdatesApplied)
		}
	}

	relay.publish(good) // delivered again
	waitRelay(t, g.srv, "r1", "redelivery seen", func(v coordinator.RelayView) bool { return v.AggregatesDuplicate == 1 })
	if v := g.jobView(); v.Version != 1 || v.UpdatesApplied != 2 {
		t.Fatalf("a redelivery moved the model: version %d, applied %d", v.Version, v.UpdatesApplied)
	}
	waitAcknowledged(t, box)

	// The root goes away; meanwhile the relay sends an aggregate for the
	// old run's leases, which the stream keeps.
	g.close()
	late := aggregateOf("r1-a-2", "r1", g.job.ID, r, r.Leases[3:5], n)
	relay.publish(late)
	g2 := newStoredGrid(t, db, nil)
	if g2.job == nil || g2.job.ID != g.job.ID {
		t.Fatal("the job did not resume")
	}
	serveRelays(t, g2, box)
	relay.join()
	waitRelay(t, g2.srv, "r1", "the aggregate sent while the root was down applied", func(v coordinator.RelayView) bool { return v.AggregatesApplied == 1 })
	if v := g2.jobView(); v.Version != 2 || v.UpdatesApplied != 4 || v.Run != 2 {
		t.Fatalf("after the restart: version %d, applied %d, run %d; want 2, 4, 2", v.Version, v.UpdatesApplied, v.Run)
	}
	for _, a := range []*relaymsg.Aggregate{good, late} {
		relay.publish(a)
	}
	waitRelay(t, g2.srv, "r1", "both redeliveries seen", func(v coordinator.RelayView) bool { return v.AggregatesDuplicate == 2 })
	if v := g2.jobView(); v.Version != 2 || v.UpdatesApplied != 4 || v.RelayAggregates != 1 || v.RelayAggregatesDuplicate != 2 {
		t.Fatalf("a redelivery after the restart moved the model: version %d, applied %d, aggregates %d (duplicate %d)",
			v.Version, v.UpdatesApplied, v.RelayAggregates, v.RelayAggregatesDuplicate)
	}
	// A new run's lease requests carry its run; the old leases are gone.
	if r2 := relay.lease(g.job.ID, 1); r2.Run != 2 || r2.Version != 2 {
		t.Fatalf("lease after restart: %+v", r2)
	}
}

// Each relay holds a NATS credential of its own, issued by the root's
// admin API: NATS itself binds it to its own subjects and inbox, so one
// relay cannot read another's replies, lease, release or publish as
// another, or announce versions; the root takes a relay's name from the
// subject; a revoked relay is cut off at once and its leases requeued.
func TestRelayIdentityIsItsCredential(t *testing.T) {
	box := startNATS(t)
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) { s.MaxEpochs, s.TargetAccuracy = 100, 0 })
	g := newTestGridWith(t, spec, nil)
	serveRelaysWith(t, g, box, coordinator.RelayGateOptions{Credentials: box})
	g.addWorker(1, nil) // an honest local worker, all along
	for what, o := range map[string]nats.Option{
		"no credential":             nil,
		"a guessed root password":   nats.UserInfo(relaymsg.RootUser, "guess"),
		"the old shared relay user": nats.UserInfo("crowdtrain-relay", "guess"),
	} {
		opts := []nats.Option{}
		if o != nil {
			opts = append(opts, o)
		}
		if nc, err := nats.Connect(box.URL, opts...); err == nil {
			nc.Close()
			t.Fatalf("%s: connected", what)
		}
	}

	// r1's credential through the admin API, r2's from the box.
	var issued coordinator.RelayCredentialReply
	if code := g.adminJSON(http.MethodPost, "/api/v1/relays/credentials", coordinator.RelayCredentialRequest{Name: "r1"}, &issued); code != http.StatusCreated {
		t.Fatalf("issuing r1's credential: %d", code)
	}
	path := filepath.Join(t.TempDir(), "r1.creds")
	if err := os.WriteFile(path, []byte(issued.Credential), 0o600); err != nil {
		t.Fatal(err)
	}
	c1, err := natsbox.ReadRelayCredential(path, "")
	if err != nil || c1.Name != "r1" {
		t.Fatalf("r1's credential: %v, names %q", err, c1.Name)
	}
	if code := g.adminJSON(http.MethodPost, "/api/v1/relays/credentials", coordinator.RelayCredentialRequest{Name: "r3", URL: "http://evil.example/ws"}, nil); code != http.StatusBadRequest {
		t.Fatalf("a credential for an http:// relay URL: %d, want 400", code)
	}
	r1 := fakeRelayWith(t, box, "r1", c1)
	denied := make(chan string, 16)
	r2 := fakeRelayWith(t, box, "r2", relayCredential(t, box, "r2"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case denied <- err.Error():
		default:
		}
	}))
	refused := func(what string) {
		t.Helper()
		select {
		case e := <-denied:
			if !strings.Contains(strings.ToLower(e), "permission") {
				t.Fatalf("%s: %s", what, e)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not refused", what)
		}
	}
	if j := r1.join(); len(j.Jobs) != 1 || j.Token == "" {
		t.Fatalf("r1's join: %+v", j)
	}
	held := r1.lease(g.job.ID, 4)

	// Reading another relay's inbox, or every inbox.
	for _, subj := range []string{"_INBOX.>", relaymsg.InboxPrefix("r1") + ".>", relaymsg.ControlSubject("r1", relaymsg.OpJoin)} {
		if _, err := r2.nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		r2.nc.Flush()
		refused("r2 subscribing to " + subj)
	}
	// Leasing, releasing or publishing as another relay, announcing a version.
	for _, subj := range []string{relaymsg.ControlSubject("r1", relaymsg.OpLease), relaymsg.ControlSubject("r1", relaymsg.OpRelease),
		relaymsg.AggregateSubject("r1"), relaymsg.VersionSubject(g.job.ID)} {
		r2.nc.Publish(subj, []byte(`{"relay":"r1","job":"`+g.job.ID+`","want":4,"leases":[`+strconv.FormatUint(held.Leases[0].ID, 10)+`]}`))
		r2.nc.Flush()
		refused("r2 publishing on " + subj)
	}
	// On its own subject, naming another in the body: the root refuses.
	var lr relaymsg.LeaseReply
	r2.request(relaymsg.ControlSubject("r2", relaymsg.OpLease), relaymsg.LeaseRequest{Relay: "r1", Job: g.job.ID, Want: 1}, &lr)
	if !strings.Contains(lr.Error, "cannot speak for relay") || len(lr.Leases) != 0 {
		t.Fatalf("r2 leasing as r1 on its own subject: %+v", lr)
	}
	var rel relaymsg.Released
	r2.request(relaymsg.ControlSubject("r2", relaymsg.OpRelease), relaymsg.Release{Job: g.job.ID, Leases: []uint64{held.Leases[0].ID}}, &rel)
	if rel.Released != 0 {
		t.Fatalf("r2 released %d of r1's leases", rel.Released)
	}

	// Revoked: cut off at once, its leases queued again, its credential
	// refused from then on.
	before := g.jobView().LeasesReleased
	if code := g.adminJSON(http.MethodDelete, "/api/v1/relays/r1/credential", nil, nil); code != http.StatusOK {
		t.Fatalf("revoking r1: %d", code)
	}
	waitUntil(t, "r1 disconnected", func() bool { return !r1.nc.IsConnected() })
	waitUntil(t, "r1's leases requeued", func() bool { return g.jobView().LeasesReleased >= before+int64(len(held.Leases)) })
	if nc, err := nats.Connect(box.URL, c1.Options...); err == nil {
		nc.Close()
		t.Fatal("a revoked credential connected")
	}
	if code := g.adminJSON(http.MethodDelete, "/api/v1/relays/r1/credential", nil, nil); code != http.StatusNotFound {
		t.Fatalf("revoking r1 twice: %d, want 404", code)
	}
	// What r1 sent before its revocation can reach the root after it: a
	// heartbeat in the root's queue, an aggregate in the stream (sent here
	// by the root's own user, which may publish on any subject). The
	// heartbeat does not bring r1 back to the operator's list, the
	// aggregate is refused.
	rootNC := connectNATS(t, box.URL, box.Root)
	rootJS, err := jetstream.New(rootNC)
	if err != nil {
		t.Fatal(err)
	}
	partsRefused := func() float64 { return metricValue(t, g, "crowdtrain_relay_parts_refused_all_total") }
	refusedBefore := partsRefused()
	for _, hb := range []relaymsg.Status{{Relay: "r1", Workers: 5}, {Relay: "r2", Workers: 7}} {
		b, _ := json.Marshal(hb)
		rootNC.Publish(relaymsg.ControlSubject(hb.Relay, relaymsg.OpStatus), b)
	}
	rootNC.Flush()
	late := &fakeRelay{t: t, name: "r1", nc: rootNC, js: rootJS}
	late.publish(aggregateOf("r1-late", "r1", g.job.ID, held, held.Leases, modelParams(t, spec)))
	// One subscription takes every relay's heartbeats, in order: r2's
	// seen, r1's was handled before it.
	waitUntil(t, "r2's heartbeat seen", func() bool {
		for _, r := range g.srv.RelaysAdmin() {
			if r.Name == "r2" && r.Workers == 7 {
				return true
			}
		}
		return false
	})
	for _, r := range g.srv.RelaysAdmin() {
		if r.Name == "r1" {
			t.Fatalf("r1 is listed again after its revocation: %+v", r)
		}
	}
	waitUntil(t, "r1's late aggregate refused", func() bool { return partsRefused() > refusedBefore })
	// r2 is untouched, and the honest worker trains on.
	if j := r2.join(); len(j.Jobs) != 1 {
		t.Fatalf("r2's join after r1's revocation: %+v", j)
	}
	v := g.jobView().Version
	waitUntil(t, "the local worker training on", func() bool { return g.jobView().Version > v+3 })
}

// The root vouches for a relay's URL before volunteers see it: ws or wss,
// the one its credential was registered with (or that it first joined
// with), and in manual mode only once an operator approved it; only then
// is it in GET /api/v1/relays and the pages' connect-src.
func TestRelayURLsVouchedFor(t *testing.T) {
	box := startNATS(t)
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) { s.MaxEpochs, s.TargetAccuracy = 100, 0 })
	g := newTestGridWith(t, spec, nil)
	serveRelaysWith(t, g, box, coordinator.RelayGateOptions{Credentials: box, Approval: coordinator.RelayApprovalManual})
	text, err := g.srv.IssueRelayCredential("r1", "ws://127.0.0.9:1/ws")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "r1.creds")
	os.WriteFile(path, text, 0o600)
	c1, err := natsbox.ReadRelayCredential(path, "")
	if err != nil || c1.URL != "ws://127.0.0.9:1/ws" {
		t.Fatalf("r1's credential: %v, url %q", err, c1.URL)
	}
	r1 := fakeRelayWith(t, box, "r1", c1)
	r2 := newFakeRelay(t, box, "r2") // registered with no URL
	joinAt := func(f *fakeRelay, url string) relaymsg.JoinReply {
		var r relaymsg.JoinReply
		f.request(relaymsg.ControlSubject(f.name, relaymsg.OpJoin), relaymsg.Join{URL: url}, &r)
		return r
	}
	listed := func() map[string]string {
		var body struct {
			Relays []coordinator.RelayView `json:"relays"`
		}
		if code := g.getJSON("/api/v1/relays", &body); code != http.StatusOK {
			t.Fatalf("GET /api/v1/relays: %d", code)
		}
		out := map[string]string{}
		for _, r := range body.Relays {
			out[r.Name] = r.URL
		}
		return out
	}
	for _, bad := range []string{"ws://evil.example:9/ws", "http://127.0.0.9:1/ws", "javascript:alert(1)", ""} {
		if r := joinAt(r1, bad); !strings.Contains(r.Error, "relay URL") && !strings.Contains(r.Error, "registered with") {
			t.Fatalf("r1 joining at %q: %+v", bad, r)
		}
	}
	if r := joinAt(r1, "ws://127.0.0.9:1/ws"); r.Error != "" || len(r.Jobs) != 1 {
		t.Fatalf("r1 joining at its URL: %+v", r)
	}
	if r := joinAt(r2, "wss://relay-two.example/ws"); r.Error != "" {
		t.Fatalf("r2's first join: %+v", r)
	}
	if r := joinAt(r2, "wss://evil.example/ws"); !strings.Contains(r.Error, "joined with wss://relay-two.example/ws") && !strings.Contains(r.Error, "registered with wss://relay-two.example/ws") {
		t.Fatalf("r2 joining at another URL: %+v", r)
	}
	// Manual: nobody is listed before the operator approves.
	if l := listed(); len(l) != 0 || len(g.srv.RelayOrigins()) != 0 {
		t.Fatalf("listed before approval: %v, origins %v", l, g.srv.RelayOrigins())
	}
	for _, name := range []string{"r1", "r2"} {
		if code := g.adminJSON(http.MethodPost, "/api/v1/relays/"+name+"/approve", nil, nil); code != http.StatusOK {
			t.Fatalf("approving %s: %d", name, code)
		}
	}
	if code := g.adminJSON(http.MethodPost, "/api/v1/relays/nobody/approve", nil, nil); code != http.StatusNotFound {
		t.Fatalf("approving an unknown relay: %d", code)
	}
	if l := listed(); l["r1"] != "ws://127.0.0.9:1/ws" || l["r2"] != "wss://relay-two.example/ws" || len(l) != 2 {
		t.Fatalf("listed after approval: %v", l)
	}
	origins := strings.Join(g.srv.RelayOrigins(), " ")
	if origins != "http://127.0.0.9:1 https://relay-two.example" {
		t.Fatalf("origins for the pages' connect-src: %q", origins)
	}
	// The heartbeat's URL is not believed.
	b, _ := json.Marshal(relaymsg.Status{URL: "ws://evil.example:9/ws", Workers: 3})
	r1.nc.Publish(relaymsg.ControlSubject("r1", relaymsg.OpStatus), b)
	r1.nc.Flush()
	waitUntil(t, "r1's heartbeat seen", func() bool { return relayView(t, g.srv, "r1").Workers == 3 })
	if l := listed(); l["r1"] != "ws://127.0.0.9:1/ws" {
		t.Fatalf("after a heartbeat naming another URL: %v", l)
	}
	// Withdrawn: off the list again.
	if code := g.adminJSON(http.MethodDelete, "/api/v1/relays/r2/approve", nil, nil); code != http.StatusOK {
		t.Fatalf("withdrawing r2: %d", code)
	}
	if l := listed(); len(l) != 1 {
		t.Fatalf("after withdrawing r2: %v", l)
	}
}

// A root upgraded over the stream an earlier version made (no limits, a
// consumer redelivering for ever) puts its bounds on that stream: it
// needs no file deleted.
func TestRelayStreamOfAnEarlierVersionGetsItsBounds(t *testing.T) {
	box := startNATS(t)
	nc := connectNATS(t, box.URL, box.Root)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: relaymsg.Stream, Subjects: []string{relaymsg.SubjectAggregates + ".>"},
		Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, relaymsg.Stream, jetstream.ConsumerConfig{Durable: relaymsg.Consumer,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Second, MaxAckPending: 4096}); err != nil {
		t.Fatal(err)
	}
	spec := jobSpec(t, "mnist-mlp", nil)
	g := newTestGridWith(t, spec, nil)
	serveRelaysWith(t, g, box, coordinator.RelayGateOptions{StreamMaxBytes: 64 << 20})
	s, err := js.Stream(ctx, relaymsg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.Config; c.MaxBytes != 64<<20 || c.MaxAge != time.Hour || c.MaxMsgsPerSubject < 64 || !c.DiscardNewPerSubject || c.Discard != jetstream.DiscardNew {
		t.Fatalf("the stream after the upgrade: %+v", c)
	}
	cons, err := js.Consumer(ctx, relaymsg.Stream, relaymsg.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Config.MaxDeliver != 8 {
		t.Fatalf("the consumer after the upgrade: MaxDeliver %d", ci.Config.MaxDeliver)
	}
}

// In auto mode a relay is listed at its first join with the URL the
// operator registered; an operator's withdrawal stands at its next joins.
func TestRelayWithdrawalStandsInAutoMode(t *testing.T) {
	box := startNATS(t)
	g := newTestGridWith(t, jobSpec(t, "mnist-mlp", nil), nil)
	serveRelaysWith(t, g, box, coordinator.RelayGateOptions{Credentials: box})
	text, err := g.srv.IssueRelayCredential("r1", "wss://r1.example/ws")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "r1.creds")
	os.WriteFile(path, text, 0o600)
	c, err := natsbox.ReadRelayCredential(path, "")
	if err != nil {
		t.Fatal(err)
	}
	r1 := fakeRelayWith(t, box, "r1", c)
	join := func() {
		var r relaymsg.JoinReply
		r1.request(relaymsg.ControlSubject("r1", relaymsg.OpJoin), relaymsg.Join{URL: "wss://r1.example/ws"}, &r)
		if r.Error != "" {
			t.Fatal(r.Error)
		}
	}
	join()
	if l := g.srv.Relays(); len(l) != 1 || l[0].URL != "wss://r1.example/ws" {
		t.Fatalf("auto mode, after the first join: %+v", l)
	}
	if ok, err := g.srv.ApproveRelay("r1", false); !ok || err != nil {
		t.Fatalf("withdrawing: %v %v", ok, err)
	}
	join()
	if l := g.srv.Relays(); len(l) != 0 {
		t.Fatalf("a withdrawn relay listed again after a join: %+v", l)
	}
}
