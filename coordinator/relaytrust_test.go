package coordinator_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/natsbox"
	"github.com/crowdtrain/crowdtrain/jobspec"
	relaymsg "github.com/crowdtrain/crowdtrain/protocol/relay"
)

// forgedRelay is a relay with the root's credentials that lies in its
// aggregates' claims; the root believes them only as far as what it
// leased to that relay carries them.
func TestRelayForgedClaimsRefused(t *testing.T) {
	box := startNATS(t)
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) { s.MaxEpochs, s.TargetAccuracy = 100, 0 })
	g := newTestGridWith(t, spec, nil)
	serveRelaysWith(t, g, box, coordinator.RelayGateOptions{QuarantineAfter: 12})
	n := modelParams(t, spec)
	// An honest local worker trains beside the relay all along.
	g.addWorker(1, nil)
	local := ""
	waitUntil(t, "the local worker is credited", func() bool {
		for id, v := range g.standing() {
			if v.Connected > 0 && v.Examples > 0 {
				local = id
				return true
			}
		}
		return false
	})

	relay := newFakeRelay(t, box, "r1")
	relay.join()
	r := relay.lease(g.job.ID, 24)
	if len(r.Leases) != 24 {
		t.Fatalf("lease: %d leases", len(r.Leases))
	}
	const honest, other = "k-00000000000000aa", "k-00000000000000bb"
	next := 0
	take := func(k int) []relaymsg.Lease {
		ls := r.Leases[next : next+k]
		next += k
		return ls
	}
	credited := func(a *relaymsg.Aggregate, who ...string) *relaymsg.Aggregate {
		owed := map[string]int64{}
		for i := range a.Leases {
			a.Volunteers[i] = who[i%len(who)]
			owed[a.Volunteers[i]] += int64(a.Tasks[i].Count)
		}
		for _, v := range who {
			if owed[v] > 0 {
				a.Credits = append(a.Credits, relaymsg.Credit{Volunteer: v, Examples: owed[v]})
				owed[v] = 0
			}
		}
		return a
	}
	applied := func() int64 { return relayAdmin(t, g, "r1").AggregatesApplied }
	// The local worker moves the model: each aggregate computes from the
	// newest version, so it is never stale.
	publish := func(a *relaymsg.Aggregate) {
		a.Base = g.jobView().Version
		relay.publish(a)
	}

	// An honest aggregate: two volunteers, each credited its leases.
	good := credited(aggregateOf("r1-good-1", "r1", g.job.ID, r, take(2), n), honest, other)
	publish(good)
	waitUntil(t, "the honest aggregate applied", func() bool { return applied() == 1 })
	before := g.standing()
	if got := before[honest].Examples; got != int64(good.Tasks[0].Count) {
		t.Fatalf("volunteer %s credited %d examples, its lease held %d", honest, got, good.Tasks[0].Count)
	}

	// Forged claims: each refused whole, counted against the relay, the
	// model and the ledger untouched.
	forged := map[string]func(a *relaymsg.Aggregate){
		"a foreign volunteer": func(a *relaymsg.Aggregate) {
			a.Credits = append(a.Credits, relaymsg.Credit{Volunteer: local, Examples: 3e15})
		},
		"a negative amount": func(a *relaymsg.Aggregate) {
			a.Credits[0].Examples, a.Credits[1].Examples = -a.Credits[1].Examples, a.Credits[1].Examples+a.Credits[0].Examples+a.Credits[1].Examples
		},
		"a sum that disagrees": func(a *relaymsg.Aggregate) { a.Credits[0].Examples += 1000 },
		"strikes over the cap": func(a *relaymsg.Aggregate) {
			a.Credits[0].Strikes, a.Credits[0].Evidence = 100, make([]uint64, 100)
		},
		"strikes without evidence": func(a *relaymsg.Aggregate) {
			a.Credits = append(a.Credits, relaymsg.Credit{Volunteer: local, Strikes: 3})
		},
	}
	refused := relayAdmin(t, g, "r1").AggregatesForged
	for what, spoil := range forged {
		a := credited(aggregateOf("r1-forged-"+strings.ReplaceAll(what, " ", "-"), "r1", g.job.ID, r, r.Leases[next:next+2], n), honest, other)
		spoil(a)
		publish(a)
		refused++
		waitUntil(t, what+" refused", func() bool { return relayAdmin(t, g, "r1").AggregatesForged == refused })
		if v := g.jobView(); v.RelayAggregates != 1 {
			t.Fatalf("%s: %d relay aggregates applied, want 1", what, v.RelayAggregates)
		}
		now := g.standing()
		if now[local].Strikes != 0 || now[honest].Examples != before[honest].Examples || now[other].Examples != before[other].Examples ||
			now[local].Examples > 1e12 {
			t.Fatalf("%s moved the ledger: %+v", what, now)
		}
	}

	// Strikes with evidence: only a task the relay answered for that
	// volunteer counts, once; one naming the local worker with a task of
	// another, or a task used already, is dropped and counted.
	a := credited(aggregateOf("r1-strikes", "r1", g.job.ID, r, take(2), n), honest, other)
	a.Credits[1].Strikes, a.Credits[1].Evidence = 1, []uint64{good.Leases[1]} // other's task: believed
	a.Credits = append(a.Credits, relaymsg.Credit{Volunteer: local, Strikes: 1, Evidence: []uint64{good.Leases[0]}})
	publish(a)
	waitUntil(t, "the aggregate with strikes applied", func() bool { return applied() == 2 })
	b := credited(aggregateOf("r1-strikes-again", "r1", g.job.ID, r, take(2), n), honest, other)
	b.Credits[1].Strikes, b.Credits[1].Evidence = 1, []uint64{good.Leases[1]} // used already
	publish(b)
	waitUntil(t, "the aggregate reusing evidence applied", func() bool { return applied() == 3 })
	st := g.standing()
	if st[other].Strikes != 1 || st[local].Strikes != 0 || st[honest].Strikes != 0 {
		t.Fatalf("strikes: %s %d (want 1), local %s %d (want 0), %s %d (want 0)", other, st[other].Strikes, local, st[local].Strikes, honest, st[honest].Strikes)
	}
	if v := relayAdmin(t, g, "r1"); v.StrikesRefused != 2 {
		t.Fatalf("strikes refused: %d, want 2", v.StrikesRefused)
	}

	released := g.jobView().LeasesReleased
	// Past the limit the relay is quarantined: its leases go back, it
	// gets no more, it leaves the public list, /metrics and the
	// operator's list say so; the operator lifts it.
	for i := 0; !relayAdmin(t, g, "r1").Quarantined; i++ {
		if i > 40 {
			t.Fatal("a relay sending forged aggregates was never quarantined")
		}
		a := credited(aggregateOf("r1-q-"+strings.Repeat("x", i+1), "r1", g.job.ID, r, r.Leases[next:next+1], n), honest)
		a.Credits[0].Examples = -1
		publish(a)
		time.Sleep(50 * time.Millisecond)
	}
	var lr relaymsg.LeaseReply
	relay.request(relaymsg.ControlSubject("r1", relaymsg.OpLease), relaymsg.LeaseRequest{Relay: "r1", Job: g.job.ID, Want: 1}, &lr)
	if !strings.Contains(lr.Error, "quarantined") || len(lr.Leases) != 0 {
		t.Fatalf("a quarantined relay's lease request: %+v", lr)
	}
	for _, v := range g.srv.Relays() {
		if v.Name == "r1" {
			t.Fatal("a quarantined relay is in the public list")
		}
	}
	metrics := getMetrics(t, g)
	for _, want := range []string{`crowdtrain_relay_quarantined{relay="r1"} 1`, `crowdtrain_relay_aggregates_total{relay="r1",verdict="applied"} 3`,
		`crowdtrain_relay_strikes_refused_total{relay="r1"} 2`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(metrics, `crowdtrain_relay_aggregates_total{relay="r1",verdict="forged"}`) {
		t.Error("/metrics lacks the forged count")
	}
	held := int64(len(r.Leases) - next)
	waitUntil(t, "the quarantined relay's leases requeued", func() bool { return g.jobView().LeasesReleased >= released+held })
	if code := g.adminJSON(http.MethodDelete, "/api/v1/relays/r1/quarantine", nil, nil); code != http.StatusOK {
		t.Fatalf("lifting the quarantine: %d", code)
	}
	if r2 := relay.lease(g.job.ID, 1); len(r2.Leases) != 1 {
		t.Fatalf("after the quarantine was lifted: %+v", r2)
	}

	// The honest local worker trained on all along, never struck.
	v1 := g.jobView()
	waitUntil(t, "the local worker keeps training", func() bool { return g.jobView().Version > v1.Version+3 })
	if s := g.standing()[local]; s.Strikes != 0 || s.Banned {
		t.Fatalf("the honest local worker's standing: %+v", s)
	}
}

