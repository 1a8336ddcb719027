package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/natsbox"
	"github.com/crowdtrain/crowdtrain/internal/testcert"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// relayGrid is a root with an embedded NATS server, its relays and
// workers, each a process of its own.
type relayGrid struct {
	t                  *testing.T
	dir, spec          string
	rootAddr, natsAddr string
	root               *proc
	rootArgs           []string
	relays             map[string]*proc
	relayAddrs         map[string]string
	relayArgs          []string // more flags for each relay
}

// relaySpec trains mnist-mlp in diloco, whose rounds a relay answers with
// one aggregate each; a short lease_timeout closes a round that lost a
// relay within seconds; max_epochs leaves room for the short rounds a
// loaded machine makes (it reaches 97% in about 3 epochs).
const relaySpec = "name: relayed\nmodel: mnist-mlp\nmode: diloco\nlocal_steps: 16\nround_size: 4\neval_every: 200\nlease_timeout: 8s\nmax_epochs: 30\n"

func newRelayGrid(t *testing.T, rootArgs []string, relays ...string) *relayGrid {
	return newRelayGridSpec(t, relaySpec, rootArgs, relays...)
}

// newRelayGridSpec is newRelayGrid for the job spec given.
func newRelayGridSpec(t *testing.T, spec string, rootArgs []string, relays ...string) *relayGrid {
	testenv.Long(t, "trains MNIST across processes")
	g := &relayGrid{t: t, dir: t.TempDir(), rootAddr: freeAddr(t), natsAddr: freeAddr(t),
		relays: map[string]*proc{}, relayAddrs: map[string]string{}, rootArgs: rootArgs}
	g.spec = filepath.Join(g.dir, "job.yaml")
	if err := os.WriteFile(g.spec, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	g.startRoot()
	for _, name := range relays {
		g.relayAddrs[name] = freeAddr(t)
		g.startRelay(name)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for name, p := range g.relays {
				t.Logf("relay %s's log, the end:\n%s", name, tail(p.logText(), 40))
			}
		}
	})
	return g
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (g *relayGrid) startRoot() {
	args := append([]string{"serve", "--addr", g.rootAddr, "--db", filepath.Join(g.dir, "root.db"), "--job", g.spec,
		"--nats-listen", g.natsAddr, "--admin-token", modesAdminToken, "--progress", "2s"}, g.rootArgs...)
	g.root = startProc(g.t, args...)
	g.root.waitLine("coordinator listening", time.Minute)
}

func (g *relayGrid) startRelay(name string) {
	creds := filepath.Join(g.dir, name+".creds")
	if _, err := os.Stat(creds); err != nil {
		// The operator issues each relay its own credential.
		issue := startProc(g.t, "relay-credential", name, "--out", creds, "--url", "ws://"+g.relayAddrs[name]+"/ws",
			"--coordinator", "http://"+g.rootAddr, "--token", modesAdminToken)
		if err := issue.waitExit(time.Minute); err != nil {
			g.t.Fatalf("relay-credential %s: %v\n%s", name, err, issue.logText())
		}
	}
	p := startProc(g.t, append([]string{"relay", "--upstream", "nats://" + g.natsAddr, "--creds", creds, "--addr", g.relayAddrs[name]}, g.relayArgs...)...)
	p.waitLine("listening on", time.Minute)
	g.relays[name] = p
}

// addWorker starts a worker that tries the relays in the order given.
func (g *relayGrid) addWorker(order ...string) *proc {
	var list string
	for i, name := range order {
		if i > 0 {
			list += ","
		}
		list += "ws://" + g.relayAddrs[name] + "/ws"
	}
	return startProc(g.t, "work", "--coordinator", list, "--key-file", "")
}

