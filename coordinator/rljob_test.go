package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/nn/nntest"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rl"
	"github.com/crowdtrain/crowdtrain/rljob"
)

// What the coordinator cannot run of a valid RL spec is refused over the
// API with a 400 naming the key, and no job is created: a jsonl task
// whose file is not there, a policy that is no job here; and prompts with
// no room for an answer are an error on task.
func TestRLJobRefusals(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.LoadData = dataset.Load })
	jobs := func() int {
		vs, err := g.srv.JobViews(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(vs)
	}
	before := jobs()
	for _, c := range []struct{ spec, key, msg string }{
		{"name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: {job: " + g.job.ID + "}\ntask: {type: jsonl, path: nosuch.jsonl}\n", "task.path", "does not exist"},
		{"name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: {job: nosuch}\ntask: {type: add, digits: 1}\n", "policy.job", "no job \"nosuch\""},
	} {
		code, _, key, msg := g.submit(c.spec)
		if code != http.StatusBadRequest || key != c.key || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %d, key %q, %q; want 400 on %s mentioning %q", strings.ReplaceAll(c.spec, "\n", "; "), code, key, msg, c.key, c.msg)
		}
	}
	// Prompts with no room for an answer, counted in the policy's tokens.
	policy := nntest.RandomSafetensors(t, t.TempDir(), "charlm-tiny", 3)
	spec, err := jobspec.Parse([]byte(fmt.Sprintf("name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: %q\ntask: {type: reverse, length: 40}\n", policy)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.srv.AddJob(spec)
	var se *jobspec.Error
	if !errors.As(err, &se) || se.Key != "task" || !strings.Contains(se.Problem, "no room for an answer") {
		t.Errorf("reverse of length 40 in a context of 32: %v; want an error on task saying there is no room for an answer", err)
	}
	if n := jobs(); n != before {
		t.Errorf("%d jobs after the refusals, want %d", n, before)
	}
}

// A jsonl task (`task: {type: jsonl, path: F}`): rollout leases carry the
// file's prompts, the coordinator scores completions against the file's
// answers, and its evaluation reads the file's problems as text. A file
// with a prompt that leaves no room for an answer in the model's context
// is refused at submission, naming the problem.
func TestRLJobOnAJSONLTask(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.LoadData = dataset.Load })
	dir := t.TempDir()
	answers := map[string]string{"one plus one?": "2", "three plus four?": "7", "five plus four?": "9", "zero plus zero?": "0"}
	var lines []string
	for p, a := range answers {
		lines = append(lines, fmt.Sprintf(`{"prompt": %q, "answer": %q}`, p, a))
	}
	path := filepath.Join(dir, "sums.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := nntest.RandomSafetensors(t, dir, "charlm-tiny", 3)
	specOf := func(task string) jobspec.Spec {
		spec, err := jobspec.Parse([]byte(fmt.Sprintf("name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: %q\ntask: {type: jsonl, path: %q}\ngroup_size: 4\nmax_new_tokens: 3\nspot_check: 0\n", policy, task)))
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	j, err := g.srv.AddJob(specOf(path))
	if err != nil {
		t.Fatal(err)
	}
	rc := joinRL(g, protocol.KindNative, true, j.ID)
	solved := int64(0)
	for range 3 {
		l := rc.grantedLeases(1)[0]
		if l.Rollout == nil {
			t.Fatalf("lease %+v; want a rollout lease", l)
		}
		prompt := strings.TrimPrefix(rljob.Text(l.Rollout.Prompt), "\n")
		answer, ok := answers[prompt]
		if !ok {
			t.Fatalf("rollout lease of prompt %q, which the file does not hold", prompt)
		}
		rc.send(rollouts(l, answer+"\n", "x", answer+"\n", "?\n"))
		if a := rc.ack(l.ID); !a.Accepted {
			t.Fatalf("rollouts of %q: ack %+v", prompt, a)
		}
		solved += 2
	}
	v, _, _ := g.srv.JobView(context.Background(), j.ID)
	if v.RL == nil || v.RL.Rollouts != 12 || v.RL.Solved != solved {
		t.Errorf("job view rl %+v; want 12 completions scored, %d solved", v.RL, solved)
	}

	long := filepath.Join(dir, "long.jsonl")
	os.WriteFile(long, []byte(lines[0]+"\n"+`{"prompt": "`+strings.Repeat("why? ", 100)+`", "answer": "no"}`+"\n"), 0o644)
	_, err = g.srv.AddJob(specOf(long))
	var se *jobspec.Error
	if !errors.As(err, &se) || se.Key != "task.path" || !strings.Contains(se.Problem, "problem 2's prompt") || !strings.Contains(se.Problem, "no room for an answer") {
		t.Errorf("a prompt longer than the context: %v; want an error on task.path naming problem 2", err)
	}
}

// rlGrid is a coordinator running an RL job on one-digit sums from a
// random charlm-tiny policy, beside the test grid's MNIST job; extra
// is more of its spec (spot_check 0 unless it says).
func rlGrid(t *testing.T, extra string) (*testGrid, *coordinator.Job) {
	t.Helper()
	return rlGridWith(t, extra, nil)
}

// rlGridWith is rlGrid with the coordinator's configuration edited.
func rlGridWith(t *testing.T, extra string, edit func(*coordinator.Config)) (*testGrid, *coordinator.Job) {
	t.Helper()
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.LoadData = dataset.Load
		if edit != nil {
			edit(c)
		}
	})
	policy := nntest.RandomSafetensors(t, t.TempDir(), "charlm-tiny", 3)
	spec, err := jobspec.Parse([]byte(fmt.Sprintf("name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: %q\ntask: {type: add, digits: 1}\ngroup_size: 4\nmax_new_tokens: 3\n%s", policy, extra)))
	if err != nil {
		t.Fatal(err)
	}
	j, err := g.srv.AddJob(spec)
	if err != nil {
		t.Fatal(err)
	}
	return g, j
}