// relayAdmin is the operator's view of a relay.
func relayAdmin(t *testing.T, g *testGrid, name string) coordinator.RelayAdminView {
	t.Helper()
	for _, r := range g.srv.RelaysAdmin() {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("relay %s: no record at the root", name)
	return coordinator.RelayAdminView{}
}

func getMetrics(t *testing.T, g *testGrid) string {
	t.Helper()
	resp, err := http.Get(g.http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// The root's NATS connection lost and found again (the server restarted):
// the loss is logged and counted in /metrics, and relays are served again.
func TestRelayGateCountsDisconnects(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats")
	box, err := natsbox.Start(natsbox.Options{Listen: "127.0.0.1:0", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGridWith(t, jobSpec(t, "mnist-mlp", nil), nil)
	nc, err := nats.Connect(box.URL, nats.UserInfo(box.Root.User, box.Root.Password), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := g.srv.ServeRelays(context.Background(), nc, coordinator.RelayGateOptions{RootURL: g.http.URL, Credentials: box}); err != nil {
		t.Fatal(err)
	}
	c1 := relayCredential(t, box, "r1") // kept in dir across the restart
	box.Close()
	box2, err := natsbox.Start(natsbox.Options{Listen: strings.TrimPrefix(box.URL, "nats://"), Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(box2.Close)
	waitUntil(t, "the root reconnected", nc.IsConnected)
	if m := getMetrics(t, g); !strings.Contains(m, "crowdtrain_relay_nats_disconnects_total 1") {
		t.Errorf("/metrics does not count the disconnect")
	}
	// The relay's credential survived the restart; a new connection is
	// served (the root's subscriptions came back with it).
	r1 := fakeRelayWith(t, box2, "r1", c1)
	if j := r1.join(); len(j.Jobs) != 1 {
		t.Fatalf("join after the server's restart: %+v", j)
	}
}
