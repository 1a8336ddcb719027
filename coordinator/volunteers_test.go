package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/attack"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
	"github.com/crowdtrain/crowdtrain/worker"
)

// Volunteer keys of the tests: 22+ characters of base64url.
const (
	keyAlice   = "alice-key-0123456789abcdef"
	keyMallory = "mallory-key-0123456789abcdef"
)

// helloFrom dials from ip (any of 127.0.0.0/8) and says h; it returns the
// client and the coordinator's answer: a welcome, or an error before the
// close.
func (g *testGrid) helloFrom(ip string, h protocol.Hello) (*rawClient, protocol.Message) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, g.wsURL(), &websocket.DialOptions{HTTPClient: clientFrom(g.t.(*testing.T), ip)})
	if err != nil {
		g.t.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	g.t.Cleanup(func() { c.CloseNow() })
	rc := &rawClient{t: g.t, conn: c}
	h.Protocol, h.Kind, h.Backend, h.Threads, h.Client = protocol.Version, protocol.KindNative, "raw", 1, "raw test client"
	rc.send(&h)
	m := rc.read()
	if w, ok := m.(*protocol.Welcome); ok {
		rc.welcome = w
	}
	return rc, m
}

// refusedWith checks that m is an error of code whose message says each
// of want.
func refusedWith(t *testing.T, what string, m protocol.Message, code string, want ...string) {
	t.Helper()
	e, ok := m.(*protocol.Error)
	if !ok {
		t.Fatalf("%s: got %T %+v, want a %s error", what, m, m, code)
	}
	if e.Code != code {
		t.Fatalf("%s: error %s (%q), want %s", what, e.Code, e.Message, code)
	}
	for _, w := range want {
		if !strings.Contains(e.Message, w) {
			t.Fatalf("%s: message %q does not say %q", what, e.Message, w)
		}
	}
}

func welcomed(t *testing.T, what string, m protocol.Message) {
	t.Helper()
	if _, ok := m.(*protocol.Welcome); !ok {
		t.Fatalf("%s: got %T %+v, want a welcome", what, m, m)
	}
}

// adminJSON calls an admin route and decodes a 2xx answer into v.
func (g *testGrid) adminJSON(method, path string, body, v any) int {
	g.t.Helper()
	code, out := g.call(method, path, testAdminToken, body, nil)
	if v != nil && code/100 == 2 {
		if err := json.Unmarshal(out, v); err != nil {
			g.t.Fatalf("%s %s: %v: %s", method, path, err, out)
		}
	}
	return code
}

type standingList struct {
	Volunteers []coordinator.VolunteerView `json:"volunteers"`
}

func (g *testGrid) standing() map[string]coordinator.VolunteerView {
	g.t.Helper()
	var s standingList
	if code := g.adminJSON(http.MethodGet, "/api/v1/volunteers/standing", nil, &s); code != http.StatusOK {
		g.t.Fatalf("standing: %d", code)
	}
	out := map[string]coordinator.VolunteerView{}
	for _, v := range s.Volunteers {
		out[v.ID] = v
	}
	return out
}

// byName finds the volunteer named name in the standing.
func (g *testGrid) byName(name string) coordinator.VolunteerView {
	g.t.Helper()
	for _, v := range g.standing() {
		if v.Name == name {
			return v
		}
	}
	g.t.Fatalf("no volunteer named %q in the standing", name)
	return coordinator.VolunteerView{}
}