// joinRL joins a raw worker of kind, announcing RL leases or not, pinned
// to job.
func joinRL(g *testGrid, kind string, rl bool, job string) *rawClient {
	g.t.Helper()
	return joinRLKey(g, kind, rl, job, "")
}

// joinRLKey is joinRL presenting volunteer key key ("": none).
func joinRLKey(g *testGrid, kind string, rl bool, job, key string) *rawClient {
	g.t.Helper()
	rc := &rawClient{t: g.t, conn: g.dialRaw()}
	rc.send(&protocol.Hello{Protocol: protocol.Version, Kind: kind, Backend: "raw", Threads: 1, Client: "raw test client", Caps: &protocol.Caps{RL: rl, RLLocalSteps: rl}, Job: job, VolunteerKey: key})
	w, ok := rc.read().(*protocol.Welcome)
	if !ok {
		g.t.Fatal("expected a welcome")
	}
	rc.welcome = w
	return rc
}

// rollouts answers rollout lease l with completions of the given texts.
func rollouts(l protocol.Lease, texts ...string) *protocol.Result {
	r := &protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Examples: len(texts)}
	for _, s := range texts {
		ro := protocol.Rollout{}
		for i := range s {
			ro.Tokens = append(ro.Tokens, int32(s[i]))
			ro.LogProbs = append(ro.LogProbs, -1)
		}
		r.Rollouts = append(r.Rollouts, ro)
	}
	return r
}

