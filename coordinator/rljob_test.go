package coordinator_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// A valid kind: rl spec submitted over the API is refused with a 400 on
// `kind` saying RL jobs are not available yet, and no job is created.
func TestRLJobRefusedUntilTheCoordinatorRunsIt(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	jobs := func() int {
		vs, err := g.srv.JobViews(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(vs)
	}
	before := jobs()
	code, _, key, msg := g.submit("name: rl-add\nkind: rl\nmodel: charlm-tiny\npolicy: {job: " + g.job.ID + "}\ntask: {type: add, digits: 1}\n")
	if code != http.StatusBadRequest || key != "kind" || !strings.Contains(msg, "RL jobs (kind: rl) are not available yet") {
		t.Errorf("submitting an RL job: %d, key %q, %q; want 400 on kind saying RL jobs are not available yet", code, key, msg)
	}
	if n := jobs(); n != before {
		t.Errorf("%d jobs after the refusal, want %d", n, before)
	}
}