// In token mode a hello without a token, with a wrong one or with a
// revoked one is refused with a clear error, over a real websocket; an
// issued token works and makes a named volunteer; guesses are limited.
func TestJoinTokenMode(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.Join = coordinator.JoinToken; c.AuthFailBurst = 4 })
	var mode map[string]string
	if code, out := g.call(http.MethodGet, "/api/v1/join", "", nil, nil); code != http.StatusOK || json.Unmarshal(out, &mode) != nil || mode["mode"] != "token" {
		t.Fatalf("GET /api/v1/join: %d %s", code, out)
	}
	_, m := g.helloFrom("127.0.0.2", protocol.Hello{})
	refusedWith(t, "no token", m, "join_token", "join token", "--join-token", "operator")
	_, m = g.helloFrom("127.0.0.2", protocol.Hello{Token: "0123456789ab.not-the-secret"})
	refusedWith(t, "a wrong token", m, "join_token", "not one this coordinator issued")

	var tok coordinator.IssuedToken
	if code := g.adminJSON(http.MethodPost, "/api/v1/tokens", map[string]string{"name": "alice"}, &tok); code != http.StatusCreated {
		t.Fatalf("POST /api/v1/tokens: %d", code)
	}
	if tok.Name != "alice" || tok.ID == "" || !strings.HasPrefix(tok.Token, tok.ID+".") {
		t.Fatalf("issued token: %+v", tok)
	}
	rc, m := g.helloFrom("127.0.0.3", protocol.Hello{Token: tok.Token, Name: "Alice"})
	welcomed(t, "the issued token", m)
	if v := g.standing()["t-"+tok.ID]; v.TokenName != "alice" || v.Name != "Alice" || v.Connected != 1 {
		t.Fatalf("the token's volunteer: %+v", v)
	}
	var list struct {
		Tokens []coordinator.TokenView `json:"tokens"`
	}
	code, raw := g.call(http.MethodGet, "/api/v1/tokens", testAdminToken, nil, nil)
	if code != http.StatusOK || json.Unmarshal(raw, &list) != nil || len(list.Tokens) != 1 || list.Tokens[0].Revoked ||
		strings.Contains(string(raw), strings.TrimPrefix(tok.Token, tok.ID+".")) {
		t.Fatalf("GET /api/v1/tokens: %d %s (the secret must not be listed)", code, raw)
	}

	if code, _ := g.call(http.MethodDelete, "/api/v1/tokens/"+tok.ID, testAdminToken, nil, nil); code != http.StatusNoContent {
		t.Fatalf("DELETE token: %d", code)
	}
	if code, _ := g.call(http.MethodDelete, "/api/v1/tokens/nope", testAdminToken, nil, nil); code != http.StatusNotFound {
		t.Fatalf("DELETE an unknown token: %d, want 404", code)
	}
	_, m = g.helloFrom("127.0.0.3", protocol.Hello{Token: tok.Token})
	refusedWith(t, "a revoked token", m, "join_token", "revoked")
	rc.conn.CloseNow()

	// Guessing: the burst of 4 failures at 127.0.0.2 is spent by three
	// more wrong tokens (a missing token is no guess); then even a right
	// one is refused unchecked.
	var tok2 coordinator.IssuedToken
	g.adminJSON(http.MethodPost, "/api/v1/tokens", map[string]string{"name": "bob"}, &tok2)
	for range 3 {
		_, m = g.helloFrom("127.0.0.2", protocol.Hello{Token: tok2.ID + ".guess"})
		refusedWith(t, "a guess", m, "join_token", "not one this coordinator issued")
	}
	_, m = g.helloFrom("127.0.0.2", protocol.Hello{Token: tok2.Token})
	refusedWith(t, "the right token after too many guesses", m, "join_token", "too many wrong join tokens")
	_, m = g.helloFrom("127.0.0.4", protocol.Hello{Token: tok2.Token})
	welcomed(t, "the right token from another address", m)
}

// The attack tool joins a token grid with an issued token, as an operator
// testing their own grid would, and stops with the coordinator's message
// when it has none.
func TestAttackOnATokenGrid(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.Join = coordinator.JoinToken })
	ctx, cancel := context.WithTimeout(g.ctx, 20*time.Second)
	defer cancel()
	_, err := attack.Run(ctx, attack.Config{Coordinator: g.wsURL(), Kind: attack.NaN, Bind: "127.0.0.2"})
	if !errors.Is(err, attack.ErrRefused) || !strings.Contains(err.Error(), "--join-token") {
		t.Fatalf("an attack without a token: %v, want it refused, pointing to --join-token", err)
	}
	var tok coordinator.IssuedToken
	if code := g.adminJSON(http.MethodPost, "/api/v1/tokens", map[string]string{"name": "red-team"}, &tok); code != http.StatusCreated {
		t.Fatalf("POST /api/v1/tokens: %d", code)
	}
	actx, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	r, err := attack.Run(actx, attack.Config{Coordinator: g.wsURL(), Kind: attack.NaN, N: 2, Bind: "127.0.0.2", JoinToken: tok.Token})
	if err != nil {
		t.Fatalf("an attack with an issued token: %v", err)
	}
	if r.Connections < 2 || r.Totals().Sent == 0 {
		t.Fatalf("with the token: %d connections, %d results sent; want both attackers in and sending", r.Connections, r.Totals().Sent)
	}
	if v := g.standing()["t-"+tok.ID]; v.TokenName != "red-team" {
		t.Fatalf("the token's volunteer: %+v, want the attackers counted under the issued token", v)
	}
}