// Over a real websocket: a worker that announces RL leases gets rollout
// leases of the task's prompts; a rollout result with a token outside the
// vocabulary, a completion longer than max_new_tokens, a positive
// log-probability or the wrong number of completions is refused with its
// reason and leaves the job as it was (its version, its updates); a sound
// one is accepted and changes no parameter. A browser tab pinned to the
// job gets no lease at all.
func TestRLRolloutsRefusedWithAReasonJobUntouched(t *testing.T) {
	g, j := rlGrid(t, "spot_check: 0\n") // its log-probabilities are made up
	rc := joinRL(g, protocol.KindNative, true, j.ID)
	state := func() (int64, int64) {
		v, ok, err := g.srv.JobView(context.Background(), j.ID)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		return v.Version, v.UpdatesApplied
	}
	version, applied := state()
	for _, c := range []struct {
		name   string
		result func(l protocol.Lease) *protocol.Result
		words  string
	}{
		{"out of vocabulary", func(l protocol.Lease) *protocol.Result {
			r := rollouts(l, "1\n", "2\n", "3\n", "4\n")
			r.Rollouts[1].Tokens[0] = 300
			return r
		}, "outside the vocabulary"},
		{"too long", func(l protocol.Lease) *protocol.Result { return rollouts(l, "1\n", "2345", "3\n", "4\n") }, "max_new_tokens"},
		{"positive log-prob", func(l protocol.Lease) *protocol.Result {
			r := rollouts(l, "1\n", "2\n", "3\n", "4\n")
			r.Rollouts[2].LogProbs[0] = 0.5
			return r
		}, "log_probs"},
		{"too few", func(l protocol.Lease) *protocol.Result { return rollouts(l, "1\n", "2\n") }, "asked for 4"},
	} {
		l := rc.grantedLeases(1)[0]
		if l.Rollout == nil || l.Rollout.GroupSize != 4 || l.Rollout.MaxNewTokens != 3 || l.Snapshot != protocol.SnapshotGranted {
			t.Fatalf("%s: lease %+v; want a granted rollout lease of 4 completions of at most 3 tokens", c.name, l)
		}
		rc.send(c.result(l))
		a := rc.ack(l.ID)
		if a.Accepted || a.Reason != protocol.ReasonInvalid || !strings.Contains(a.Detail, c.words) {
			t.Errorf("%s: ack %+v; want refused invalid mentioning %q", c.name, a, c.words)
		}
		if v, n := state(); v != version || n != applied {
			t.Errorf("%s: the job moved to version %d with %d updates applied, from %d and %d", c.name, v, n, version, applied)
		}
	}
	l := rc.grantedLeases(1)[0]
	rc.send(rollouts(l, "1\n", "12\n", "x", "9\n"))
	if a := rc.ack(l.ID); !a.Accepted {
		t.Errorf("a sound rollout result: ack %+v", a)
	}
	if v, _ := state(); v != version {
		t.Errorf("a rollout moved the policy to version %d from %d", v, version)
	}
	// The job view's rl counts the five result frames and their bytes,
	// the four refused and the accepted one's four completions; rollouts
	// are no updates, so no update compression is claimed for them.
	v, _, _ := g.srv.JobView(context.Background(), j.ID)
	if rl := v.RL; rl == nil || rl.RolloutResults != 5 || rl.Refused != 4 || rl.Rollouts != 4 ||
		rl.RolloutBytes <= 0 || rl.RolloutBytes > v.BytesIn || rl.GroupsUsed != 0 {
		t.Errorf("job view rl %+v (bytes_in %d); want 5 rollout results of at most bytes_in bytes, 4 refused, 4 completions scored, no group used yet", rl, v.BytesIn)
	} else if per := rl.RolloutBytes / rl.RolloutResults; per > 1024 {
		t.Errorf("%d bytes a rollout result of 4 completions of at most 3 tokens; want under 1 KiB", per)
	}
	if v.UpdateCompression != 0 {
		t.Errorf("update_compression %v from rollout results alone; want none (they are not updates)", v.UpdateCompression)
	}

	tab := joinRL(g, protocol.KindBrowser, false, j.ID)
	tab.send(&protocol.Want{N: 1})
	for {
		switch m := tab.read().(type) {
		case *protocol.Lease:
			t.Fatalf("a browser tab got lease %+v of the RL job", m)
		case *protocol.Idle:
			return
		}
	}
}

// computedRL computes RL lease l as a native worker does: the snapshot
// the lease names over HTTP, a rollout lease's completions sampled with
// the KV-cache decoder, a learn lease's GRPO gradient (compute.RLLease).
func (g *testGrid) computedRL(m *nn.Model, l protocol.Lease) *protocol.Result {
	g.t.Helper()
	code, body := g.getBody(l.SnapshotURL)
	if code != http.StatusOK {
		g.t.Fatalf("GET %s: %d", l.SnapshotURL, code)
	}
	params := make([]float32, m.NumParams)
	if err := protocol.DecodeFloatsInto(params, body); err != nil {
		g.t.Fatal(err)
	}
	var reference []float32
	if l.Learn != nil && l.Learn.KLCoef > 0 {
		reference = g.params(m, l.Learn.ReferenceURL)
	}
	res, err := compute.RLLease(m, l, params, reference)
	if err != nil {
		g.t.Fatal(err)
	}
	return res
}

