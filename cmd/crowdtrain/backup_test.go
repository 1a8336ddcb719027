//go:build cgo

package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/store"
	_ "github.com/mattn/go-sqlite3" // the plain "sqlite3" driver, for a check independent of the store
)

// backup copies the database of a coordinator while it trains and writes
// checkpoints; each copy passes SQLite's integrity_check, and a coordinator
// started on the copy resumes the job at the copy's latest checkpoint.
func TestBackupDuringTrainingResumes(t *testing.T) {
	const token = "backup-test-admin-token"
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "live.db")
	base := startServe(t, token, "--job", "mnist-mlp", "--local-workers", "2", "--db", dbPath, "--checkpoint-interval", "50ms")
	jobs := func(base string) []jobView {
		var js []jobView
		if err := (apiClient{base: base}).do(context.Background(), http.MethodGet, "/api/v1/jobs", nil, &js); err != nil {
			t.Fatal(err)
		}
		return js
	}
	deadline := time.Now().Add(60 * time.Second)
	for js := jobs(base); len(js) != 1 || js[0].LastCheckpoint == nil || js[0].LastCheckpoint.Version < 20; js = jobs(base) {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint past version 20: %+v", js)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Three backups while checkpoints are written every 50 ms.
	var copyPath string
	var copyVersion int64
	for i := range 3 {
		copyPath = filepath.Join(dir, "copy.db")
		args := []string{"backup", "--db", dbPath, "--out", copyPath}
		if i > 0 {
			args = append(args, "--force")
		}
		before := jobs(base)[0].Version
		code, stdout, stderr := runCmd(t, context.Background(), args...)
		if code != 0 || !strings.Contains(stdout, "integrity_check ok") {
			t.Fatalf("backup %d: exit %d\n%s%s", i, code, stdout, stderr)
		}
		if after := jobs(base)[0].Version; after <= before && i == 2 {
			t.Logf("the job did not move during the backups (v%d); the copy is still of a live database", after)
		}
		db, err := sql.Open("sqlite3", "file:"+copyPath+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		var check string
		if err := db.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
			t.Fatalf("copy %d: integrity_check %q, %v", i, check, err)
		}
		db.Close()
		time.Sleep(100 * time.Millisecond)
	}
	live := jobs(base)[0]
	st, err := store.Open(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err := st.LatestCheckpoint(context.Background(), live.ID)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	copyVersion = ckpt.Version
	if copyVersion < 20 {
		t.Fatalf("the copy's latest checkpoint is v%d, older than one written before the backup", copyVersion)
	}

	// Refused onto an existing file without --force: a usage error, the file untouched.
	fi, _ := os.Stat(copyPath)
	code, _, stderr := runCmd(t, context.Background(), "backup", "--db", dbPath, "--out", copyPath)
	if fi2, _ := os.Stat(copyPath); code != 2 || !strings.Contains(stderr, "--force") || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("backup onto an existing file: exit %d, %s", code, stderr)
	}
	// Not a database, and a missing one: failures naming the file.
	notDB := filepath.Join(dir, "notes.txt")
	os.WriteFile(notDB, []byte("not a database at all, just some text that is long enough for a header"), 0o644)
	for _, src := range []string{notDB, filepath.Join(dir, "missing.db")} {
		code, _, stderr := runCmd(t, context.Background(), "backup", "--db", src, "--out", filepath.Join(dir, "x.db"))
		if code != 1 || !strings.Contains(stderr, filepath.Base(src)) {
			t.Errorf("backup of %s: exit %d, %s", src, code, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "x.db")); err == nil {
			t.Errorf("backup of %s left x.db", src)
		}
	}
	if code, _, stderr := runCmd(t, context.Background(), "backup", "--db", dbPath); code != 2 || !strings.Contains(stderr, "--out") {
		t.Errorf("backup without --out: exit %d, %s", code, stderr)
	}

	t.Logf("live job at v%d; the copy holds checkpoint v%d", live.Version, copyVersion)
	// A coordinator on the copy resumes the job at the copy's checkpoint.
	base2 := startServe(t, token, "--job", "mnist-mlp", "--db", copyPath)
	js := jobs(base2)
	if len(js) != 1 || js[0].ID != live.ID || js[0].Version != copyVersion || js[0].State != "running" {
		raw, _ := json.Marshal(js)
		t.Fatalf("serve on the copy: %s; want job %s resumed at v%d", raw, live.ID, copyVersion)
	}
}