// The token routes and the standing are the operator's; bad bodies get a
// 400 that says what was wrong.
func TestVolunteerAdminRoutes(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.AuthFailBurst = 1000 })
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/api/v1/volunteers/standing"}, {http.MethodPost, "/api/v1/volunteers/k-1/ban"},
		{http.MethodPost, "/api/v1/volunteers/k-1/pardon"}, {http.MethodPost, "/api/v1/tokens"},
		{http.MethodGet, "/api/v1/tokens"}, {http.MethodDelete, "/api/v1/tokens/x"},
	} {
		for _, token := range []string{"", "wrong-token-wrong-token"} {
			if code, _ := g.call(r.method, r.path, token, map[string]string{}, nil); code != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q: %d, want 401", r.method, r.path, token, code)
			}
		}
	}
	for _, c := range []struct {
		path string
		body any
		code int
		says string
	}{
		{"/api/v1/tokens", map[string]string{"name": ""}, 400, "empty"},
		{"/api/v1/tokens", map[string]string{"name": "a\nb"}, 400, "control"},
		{"/api/v1/tokens", map[string]string{"name": strings.Repeat("x", 65)}, 400, "at most 64"},
		{"/api/v1/tokens", map[string]any{"name": 7}, 400, "JSON"},
		{"/api/v1/tokens", map[string]string{"nom": "x"}, 400, "unknown field"},
		{"/api/v1/tokens", map[string]string{"name": strings.Repeat("x", 5000)}, 413, "at most 4096 bytes"},
		{"/api/v1/volunteers/k-nobody/ban", map[string]string{"reason": "x"}, 404, "no such volunteer"},
		{"/api/v1/volunteers/k-nobody/pardon", nil, 404, "no such volunteer"},
	} {
		code, out := g.call(http.MethodPost, c.path, testAdminToken, c.body, nil)
		if code != c.code || !strings.Contains(string(out), c.says) {
			t.Errorf("POST %s %v: %d %s, want %d saying %q", c.path, c.body, code, out, c.code, c.says)
		}
	}
	// A reason is checked as a name is.
	_, m := g.helloFrom("127.0.0.2", protocol.Hello{VolunteerKey: keyMallory, Name: "mallory"})
	welcomed(t, "mallory", m)
	id := g.byName("mallory").ID
	if code, out := g.call(http.MethodPost, "/api/v1/volunteers/"+id+"/ban", testAdminToken, map[string]string{"reason": "x\r\nFORGED"}, nil); code != 400 || !strings.Contains(string(out), "control") {
		t.Errorf("a ban reason with a newline: %d %s, want 400", code, out)
	}
}

// A ban closes the volunteer's connections at once, refuses its later
// hellos (by key from anywhere, and anyone from its addresses) with the
// reason, and a pardon lifts both. The public list shows names and
// credit only.
func TestBanClosesRefusesAndPardons(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), nil)
	mallory, m := g.helloFrom("127.0.0.2", protocol.Hello{VolunteerKey: keyMallory, Name: "mallory"})
	welcomed(t, "mallory", m)
	mallory.leases(1)
	_, m = g.helloFrom("127.0.0.3", protocol.Hello{VolunteerKey: keyAlice, Name: "alice"})
	welcomed(t, "alice", m)
	v := g.byName("mallory")
	if v.Connected != 1 || len(v.Addresses) != 1 || v.Addresses[0] != "127.0.0.2" || v.Banned {
		t.Fatalf("mallory's standing: %+v", v)
	}
	var banned coordinator.VolunteerView
	if code := g.adminJSON(http.MethodPost, "/api/v1/volunteers/"+v.ID+"/ban", map[string]string{"reason": "forged results"}, &banned); code != http.StatusOK {
		t.Fatalf("ban: %d", code)
	}
	if !banned.Banned || banned.BanReason != "forged results" {
		t.Fatalf("the ban's answer: %+v", banned)
	}
	if st := mallory.closeStatus(); st != websocket.StatusPolicyViolation {
		t.Fatalf("mallory's connection closed with %v, want policy violation", st)
	}
	// Its lease went back to the queue with the connection.
	g.waitFor("the banned volunteer's lease to be released", 10*time.Second, func(jv coordinator.JobView) bool { return jv.LeasesHeld == 0 })

	_, m = g.helloFrom("127.0.0.4", protocol.Hello{VolunteerKey: keyMallory})
	refusedWith(t, "the banned key from elsewhere", m, "banned", "forged results")
	_, m = g.helloFrom("127.0.0.2", protocol.Hello{VolunteerKey: "a-fresh-key-0123456789abcdef"})
	refusedWith(t, "a fresh key from the banned address", m, "banned", "address", "forged results")
	_, m = g.helloFrom("127.0.0.2", protocol.Hello{})
	refusedWith(t, "no key from the banned address", m, "banned")
	_, m = g.helloFrom("127.0.0.5", protocol.Hello{})
	welcomed(t, "someone else", m)

	var board struct {
		Volunteers []map[string]any `json:"volunteers"`
	}
	code, raw := g.call(http.MethodGet, "/api/v1/volunteers", "", nil, nil)
	if code != http.StatusOK || json.Unmarshal(raw, &board) != nil {
		t.Fatalf("GET /api/v1/volunteers: %d %s", code, raw)
	}
	for _, leak := range []string{v.ID, "127.0.0", "strikes", keyAlice, "k-"} {
		if strings.Contains(string(raw), leak) {
			t.Fatalf("the public list shows %q: %s", leak, raw)
		}
	}

	var pardoned coordinator.VolunteerView
	if code := g.adminJSON(http.MethodPost, "/api/v1/volunteers/"+v.ID+"/pardon", nil, &pardoned); code != http.StatusOK || pardoned.Banned {
		t.Fatalf("pardon: %d %+v", code, pardoned)
	}
	_, m = g.helloFrom("127.0.0.2", protocol.Hello{VolunteerKey: keyMallory})
	welcomed(t, "mallory after the pardon", m)
}

