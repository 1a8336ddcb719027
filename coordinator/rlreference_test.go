package coordinator_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/nn/nntest"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// trainRL answers rc's leases of an RL job on one-digit sums until the
// job's version reaches target: each rollout lease with the right answer
// (its true log-probabilities) beside sampled completions, so that groups
// are not flat; each learn lease with its gradient, computed with the
// reference policy its lease names when it has a KL penalty. It returns
// the learn leases it answered.
func trainRL(g *testGrid, rc *rawClient, m *nn.Model, job string, target int64) []protocol.Lease {
	g.t.Helper()
	ws := m.NewWorkspace(1)
	var learns []protocol.Lease
	for i := 0; ; i++ {
		if v, _, _ := g.srv.JobView(context.Background(), job); v.Version >= target {
			return learns
		}
		if i > 400 {
			g.t.Fatalf("version below %d after 400 leases", target)
		}
		l := rc.grantedLeases(1)[0]
		if l.Learn != nil {
			learns = append(learns, l)
			rc.send(g.computedRL(m, l))
			if a := rc.ack(l.ID); !a.Accepted {
				g.t.Fatalf("the learn lease's gradient: ack %+v", a)
			}
			continue
		}
		res := g.rightFirstRollout(m, ws, l)
		rc.send(res)
		if ack := rc.ack(l.ID); !ack.Accepted {
			g.t.Fatalf("rollout: ack %+v; want accepted", ack)
		}
	}
}

// params GETs the parameters at url (a snapshot, or an RL job's
// reference).
func (g *testGrid) params(m *nn.Model, url string) []float32 {
	g.t.Helper()
	code, body := g.getBody(url)
	if code != http.StatusOK {
		g.t.Fatalf("GET %s: %d %s", url, code, body)
	}
	p := make([]float32, m.NumParams)
	if err := protocol.DecodeFloatsInto(p, body); err != nil {
		g.t.Fatalf("GET %s: %v", url, err)
	}
	return p
}

// An RL job with kl_coef: its learn leases carry the coefficient and the
// URL of its KL reference, which serves the policy the job started from,
// bit for bit, while the job's own versions move on; gradients with the
// KL term are accepted. After a restart, with the checkpoints pruned to
// one, the same reference is served (its version 0 is kept) and the
// learn leases still name it. A job without kl_coef has no reference.
func TestRLKLReferenceIsThePolicyItStartedFrom(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	policy := nntest.RandomSafetensors(t, dir, "charlm-tiny", 3)
	spec, err := jobspec.Parse([]byte(fmt.Sprintf("name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: %q\ntask: {type: add, digits: 1}\ngroup_size: 4\nmax_new_tokens: 3\nspot_check: 0\nrobust: {method: none}\nkl_coef: 0.05\n", policy)))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(c *coordinator.Config) { c.LoadData = dataset.Load; c.KeepCheckpoints = 1 }
	g := newStoredGridWith(t, db, &spec, edit)
	id := g.job.ID
	ms, _ := nn.Preset("charlm-tiny")
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	tensors, _, err := nn.ReadSafetensors(file)
	if err != nil {
		t.Fatal(err)
	}
	start := make([]float32, m.NumParams)
	if err := m.ParamsFromSafetensors(tensors, start); err != nil {
		t.Fatal(err)
	}
	refPath := "/api/v1/jobs/" + id + "/reference"
	checkReference := func(g *testGrid, learns []protocol.Lease) {
		t.Helper()
		if len(learns) == 0 {
			t.Fatal("no learn lease")
		}
		for _, l := range learns {
			if l.Learn.KLCoef != 0.05 || l.Learn.ReferenceURL != refPath {
				t.Fatalf("learn lease kl_coef %v, reference_url %q; want 0.05 and %s", l.Learn.KLCoef, l.Learn.ReferenceURL, refPath)
			}
		}
		if got := g.params(m, refPath); !bytes.Equal(protocol.EncodeFloats(got), protocol.EncodeFloats(start)) {
			t.Fatal("the reference served is not the policy the job started from")
		}
	}
	rc := joinRL(g, protocol.KindNative, true, id)
	checkReference(g, trainRL(g, rc, m, id, 3))
	g.close()

	infos, err := db.Checkpoints(context.Background(), id)
	if err != nil || len(infos) != 2 || infos[1].Version != 0 || infos[0].Version < 3 {
		t.Fatalf("checkpoints %+v, %v; want the newest (version 3 or more) and version 0, with keep 1", infos, err)
	}
	g = newStoredGridWith(t, db, nil, edit)
	if g.job == nil || g.job.ID != id {
		t.Fatal("the RL job was not resumed")
	}
	rc = joinRL(g, protocol.KindNative, true, id)
	checkReference(g, trainRL(g, rc, m, id, infos[0].Version+2))

	// Without kl_coef, no reference.
	spec.RL.KLCoef = 0
	plain, err := g.srv.AddJob(spec)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := g.getBody("/api/v1/jobs/" + plain.ID + "/reference"); code != http.StatusNotFound || !strings.Contains(string(body), "kl_coef") {
		t.Errorf("the reference of a job without kl_coef: %d %s; want 404 naming kl_coef", code, body)
	}
}

