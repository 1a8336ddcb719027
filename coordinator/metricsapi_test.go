package coordinator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/store"
)

// A long metrics history comes back in pages that cover every row exactly
// once, never more than the page maximum at a time, or sampled for a chart
// over the whole history, keeping the evaluation rows.
func TestMetricsHistoryIsPagedAndSampled(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const pageMax, rows, evalEvery = 300, 2000, 125
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.Store, c.MetricsPageMax = db, pageMax })
	ctx := context.Background()
	id := g.job.ID
	if _, err := g.srv.StopJob(ctx, id); err != nil { // no rows of its own from here on
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour)
	for i := range rows {
		m := store.Metric{JobID: id, At: t0.Add(time.Duration(i) * time.Millisecond), Version: int64(1_000_000 + i), ExamplesPerSec: float64(i)}
		if i%evalEvery == 0 {
			acc := 0.5
			m.Accuracy = &acc
		}
		if err := db.AddMetric(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	all, err := db.Metrics(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}

	get := func(path string) ([]store.Metric, http.Header) {
		t.Helper()
		resp, body := g.send(http.DefaultClient, http.MethodGet, path, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		var ms []store.Metric
		if err := json.Unmarshal(body, &ms); err != nil {
			t.Fatal(err)
		}
		return ms, resp.Header
	}
	same := func(a, b store.Metric) bool { return a.At.Equal(b.At) && a.Version == b.Version && a.Note == b.Note }

	// Follow the pages from the start by their Link headers.
	var paged []store.Metric
	path := "/api/v1/jobs/" + id + "/metrics?after=&limit=250"
	for pages := 0; path != ""; pages++ {
		if pages > rows {
			t.Fatal("the pages never end")
		}
		ms, h := get(path)
		if len(ms) > 250 {
			t.Fatalf("a page of %d rows, asked for 250", len(ms))
		}
		paged = append(paged, ms...)
		path = ""
		if link := h.Get("Link"); link != "" {
			path = strings.TrimSuffix(strings.TrimPrefix(strings.Split(link, ";")[0], "<"), ">")
		}
	}
	if len(paged) != len(all) {
		t.Fatalf("the pages hold %d rows, the history %d", len(paged), len(all))
	}
	for i := range all {
		if !same(paged[i], all[i]) {
			t.Fatalf("row %d of the pages is %+v, of the history %+v", i, paged[i], all[i])
		}
	}
	// No page is bigger than the maximum, whatever is asked for.
	for _, q := range []string{"", "?limit=100000", "?after=0.0&limit=100000"} {
		if ms, _ := get("/api/v1/jobs/" + id + "/metrics" + q); len(ms) != pageMax {
			t.Errorf("metrics%s: %d rows, want the maximum %d", q, len(ms), pageMax)
		}
	}
	if ms, _ := get("/api/v1/jobs/" + id + "/metrics?limit=10"); len(ms) != 10 || !same(ms[9], all[len(all)-1]) {
		t.Errorf("?limit=10: %d rows; want the newest 10", len(ms))
	}

	// A sample spans the history and keeps every evaluation.
	const points = 60
	ms, _ := get("/api/v1/jobs/" + id + "/metrics?points=60")
	if len(ms) > points || len(ms) < points/2 {
		t.Fatalf("?points=%d: %d rows", points, len(ms))
	}
	if !same(ms[0], all[0]) || !same(ms[len(ms)-1], all[len(all)-1]) {
		t.Errorf("the sample runs from version %d to %d; want the first and the last row", ms[0].Version, ms[len(ms)-1].Version)
	}
	evals := 0
	for i, m := range ms {
		if i > 0 && !ms[i-1].At.Before(m.At) {
			t.Fatalf("sample rows %d and %d are out of order", i-1, i)
		}
		if m.Accuracy != nil {
			evals++
		}
	}
	if evals != rows/evalEvery {
		t.Errorf("the sample keeps %d evaluations of %d", evals, rows/evalEvery)
	}
	// The biggest gap between sampled rows is a small part of the history.
	for i := 1; i < len(ms); i++ {
		if gap := ms[i].Version - ms[i-1].Version; gap > 2*rows/points {
			t.Errorf("the sample skips %d rows between versions %d and %d", gap, ms[i-1].Version, ms[i].Version)
		}
	}

	for _, q := range []string{"?points=1", "?points=x", "?limit=0", "?after=nonsense", "?points=10&limit=5"} {
		resp, body := g.send(http.DefaultClient, http.MethodGet, "/api/v1/jobs/"+id+"/metrics"+q, nil, nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "error") {
			t.Errorf("metrics%s: %d %s; want 400 saying what is wrong", q, resp.StatusCode, body)
		}
	}
}

// A metrics page is bulk (5,000 rows are about 1 MB, asked for with 100
// bytes; 600 unread ones from one address pinned 930 MB of kernel memory):
// it is charged to the address's anonymous budget like a shard, while the
// signed-in operator's admin page is not limited.
func TestMetricsPagesSpendTheAnonymousBudget(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const burst = 256 << 10
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.Store, c.MetricsPageMax = db, 1000
		c.AnonBulkBurst, c.AnonBulkRate = burst, 1
	})
	ctx := context.Background()
	id := g.job.ID
	if _, err := g.srv.StopJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour)
	for i := range 1000 {
		if err := db.AddMetric(ctx, store.Metric{JobID: id, At: t0.Add(time.Duration(i) * time.Millisecond), Version: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	anon, operator := clientFrom(t, "127.0.0.2"), clientFrom(t, "127.0.0.3")
	page := "/api/v1/jobs/" + id + "/metrics?limit=1000"
	resp, body := g.send(anon, http.MethodGet, page, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first page: %d %s", resp.StatusCode, body)
	}
	n := burst/len(body) + 2
	refused := false
	for range n {
		resp, _ := g.send(anon, http.MethodGet, page, nil, nil)
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" {
			refused = true
			break
		}
	}
	if !refused {
		t.Fatalf("%d pages of %d bytes from one address past a %d-byte budget were all served", n+1, len(body), burst)
	}

	login, _ := json.Marshal(map[string]string{"token": testAdminToken})
	resp, _ = g.send(operator, http.MethodPost, "/admin/login", bytes.NewReader(login), nil)
	if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	session := map[string]string{"Cookie": resp.Cookies()[0].Name + "=" + resp.Cookies()[0].Value}
	for i := range n {
		if resp, body := g.send(operator, http.MethodGet, page, nil, session); resp.StatusCode != http.StatusOK {
			t.Fatalf("the operator's page %d: %d %s", i, resp.StatusCode, body)
		}
	}
}