// A ban outlives a coordinator restart on the same SQLite file, and so
// does credit.
func TestBanSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ct.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	spec := quietJob(t)
	g := newStoredGrid(t, db, &spec)
	_, m := g.helloFrom("127.0.0.2", protocol.Hello{VolunteerKey: keyMallory, Name: "mallory"})
	welcomed(t, "mallory", m)
	id := g.byName("mallory").ID
	if code := g.adminJSON(http.MethodPost, "/api/v1/volunteers/"+id+"/ban", map[string]string{"reason": "three strikes"}, nil); code != http.StatusOK {
		t.Fatalf("ban: %d", code)
	}
	g.close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g = newStoredGrid(t, db, nil)
	_, m = g.helloFrom("127.0.0.3", protocol.Hello{VolunteerKey: keyMallory})
	refusedWith(t, "the banned key after a restart", m, "banned", "three strikes")
	_, m = g.helloFrom("127.0.0.2", protocol.Hello{})
	refusedWith(t, "the banned address after a restart", m, "banned", "three strikes")
	if v := g.standing()[id]; !v.Banned || v.Name != "mallory" {
		t.Fatalf("mallory after the restart: %+v", v)
	}
}

// After a short real run with native workers, each volunteer's credit is
// the examples of its accepted results, and its FLOPs those examples
// times the model's FLOPs per example.
func TestCreditEqualsAcceptedExamples(t *testing.T) {
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy, s.EvalEvery = 1, 1_000_000
		s.SpotCheck = 0 // a spot check's agreeing copy earns credit too, outside examples_seen
	})
	if l := spec.Model.Layers; len(l) != 5 || l[0].Units != 256 || l[2].Units != 128 || l[4].Units != 10 {
		t.Fatalf("the mnist-mlp preset changed: %+v; update the hand count below", l)
	}
	perExample := 6.0 * (784*256 + 256*128 + 128*10)
	g := newTestGrid(t, spec)
	workers := map[string]*worker.Worker{}
	for name, key := range map[string]string{"alice": keyAlice, "bob": keyMallory} {
		workers[name] = g.addWorkerWith(1, nil, func(c *worker.Config) { c.VolunteerKey, c.Name = key, name })
	}
	g.waitFor("a few thousand examples", 3*time.Minute, func(v coordinator.JobView) bool { return v.ExamplesSeen >= 3000 })
	if code, _ := g.call(http.MethodPost, "/api/v1/jobs/"+g.job.ID+"/stop", testAdminToken, nil, nil); code != http.StatusOK {
		t.Fatalf("stop: %d", code)
	}
	jv := g.waitDone(time.Minute)
	var views []coordinator.WorkerView
	if code := g.getJSON("/api/v1/workers", &views); code != http.StatusOK {
		t.Fatalf("workers: %d", code)
	}
	accepted := map[string]int64{}
	for _, wv := range views {
		accepted[wv.ID] = wv.Examples
	}
	total := int64(0)
	for name, w := range workers {
		v := g.byName(name)
		want := accepted[w.Stats().WorkerID]
		if want == 0 || v.Examples != want || v.FLOPs != float64(want)*perExample {
			t.Errorf("%s: credit %d examples, %v FLOPs; its connection's accepted examples %d (x %v FLOPs each)", name, v.Examples, v.FLOPs, want, perExample)
		}
		total += v.Examples
	}
	// A result validation refused and the coordinator's recomputation
	// vindicated is credited, not trained on.
	if total != jv.ExamplesSeen+jv.Rechecks.VindicatedExamples {
		t.Errorf("credit totals %d examples, the job saw %d and credited %d it did not apply (validation_rechecks %+v)",
			total, jv.ExamplesSeen, jv.Rechecks.VindicatedExamples, jv.Rechecks)
	}
}
