package coordinator_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// A job whose model is over --max-params is refused with a 400 for
// `model` naming its size and the limit, and adds no job; one at the limit
// is taken.
func TestMaxParamsRefusesModelsTooLargeToHold(t *testing.T) {
	const limit = 235146 // mnist-mlp exactly
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.MaxParams = limit })
	big := map[string]string{"spec": `{"name": "big", "target_accuracy": 1, "eval_every": 1000000,
		"model": [{"type": "dense", "units": 512}, {"type": "relu"}, {"type": "dense", "units": 10}]}`}
	code, body := g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, big, nil)
	var e struct{ Key, Error string }
	json.Unmarshal(body, &e)
	// 784*512+512 + 512*10+10 parameters.
	if code != http.StatusBadRequest || e.Key != "model" || !strings.Contains(e.Error, "407050 parameters") ||
		!strings.Contains(e.Error, "limit of 235146") || !strings.Contains(e.Error, "--max-params") {
		t.Fatalf("a model of 407,050 parameters under a limit of %d: %d %s; want 400 for model naming both and the flag", limit, code, body)
	}
	same := map[string]string{"spec": `{"name": "same", "model": "mnist-mlp", "target_accuracy": 1, "eval_every": 1000000}`}
	if code, body := g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, same, nil); code != http.StatusCreated {
		t.Fatalf("a model at the limit: %d %s", code, body)
	}
	var jobs []coordinator.JobView
	if g.getJSON("/api/v1/jobs", &jobs); len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2 (the first and the one at the limit)", len(jobs))
	}
}