func (g *relayGrid) relaysView() map[string]coordinator.RelayView {
	resp, err := http.Get("http://" + g.rootAddr + "/api/v1/relays")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body struct {
		Relays []coordinator.RelayView `json:"relays"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return nil
	}
	out := map[string]coordinator.RelayView{}
	for _, r := range body.Relays {
		out[r.Name] = r
	}
	return out
}

func (g *relayGrid) waitRelays(what string, timeout time.Duration, cond func(map[string]coordinator.RelayView) bool) map[string]coordinator.RelayView {
	g.t.Helper()
	deadline := time.Now().Add(timeout)
	var last map[string]coordinator.RelayView
	for time.Now().Before(deadline) {
		if last = g.relaysView(); last != nil && cond(last) {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
	g.t.Fatalf("relays: %s: not within %v: %+v\nroot log:\n%s", what, timeout, last, g.root.logText())
	return nil
}

// epochsCountedOnce checks that every epoch the root completed counted
// each of MNIST's 60,000 examples once.
func epochsCountedOnce(t *testing.T, log string) int {
	t.Helper()
	n := 0
	for _, m := range regexp.MustCompile(`epoch (\d+) complete: (\d+) examples`).FindAllStringSubmatch(log, -1) {
		if ex, _ := strconv.Atoi(m[2]); ex != 60000 {
			t.Errorf("epoch %s counted %d examples, want 60000", m[1], ex)
		}
		n++
	}
	return n
}

func waitDone97(t *testing.T, addr string, timeout time.Duration) coordinator.JobView {
	t.Helper()
	v := waitJob(t, addr, timeout, "the job to end", func(v coordinator.JobView) bool {
		return v.State != coordinator.StateRunning && v.State != coordinator.StateFinishing
	})
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.97 {
		t.Fatalf("job ended %s (%s), eval %+v; want done at >= 0.97", v.State, v.Reason, v.Eval)
	}
	return v
}

// A root and two relays train mnist-mlp to 97% with the workers split
// across the relays; the root hears one aggregate per relay per round,
// never each worker's result.
func TestRelaysTrainMNIST(t *testing.T) {
	g := newRelayGrid(t, nil, "ra", "rb")
	g.addWorker("ra", "rb")
	g.addWorker("ra", "rb")
	g.addWorker("rb", "ra")
	g.addWorker("rb", "ra")
	g.waitRelays("two workers on each relay", time.Minute, func(m map[string]coordinator.RelayView) bool {
		return m["ra"].Workers == 2 && m["rb"].Workers == 2
	})
	v := waitDone97(t, g.rootAddr, 4*time.Minute)
	m := g.relaysView()
	for _, name := range []string{"ra", "rb"} {
		r := m[name]
		if r.AggregatesApplied == 0 || r.MaxAggregatesPerRound != 1 || r.AggregatesRefused > 2 {
			t.Errorf("relay %s: %+v; want aggregates applied, at most one per round, no more refused than the last round's", name, r)
		}
	}
	if got := m["ra"].AggregatesApplied + m["rb"].AggregatesApplied; got > 2*v.Version || v.UpdatesApplied < 2*got {
		t.Errorf("%d aggregates for %d rounds and %d worker results: want at most one per relay per round, each of several results", got, v.Version, v.UpdatesApplied)
	}
	if v.Workers != 0 {
		t.Errorf("the root counts %d workers of its own; all are behind relays", v.Workers)
	}
	epochsCountedOnce(t, g.root.logText())
	up := m["ra"].UpstreamBytes + m["rb"].UpstreamBytes
	direct := v.UpdatesApplied * int64(v.NumParams) * 4
	t.Logf("done at version %d, accuracy %.4f: %d worker results in %d aggregates; the root took %.1f MB from its relays, %.1f MB as results sent to it directly (%.1fx)",
		v.Version, v.Eval.Accuracy, v.UpdatesApplied, m["ra"].AggregatesApplied+m["rb"].AggregatesApplied, float64(up)/1e6, float64(direct)/1e6, float64(direct)/float64(up))
}

// A relay killed mid-run: its workers move to the other relay and the
// job finishes, every epoch counting each example once.
func TestRelayKilledWorkersMove(t *testing.T) {
	g := newRelayGrid(t, nil, "ra", "rb")
	for range 2 {
		g.addWorker("ra", "rb")
	}
	g.addWorker("rb", "ra")
	g.waitRelays("ra applying aggregates", time.Minute, func(m map[string]coordinator.RelayView) bool {
		return m["ra"].AggregatesApplied >= 3 && m["rb"].Workers == 1
	})
	g.relays["ra"].kill()
	g.waitRelays("ra's workers on rb", time.Minute, func(m map[string]coordinator.RelayView) bool {
		_, listed := m["ra"]
		return m["rb"].Workers == 3 && (!listed || m["ra"].Workers == 2) // ra is listed until it is lost
	})
	v := waitDone97(t, g.rootAddr, 4*time.Minute)
	epochsCountedOnce(t, g.root.logText())
	t.Logf("done at version %d, accuracy %.4f", v.Version, v.Eval.Accuracy)
}

// The root killed mid-run and started again: the relays and workers
// reconnect by themselves, what JetStream holds unacknowledged comes
// again, no aggregate is applied twice, and the job finishes.
func TestRootRestartWithRelays(t *testing.T) {
	g := newRelayGrid(t, []string{"-v"}, "ra", "rb") // -v logs each aggregate applied
	g.addWorker("ra", "rb")
	g.addWorker("rb", "ra")
	g.waitRelays("aggregates applied", time.Minute, func(m map[string]coordinator.RelayView) bool {
		return m["ra"].AggregatesApplied >= 4 && m["rb"].AggregatesApplied >= 4
	})
	g.root.kill()
	first := g.root.logText()
	g.startRoot()
	if !strings.Contains(g.root.logText(), "resumed at version") {
		t.Fatalf("the root did not resume its job:\n%s", g.root.logText())
	}
	v := waitDone97(t, g.rootAddr, 2*time.Minute)
	if v.Run != 2 {
		t.Fatalf("run %d after one restart", v.Run)
	}
	second := g.root.logText()
	// Within a run an aggregate id is applied once at most: a second
	// delivery is logged as a duplicate and not applied.
	applied := regexp.MustCompile(`aggregate (\S+) of relay \S+ for job \S+ applied`)
	for _, log := range []string{first, second} {
		seen := map[string]bool{}
		for _, m := range applied.FindAllStringSubmatch(log, -1) {
			if seen[m[1]] {
				t.Errorf("aggregate %s applied twice in one run", m[1])
			}
			seen[m[1]] = true
		}
	}
	epochsCountedOnce(t, first+"\n"+second)
	t.Logf("done at version %d (run 2), accuracy %.4f; relays %+v", v.Version, v.Eval.Accuracy, g.relaysView())
}

// The operator revokes a relay with relay-credential --revoke: NATS cuts
// it off at once, the root forgets it and queues its leases again, the
// job goes on through the other relay, and the revoked credential no
// longer connects.
func TestRelayCredentialRevoked(t *testing.T) {
	// No target: the job runs until the test is done.
	g := newRelayGridSpec(t, strings.Replace(relaySpec, "max_epochs: 30", "max_epochs: 30\ntarget_accuracy: 0", 1), nil, "ra", "rb")
	wa := g.addWorker("ra")
	g.addWorker("rb")
	g.waitRelays("aggregates of both applied", 2*time.Minute, func(m map[string]coordinator.RelayView) bool {
		return m["ra"].AggregatesApplied >= 2 && m["rb"].AggregatesApplied >= 2
	})
	// ra's worker stands still, so ra keeps the leases it holds: the
	// revocation has some to queue again whenever it comes.
	if err := wa.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for g.relayLeasesHeld("ra") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("relay ra holds no lease of the root's a minute after its worker stopped")
		}
		time.Sleep(100 * time.Millisecond)
	}
	before := waitJob(t, g.rootAddr, time.Minute, "the job view", func(coordinator.JobView) bool { return true })
	revoke := startProc(t, "relay-credential", "--revoke", "ra", "--coordinator", "http://"+g.rootAddr, "--token", modesAdminToken)
	if err := revoke.waitExit(time.Minute); err != nil || !strings.Contains(revoke.logText(), "revoked") {
		t.Fatalf("relay-credential --revoke ra: %v\n%s", err, revoke.logText())
	}
	var requeued int64
	if m := regexp.MustCompile(`the (\d+) leases it held are queued again`).FindStringSubmatch(revoke.logText()); m != nil {
		requeued, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if requeued < 1 {
		t.Errorf("relay-credential --revoke ra: want the count of leases it held (at least 1) queued again; it said:\n%s", revoke.logText())
	}
	g.waitRelays("ra gone from the list", 5*time.Second, func(m map[string]coordinator.RelayView) bool { _, ok := m["ra"]; return !ok })
	if err := g.relays["ra"].waitExit(30 * time.Second); err == nil || !strings.Contains(strings.ToLower(g.relays["ra"].logText()), "authorization") {
		t.Errorf("the revoked relay: exit %v; want it to stop saying its credential was refused; log:\n%s", err, tail(g.relays["ra"].logText(), 10))
	}
	v := waitJob(t, g.rootAddr, time.Minute, "the job going on through rb", func(v coordinator.JobView) bool { return v.Version >= before.Version+3 })
	if !strings.Contains(g.root.logText(), "relay ra's credential was revoked") {
		t.Errorf("the root did not log the revocation")
	}
	if v.LeasesReleased < before.LeasesReleased+requeued {
		t.Errorf("ra's %d leases were not queued again: released %d before, %d after", requeued, before.LeasesReleased, v.LeasesReleased)
	}
	// Started again with the revoked credential, it cannot join.
	p := startProc(t, "relay", "--upstream", "nats://"+g.natsAddr, "--creds", filepath.Join(g.dir, "ra.creds"), "--addr", freeAddr(t))
	if err := p.waitExit(30 * time.Second); err == nil || !strings.Contains(strings.ToLower(p.logText()), "authorization") {
		t.Errorf("a relay started with a revoked credential: exit %v; log:\n%s", err, tail(p.logText(), 10))
	}
	if m := g.relaysView(); m["ra"].Name != "" {
		t.Fatalf("the revoked relay is listed again: %+v", m["ra"])
	}
}

// relayLeasesHeld is how many of the root's leases relay name holds now
// (GET /api/v1/relays/all).
func (g *relayGrid) relayLeasesHeld(name string) int {
	var body struct {
		Relays []coordinator.RelayAdminView `json:"relays"`
	}
	if code := adminCall(g.t, http.MethodGet, "http://"+g.rootAddr+"/api/v1/relays/all", nil, &body); code != http.StatusOK {
		g.t.Fatalf("GET /api/v1/relays/all: %d", code)
	}
	for _, r := range body.Relays {
		if r.Name == name {
			return r.LeasesHeld
		}
	}
	return 0
}

// serve --nats-tls-cert: the embedded NATS server takes TLS only; a relay
// given the certificate with --nats-ca trains through it, one without it
// cannot connect.
func TestRelaysOverTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.SelfSigned(t, dir)
	g := newRelayGridSpec(t, relaySpec, []string{"--nats-tls-cert", cert, "--nats-tls-key", key})
	g.relayArgs = []string{"--nats-ca", cert}
	g.relayAddrs["ra"] = freeAddr(t)
	g.startRelay("ra")
	g.addWorker("ra")
	g.waitRelays("aggregates over TLS", 2*time.Minute, func(m map[string]coordinator.RelayView) bool { return m["ra"].AggregatesApplied >= 3 })
	if !strings.Contains(g.root.logText(), "tls://") {
		t.Errorf("the root does not print its tls:// NATS URL:\n%s", tail(g.root.logText(), 20))
	}
	// Without the certificate: refused by TLS, the relay says so.
	p := startProc(t, "relay", "--upstream", "nats://"+g.natsAddr, "--creds", filepath.Join(g.dir, "ra.creds"), "--addr", freeAddr(t))
	p.waitLine("certificate", 30*time.Second)
	p.kill()
}

// serve --nats uses an external NATS server (one the test runs) with the
// root's credentials from --nats-creds; a worker given the root's http
// URL finds the relay through GET /api/v1/relays and trains through it.
func TestServeWithExternalNATS(t *testing.T) {
	testenv.Long(t, "runs processes")
	dir := t.TempDir()
	box, err := natsbox.Start(natsbox.Options{Listen: "127.0.0.1:0", Dir: filepath.Join(dir, "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	rootCreds, spec := filepath.Join(dir, "root.creds"), filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(rootCreds, []byte(box.Root.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte(relaySpec), 0o600); err != nil {
		t.Fatal(err)
	}
	rootAddr, relayAddr := freeAddr(t), freeAddr(t)
	root := startProc(t, "serve", "--addr", rootAddr, "--db", filepath.Join(dir, "root.db"), "--job", spec,
		"--nats", box.URL, "--nats-creds", rootCreds, "--admin-token", modesAdminToken)
	root.waitLine("coordinator listening", time.Minute)
	// The external server's operator issues the relay its user.
	text, err := box.IssueRelay("ext", "")
	if err != nil {
		t.Fatal(err)
	}
	relayCreds := filepath.Join(dir, "ext.creds")
	if err := os.WriteFile(relayCreds, text, 0o600); err != nil {
		t.Fatal(err)
	}
	startProc(t, "relay", "--upstream", box.URL, "--creds", relayCreds, "--addr", relayAddr).
		waitLine("listening on", time.Minute)
	g := &relayGrid{t: t, rootAddr: rootAddr, root: root}
	g.waitRelays("the relay listed", time.Minute, func(m map[string]coordinator.RelayView) bool { _, ok := m["ext"]; return ok })
	w := startProc(t, "work", "--coordinator", "http://"+rootAddr, "--key-file", "")
	w.waitLine("joining ws://"+relayAddr+"/ws", time.Minute)
	waitJob(t, rootAddr, 2*time.Minute, "rounds closed by the relay's aggregates", func(v coordinator.JobView) bool { return v.Version >= 3 })
	// The relay's counter is recorded just after the job applies the
	// aggregate, so it may trail the version for a moment.
	g.waitRelays("the relay's aggregates counted", 30*time.Second, func(m map[string]coordinator.RelayView) bool { return m["ext"].AggregatesApplied >= 3 })
}
