package coordinator_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// What the coordinator cannot run of a valid RL spec yet is refused over
// the API with a 400 naming the key, and no job is created: a jsonl
// task, and a policy that is no job here.
func TestRLJobRefusals(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	jobs := func() int {
		vs, err := g.srv.JobViews(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(vs)
	}
	before := jobs()
	for _, c := range []struct{ spec, key, msg string }{
		{"name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: {job: " + g.job.ID + "}\ntask: {type: jsonl, path: x.jsonl}\n", "task.type", "not available on the coordinator yet"},
		{"name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: {job: nosuch}\ntask: {type: add, digits: 1}\n", "policy.job", "no job \"nosuch\""},
	} {
		code, _, key, msg := g.submit(c.spec)
		if code != http.StatusBadRequest || key != c.key || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %d, key %q, %q; want 400 on %s mentioning %q", strings.ReplaceAll(c.spec, "\n", "; "), code, key, msg, c.key, c.msg)
		}
	}
	if n := jobs(); n != before {
		t.Errorf("%d jobs after the refusals, want %d", n, before)
	}
}
