package coordinator_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// honestResult computes lease l as a native worker would: its shard and
// snapshot over HTTP, two threads on the process's fastest kernel (not the
// coordinator's pinned one, so the comparison is within tolerance).
func (g *testGrid) honestResult(m *nn.Model, l protocol.Lease) *protocol.Result {
	g.t.Helper()
	get := func(ref string) []byte {
		resp, err := http.Get(g.http.URL + ref)
		if err != nil {
			g.t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			g.t.Fatalf("GET %s: %d %v", ref, resp.StatusCode, err)
		}
		return b
	}
	shard, err := dataset.DecodeShard(get(l.ShardURL), 1<<20)
	if err != nil {
		g.t.Fatal(err)
	}
	params := make([]float32, m.NumParams)
	if err := protocol.DecodeFloatsInto(params, get(l.SnapshotURL)); err != nil {
		g.t.Fatal(err)
	}
	x, labels := make([]float32, l.Count*m.InputSize), make([]int32, l.Count*m.LabelsPerExample)
	shard.Fill(x, labels, l.Start, l.Count)
	b, err := cpu.New(2)
	if err != nil {
		g.t.Fatal(err)
	}
	res, err := compute.Lease(b, m, l, params, x, labels)
	if err != nil {
		g.t.Fatal(err)
	}
	res.ComputeMs = 1
	return res
}

// A disagreement is decided by the coordinator, which recomputes the
// task itself and strikes the one that lied. First the liar's applied
// primary is refuted (the honest copy that disagreed with it is
// vindicated), then a second liar's copy of an honest
// primary is struck while the honest volunteer keeps its credit and its
// record clean. The job view and /metrics count the
// recomputations.
func TestCoordinatorDecidesADisputeWithoutAThirdVolunteer(t *testing.T) {
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy, s.EvalEvery = 1, 1_000_000
		s.SpotCheck = 1 // every result of a newcomer is checked
		s.Robust.Method = "none"
	})
	m, err := nn.NewModel(spec.Model)
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGrid(t, spec)
	const honestKey, liarKey, liar2Key = "referee-honest-key-aaaaaaaa", "referee-liar-key-bbbbbbbbbbb", "referee-liar-key-cccccccccccc"
	honest, liar := g.joinRawKey(honestKey), g.joinRawKey(liarKey)
	n := m.NumParams
	hid, lid, l2id := coordinator.VolunteerIDOfKey(honestKey), coordinator.VolunteerIDOfKey(liarKey), coordinator.VolunteerIDOfKey(liar2Key)

	// The liar's primary is applied, then checked by the honest volunteer.
	p := liar.leases(1)[0]
	liar.send(spotResult(p, n, -2e-3))
	if ack := liar.ack(p.ID); !ack.Accepted {
		t.Fatalf("the lie: %+v; want it applied (the check comes later)", ack)
	}
	cp := honest.grantedLeases(1)[0]
	if cp.CopyOf != p.ID {
		t.Fatalf("the honest volunteer's lease %+v, want the copy of %d", cp, p.ID)
	}
	honest.send(g.honestResult(m, cp))
	if ack := honest.ack(cp.ID); !ack.Accepted || !strings.Contains(ack.Detail, "coordinator") {
		t.Fatalf("the honest copy: %+v, want accepted, saying the coordinator decides", ack)
	}
	v := g.waitFor("the coordinator's recomputation", 20*time.Second, func(v coordinator.JobView) bool { return v.SpotChecks.Recomputed == 1 })
	if sc := v.SpotChecks; sc.Strikes != 1 || sc.Refuted != 1 || sc.RefutedExamples != int64(p.Count) || sc.Pending != 0 || sc.Expired != 0 || sc.RecomputeSeconds <= 0 {
		t.Fatalf("spot checks %+v: want the liar struck and its result refuted by one recomputation", *sc)
	}
	book := g.standing()
	if l := book[lid]; l.Strikes != 1 || l.Examples != 0 {
		t.Fatalf("the liar: %+v, want one strike and its credit taken back", l)
	}
	if h := book[hid]; h.Strikes != 0 {
		t.Fatalf("the honest volunteer: %+v, want no strike", h)
	}
	if _, ok := book[engine.Referee]; ok {
		t.Fatal("the coordinator appears in the ledger")
	}

	// A second liar copies the honest volunteer's primary and lies: the
	// coordinator decides again.
	liar2 := g.joinRawKey(liar2Key)
	p2 := honest.leases(1)[0]
	if p2.CopyOf != 0 {
		t.Fatalf("the honest volunteer's lease %+v, want a primary", p2)
	}
	honest.send(g.honestResult(m, p2))
	if ack := honest.ack(p2.ID); !ack.Accepted {
		t.Fatalf("the honest primary: %+v", ack)
	}
	cp2 := liar2.grantedLeases(1)[0]
	if cp2.CopyOf != p2.ID {
		t.Fatalf("the second liar's lease %+v, want the copy of %d", cp2, p2.ID)
	}
	liar2.send(spotResult(cp2, n, 3e-3))
	if ack := liar2.ack(cp2.ID); !ack.Accepted {
		t.Fatalf("the lying copy: %+v, want accepted until the coordinator decides", ack)
	}
	v = g.waitFor("the second recomputation", 20*time.Second, func(v coordinator.JobView) bool { return v.SpotChecks.Recomputed == 2 })
	if sc := v.SpotChecks; sc.Strikes != 2 || sc.Refuted != 2 || sc.Checked != 2 || sc.Undecided != 0 {
		t.Fatalf("spot checks %+v: want the copy struck and its credit taken back, the honest primary kept", *sc)
	}
	book = g.standing()
	if l := book[l2id]; l.Strikes != 1 || l.Examples != 0 {
		t.Fatalf("the second liar: %+v, want one strike, no credit", l)
	}
	if h := book[hid]; h.Strikes != 0 || h.Examples != int64(cp.Count+p2.Count) {
		t.Fatalf("the honest volunteer: %+v, want no strike and credit for its copy's and its primary's %d examples", h, cp.Count+p2.Count)
	}
	code, body := g.call(http.MethodGet, "/metrics", "", nil, nil)
	for _, want := range []string{
		fmt.Sprintf(`crowdtrain_spot_recomputes_total{job=%q,outcome="decided"} 2`, g.job.ID),
		fmt.Sprintf(`crowdtrain_spot_recomputes_total{job=%q,outcome="dropped"} 0`, g.job.ID),
		fmt.Sprintf(`crowdtrain_spot_recompute_seconds_total{job=%q}`, g.job.ID),
	} {
		if code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
}
