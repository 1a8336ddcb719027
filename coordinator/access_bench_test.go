package coordinator_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/store"
)

// BenchmarkSnapshotDownload measures a worker fetching its lease's
// snapshot through the coordinator (lease check, paced 64 KiB writes under
// a write deadline each) beside the same bytes written in one Write, as
// the coordinator did before pacing. The ratio is the pacing's cost to a
// fast worker.
func BenchmarkSnapshotDownload(b *testing.B) {
	g := newTestGrid(b, quietJob(b))
	rc := g.joinRaw()
	l := rc.leases(1)[0]
	body := fetch(b, g.http.URL+l.SnapshotURL)
	plain := http.NewServeMux()
	plain.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) })
	direct := httptest.NewServer(plain)
	defer direct.Close()
	b.Run("coordinator", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			fetch(b, g.http.URL+l.SnapshotURL)
		}
	})
	b.Run("one-write", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			fetch(b, direct.URL)
		}
	})
}

func fetch(b *testing.B, url string) []byte {
	b.Helper()
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return body
}

// BenchmarkMetricsHistory measures one request for a 300,000-row history:
// the whole history as the endpoint returned it before (read and encoded
// in one piece), one page, and the chart's sample.
func BenchmarkMetricsHistory(b *testing.B) {
	const rows = 300_000
	path := filepath.Join(b.TempDir(), "ct.db")
	st, err := store.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	g := newTestGridWith(b, quietJob(b), func(c *coordinator.Config) { c.Store = st })
	id := g.job.ID
	if _, err := g.srv.StopJob(context.Background(), id); err != nil {
		b.Fatal(err)
	}
	fill(b, path, id, rows)
	b.Run("whole-history", func(b *testing.B) {
		var n int
		for b.Loop() {
			ms, err := st.Metrics(context.Background(), id, 0)
			if err != nil {
				b.Fatal(err)
			}
			out, _ := json.MarshalIndent(ms, "", "  ")
			n = len(out)
		}
		b.ReportMetric(float64(n), "bytes/response")
	})
	for _, c := range []struct{ name, query string }{{"page-5000", "?after="}, {"points-2000", "?points=2000"}} {
		b.Run(c.name, func(b *testing.B) {
			var n int
			for b.Loop() {
				n = len(fetch(b, g.http.URL+"/api/v1/jobs/"+id+"/metrics"+c.query))
			}
			b.ReportMetric(float64(n), "bytes/response")
		})
	}
}

// fill adds rows metrics rows to job id in one transaction, an evaluation
// every 100 rows (store.AddMetric's one transaction per row would take
// minutes).
func fill(b *testing.B, path, id string, rows int) {
	b.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	ins, err := tx.Prepare(`INSERT INTO metrics (job_id, at, version, accuracy, loss, examples_per_sec, updates_per_sec, note) VALUES (?, ?, ?, ?, ?, ?, ?, '')`)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now().Add(-24 * time.Hour).UnixNano()
	for i := range rows {
		var acc, loss any
		if i%100 == 0 {
			acc, loss = 0.9, 0.3
		}
		if _, err := ins.Exec(id, t0+int64(i)*int64(time.Millisecond), i, acc, loss, 12345.6, 42.0); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}