// An RL job on a jsonl task pins its file: the SHA-256 of the file it
// started with is in its stored spec, a coordinator restarted after the
// file changed refuses to resume it naming task.sha256 (it would train on
// other problems under the same name), and resumes it once the file is
// back. A new spec whose sha256 names another file is refused.
func TestRLJobPinsItsTaskFile(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	task := filepath.Join(dir, "sums.jsonl")
	orig := []byte("{\"prompt\": \"one plus one?\", \"answer\": \"2\"}\n{\"prompt\": \"two plus two?\", \"answer\": \"4\"}\n")
	if err := os.WriteFile(task, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(orig)
	want := hex.EncodeToString(sum[:])
	policy := nntest.RandomSafetensors(t, dir, "charlm-tiny", 3)
	specOf := func(pin string) jobspec.Spec {
		t.Helper()
		spec, err := jobspec.Parse([]byte(fmt.Sprintf("name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: %q\ntask: {type: jsonl, path: %q%s}\ngroup_size: 4\nmax_new_tokens: 3\nspot_check: 0\n", policy, task, pin)))
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	spec := specOf("")
	edit := func(c *coordinator.Config) { c.LoadData = dataset.Load }
	g := newStoredGridWith(t, db, &spec, edit)
	id := g.job.ID
	g.close()
	recs, err := db.Jobs(context.Background())
	if err != nil || len(recs) != 1 {
		t.Fatalf("jobs stored: %d, %v", len(recs), err)
	}
	var stored jobspec.Spec
	if err := json.Unmarshal(recs[0].Spec, &stored); err != nil || stored.RL == nil || stored.RL.Task.SHA256 != want {
		t.Fatalf("stored task %+v (%v); want the file's SHA-256 %s pinned", stored.RL, err, want)
	}

	resume := func() error {
		t.Helper()
		train, test := loadMNIST(t)
		srv, err := coordinator.New(coordinator.Config{Train: train, Test: test, Logf: t.Logf, Store: db, AdminToken: testAdminToken, LoadData: dataset.Load})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		_, err = srv.ResumeJobs(context.Background())
		return err
	}
	if err := os.WriteFile(task, append(orig, "{\"prompt\": \"one plus two?\", \"answer\": \"4\"}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	err = resume()
	var se *jobspec.Error
	if !errors.As(err, &se) || se.Key != "task.sha256" || !strings.Contains(se.Problem, "changed since the job was created") || !strings.Contains(err.Error(), id) {
		t.Fatalf("resuming after the task file changed: %v; want an error on task.sha256 for job %s", err, id)
	}
	if err := os.WriteFile(task, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := resume(); err != nil {
		t.Fatalf("resuming with the file put back: %v", err)
	}

	g = newStoredGridWith(t, db, nil, edit)
	_, err = g.srv.AddJob(specOf(", sha256: " + strings.Repeat("0", 64)))
	if !errors.As(err, &se) || se.Key != "task.sha256" {
		t.Fatalf("a spec pinning another file: %v; want an error on task.sha256", err)
	}
	if j, err := g.srv.AddJob(specOf(", sha256: " + want)); err != nil || j.Spec.RL.Task.SHA256 != want {
		t.Fatalf("a spec pinning the file it names: %v", err)
	}
}
