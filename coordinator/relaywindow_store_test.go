package coordinator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/store"
)

// shownRelayWindow is relay_window in the job's spec as GET
// /api/v1/jobs/{id} shows it, and as the store holds it.
func shownRelayWindow(t *testing.T, g *testGrid, db *store.Store, id string) (shown, stored string) {
	t.Helper()
	var v struct {
		Spec map[string]any `json:"spec"`
	}
	if code := g.getJSON("/api/v1/jobs/"+id, &v); code != http.StatusOK {
		t.Fatalf("GET job %s: %d", id, code)
	}
	shown, _ = v.Spec["relay_window"].(string)
	rec, err := db.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(rec.Spec, &s); err != nil {
		t.Fatal(err)
	}
	stored, _ = s["relay_window"].(string)
	return shown, stored
}

// relay_window is part of the job's spec like every other key: shown by
// the API and kept by the store, given, changed while the job runs, left
// out (the default is recorded), and across a restart.
func TestRelayWindowIsStoredAndShown(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := quietJob(t)
	spec.RelayWindow = jobspec.Duration{Duration: 3 * time.Second}
	g := newStoredGrid(t, db, &spec)
	id := g.job.ID
	if shown, stored := shownRelayWindow(t, g, db, id); shown != "3s" || stored != "3s" {
		t.Errorf("relay_window 3s given: the API shows %q, the store holds %q", shown, stored)
	}

	if code, body := g.call(http.MethodPatch, "/api/v1/jobs/"+id, testAdminToken, map[string]any{"relay_window": "250ms"}, nil); code != http.StatusOK {
		t.Fatalf("PATCH relay_window: %d %s", code, body)
	}
	if shown, stored := shownRelayWindow(t, g, db, id); shown != "250ms" || stored != "250ms" {
		t.Errorf("relay_window changed to 250ms: the API shows %q, the store holds %q", shown, stored)
	}

	plain := quietJob(t)
	plain.Name = "no-relay-window"
	other, err := g.srv.AddJob(plain)
	if err != nil {
		t.Fatal(err)
	}
	want := jobspec.Duration{Duration: jobspec.DefaultRelayWindow}.String()
	if shown, stored := shownRelayWindow(t, g, db, other.ID); shown != want || stored != want {
		t.Errorf("relay_window left out: the API shows %q, the store holds %q; want the default %s recorded", shown, stored, want)
	}
	g.close()

	g2 := newStoredGrid(t, db, nil)
	if g2.job == nil {
		t.Fatal("no job resumed")
	}
	if shown, _ := shownRelayWindow(t, g2, db, id); shown != "250ms" {
		t.Errorf("after a restart the API shows relay_window %q, want the 250ms set before it", shown)
	}
	var resumed coordinator.JobView
	g2.getJSON("/api/v1/jobs/"+id, &resumed)
	if resumed.Spec.EffectiveRelayWindow() != 250*time.Millisecond {
		t.Errorf("after a restart the job's relays sum for %v, want 250ms", resumed.Spec.EffectiveRelayWindow())
	}
}