// Over real websockets, an RL job with spot_check 1: every rollout result
// has its log-probabilities recomputed under the version its lease named.
// An honest volunteer's sampled rollouts are accepted and counted as
// checked; a forger's completions with made-up log-probabilities are
// refused forged, with the completion, token and difference in the
// detail, buffered nowhere and credited nothing, and each is a strike,
// so that at spot_check_strikes (3) the forger is banned and gets no
// more leases (its connection is closed). The counts are in the job view's spot_checks.rollouts and
// on /metrics.
func TestRLForgedRolloutsAreRefusedAndBanned(t *testing.T) {
	g, j := rlGrid(t, "spot_check: 1\n")
	ms, _ := nn.Preset("charlm-tiny")
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	honest := joinRLKey(g, protocol.KindNative, true, j.ID, keyAlice)
	forger := joinRLKey(g, protocol.KindNative, true, j.ID, keyMallory)
	for i := range 3 {
		l := honest.grantedLeases(1)[0]
		if l.Rollout == nil {
			t.Fatalf("honest lease %d: %+v; want a rollout lease", i, l)
		}
		honest.send(g.computedRL(m, l))
		if a := honest.ack(l.ID); !a.Accepted {
			t.Fatalf("honest rollout %d: ack %+v; want accepted", i, a)
		}

		l = forger.grantedLeases(1)[0]
		forger.send(rollouts(l, "7\n", "7\n", "7\n", "7\n"))
		a := forger.ack(l.ID)
		if a.Accepted || a.Reason != protocol.ReasonForged || !strings.Contains(a.Detail, "completion 0, token ") || !strings.Contains(a.Detail, "tolerance 0.01") {
			t.Fatalf("forged rollout %d: ack %+v; want refused forged, naming completion 0, a token and the tolerance", i, a)
		}
	}
	v, ok, err := g.srv.JobView(context.Background(), j.ID)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	r := v.SpotChecks.Rollouts
	if r == nil || r.Checked != 6 || r.Forged != 3 || r.SkippedNoBase != 0 || r.SkippedNoBudget != 0 || v.Rejections[protocol.ReasonForged] != 3 {
		t.Errorf("spot_checks.rollouts %+v, rejections %v; want 6 checked, 3 forged, none skipped, 3 refused forged", r, v.Rejections)
	}
	var alice, mallory coordinator.VolunteerView
	for _, vv := range g.standing() {
		switch {
		case vv.Banned:
			mallory = vv
		case vv.Examples > 0:
			alice = vv
		}
	}
	if mallory.Strikes != 3 || !strings.Contains(mallory.BanReason, "3 strikes") || mallory.Examples != 0 {
		t.Errorf("the forger: %+v; want banned after 3 strikes, no credit", mallory)
	}
	if alice.Strikes != 0 || alice.Examples != 12 {
		t.Errorf("the honest volunteer: %+v; want no strike and 12 completions credited", alice)
	}
	if st := forger.closeStatus(); st != websocket.StatusPolicyViolation {
		t.Errorf("the banned forger's connection closed with %v; want a policy violation (banned)", st)
	}
	code, body := g.getBody("/metrics")
	for _, want := range []string{`crowdtrain_rollout_checks_total{job="` + j.ID + `",outcome="forged"} 3`, `crowdtrain_rollout_checks_total{job="` + j.ID + `",outcome="matched"} 3`} {
		if code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
}

// A rollout result whose policy version left the snapshot cache cannot
// be checked: it is scored unchecked and counted as skipped_no_base,
// never refused nor struck, even at spot_check 1 with made-up
// log-probabilities; but a volunteer struck once has its unchecked
// rollout refused (quarantined), not scored, and not struck again. The version moves by a learn lease's gradient, from
// eight groups whose first completion is the right answer with its true
// log-probabilities (which pass the check) beside sampled ones; a
// snapshot cache smaller than a version then drops version 0.
func TestRLRolloutOfAVersionGoneIsSkippedNotStruck(t *testing.T) {
	// robust none: the centred clip's warm-up would wait for a gradient
	// of the struck volunteer, which holds a lease and sends none.
	g, j := rlGridWith(t, "spot_check: 1\nrobust: {method: none}\n", func(c *coordinator.Config) { c.SnapshotCacheBytes = 1 })
	ms, _ := nn.Preset("charlm-tiny")
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	rc := joinRLKey(g, protocol.KindNative, true, j.ID, keyAlice)
	held := rc.grantedLeases(1)[0] // answered after version 0 is gone
	// A volunteer struck once for a forged rollout, holding another
	// lease of version 0.
	struck := joinRLKey(g, protocol.KindNative, true, j.ID, keyMallory)
	l := struck.grantedLeases(1)[0]
	struck.send(rollouts(l, "1\n", "2\n", "3\n", "4\n"))
	if a := struck.ack(l.ID); a.Reason != protocol.ReasonForged {
		t.Fatalf("made-up log-probabilities: ack %+v; want refused forged", a)
	}
	struckHeld := struck.grantedLeases(1)[0]
	// Leases until one names version 1 (published then: version 0
	// leaves the cache of one version).
	ws := m.NewWorkspace(1)
	for i := 0; ; i++ {
		l := rc.grantedLeases(1)[0]
		if l.BaseVersion >= 1 {
			break
		}
		if i > 100 {
			t.Fatal("still version 0 after 100 leases of groups that are not flat")
		}
		if l.Learn != nil {
			rc.send(g.computedRL(m, l))
			if a := rc.ack(l.ID); !a.Accepted {
				t.Fatalf("the learn lease's gradient: ack %+v", a)
			}
			continue
		}
		rc.send(g.rightFirstRollout(m, ws, l))
		if ack := rc.ack(l.ID); !ack.Accepted {
			t.Fatalf("rollout %d: ack %+v; want accepted", i, ack)
		}
	}
	rc.send(rollouts(held, "1\n", "2\n", "3\n", "4\n"))
	if a := rc.ack(held.ID); !a.Accepted {
		t.Errorf("a rollout of version 0, gone from the cache: ack %+v; want scored unchecked", a)
	}
	// The struck volunteer's rollouts count only once checked: the same
	// unchecked result is refused, without another strike.
	struck.send(rollouts(struckHeld, "1\n", "2\n", "3\n", "4\n"))
	if a := struck.ack(struckHeld.ID); a.Accepted || a.Reason != protocol.ReasonQuarantined || !strings.Contains(a.Detail, "only once checked") {
		t.Errorf("a struck volunteer's rollout of version 0, gone: ack %+v; want refused quarantined, its rollouts counting only once checked", a)
	}
	v, ok, err := g.srv.JobView(context.Background(), j.ID)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if r := v.SpotChecks.Rollouts; r == nil || r.SkippedNoBase != 2 || r.Forged != 1 || v.Rejections[protocol.ReasonForged] != 1 {
		t.Errorf("spot_checks.rollouts %+v, rejections %v; want two skipped for their base, the one forged", r, v.Rejections)
	}
	strikes := map[bool]int{} // by whether the volunteer has credit
	for _, vv := range g.standing() {
		strikes[vv.Examples > 0] += vv.Strikes
	}
	if strikes[true] != 0 || strikes[false] != 1 {
		t.Errorf("strikes %v (by credited); want none for the honest volunteer, one for the forger", strikes)
	}
}

// rightFirstRollout answers rollout lease l of one-digit sums with
// completions sampled under its version, the first replaced by the right
// answer with its true log-probabilities: a group that is not flat (GRPO
// keeps it), and that passes a check of its log-probabilities.
func (g *testGrid) rightFirstRollout(m *nn.Model, ws *nn.Workspace, l protocol.Lease) *protocol.Result {
	g.t.Helper()
	res := g.computedRL(m, l)
	prompt := strings.TrimPrefix(rljob.Text(l.Rollout.Prompt), "\n")
	var a, b int
	if _, err := fmt.Sscanf(prompt, "%d+%d=", &a, &b); err != nil {
		g.t.Fatalf("prompt %q: %v", prompt, err)
	}
	right := []int32{}
	for _, c := range fmt.Sprintf("%d\n", a+b) {
		right = append(right, int32(c))
	}
	lp, err := rl.LogProbs(m, ws, g.params(m, l.SnapshotURL), l.Rollout.Prompt, right, l.Rollout.Temperature)
	if err != nil {
		g.t.Fatal(err)
	}
	res.Rollouts[0] = protocol.Rollout{Tokens: right, LogProbs: lp}
	return res
}

// Over real websockets, an RL job with spot_check 1: every learn result
// is computed again by the coordinator from its lease. An honest
// volunteer's GRPO gradients match and are applied; a forger that
// answers its learn leases with the gradient negated (its rollouts are
// honest) is refused forged, its detail naming the lease and the
// tolerance, the policy untouched and nothing credited, and struck each
// time, so that at spot_check_strikes (3) it is banned. The counts are in
// the job view's spot_checks.learn and on /metrics.
func TestRLForgedLearnResultsAreRefusedAndBanned(t *testing.T) {
	// robust none: the check alone stands between a forged gradient and
	// the policy here.
	g, j := rlGrid(t, "spot_check: 1\nrobust: {method: none}\n")
	ms, _ := nn.Preset("charlm-tiny")
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	ws := m.NewWorkspace(1)
	honest := joinRLKey(g, protocol.KindNative, true, j.ID, keyAlice)
	forger := joinRLKey(g, protocol.KindNative, true, j.ID, keyMallory)
	view := func() coordinator.JobView {
		t.Helper()
		v, ok, err := g.srv.JobView(context.Background(), j.ID)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		return v
	}
	honestLearn, forged := 0, 0
	for i := 0; forged < 3; i++ {
		if i > 400 {
			t.Fatalf("after 400 leases: %d honest learn results, %d forged; want 3 forged", honestLearn, forged)
		}
		rc := honest
		if i%2 == 1 {
			rc = forger
		}
		l := rc.grantedLeases(1)[0]
		switch {
		case l.Learn == nil:
			rc.send(g.rightFirstRollout(m, ws, l))
			if a := rc.ack(l.ID); !a.Accepted {
				t.Fatalf("an honest rollout: ack %+v; want accepted", a)
			}
		case rc == honest:
			rc.send(g.computedRL(m, l))
			if a := rc.ack(l.ID); !a.Accepted {
				t.Fatalf("an honest learn result: ack %+v; want accepted", a)
			}
			honestLearn++
		default:
			res := g.computedRL(m, l)
			for k := range res.Update {
				res.Update[k] = -res.Update[k]
			}
			before := view()
			rc.send(res)
			if forged == 2 {
				// The third strike bans: the connection may close
				// before the ack is read.
				forged++
				if st := rc.closeStatus(); st != websocket.StatusPolicyViolation {
					t.Fatalf("the forger's connection after its third strike closed with %v; want a policy violation (banned)", st)
				}
				break
			}
			a := rc.ack(l.ID)
			if a.Accepted || a.Reason != protocol.ReasonForged || !strings.Contains(a.Detail, fmt.Sprintf("learn lease %d", l.ID)) || !strings.Contains(a.Detail, "tolerance 0.05") {
				t.Fatalf("a negated learn result: ack %+v; want refused forged, naming the lease and the tolerance", a)
			}
			if after := view(); after.Version != before.Version || after.UpdatesApplied != before.UpdatesApplied {
				t.Fatalf("a forged learn result moved the policy: version %d -> %d, applied %d -> %d", before.Version, after.Version, before.UpdatesApplied, after.UpdatesApplied)
			}
			forged++
		}
	}
	if honestLearn == 0 {
		t.Fatal("the honest volunteer was given no learn lease")
	}
	v := view()
	if v.Rejections[protocol.ReasonForged] != 3 {
		t.Errorf("rejections %v; want 3 refused forged", v.Rejections)
	}
	if r := v.SpotChecks.Learn; r == nil || r.Checked != int64(honestLearn+3) || r.Forged != 3 || r.SkippedNoBase != 0 || r.SkippedNoBudget != 0 || r.MaxMatchedDifference > 1e-6 {
		t.Errorf("spot_checks.learn %+v; want %d checked, 3 forged, none skipped, the honest ones matching", r, honestLearn+3)
	}
	var mallory coordinator.VolunteerView
	for _, vv := range g.standing() {
		if vv.Banned {
			mallory = vv
		} else if vv.Strikes != 0 {
			t.Errorf("an honest volunteer struck: %+v", vv)
		}
	}
	if mallory.Strikes != 3 || !strings.Contains(mallory.BanReason, "3 strikes") {
		t.Errorf("the forger: %+v; want banned after 3 strikes", mallory)
	}
	code, body := g.getBody("/metrics")
	for _, want := range []string{`crowdtrain_learn_checks_total{job="` + j.ID + `",outcome="forged"} 3`,
		fmt.Sprintf(`crowdtrain_learn_checks_total{job="%s",outcome="matched"} %d`, j.ID, honestLearn)} {
		if code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
}
