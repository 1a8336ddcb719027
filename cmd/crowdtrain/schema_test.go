//go:build cgo

package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/store"
)

// serve refuses a database of a newer schema with exit status 2, naming
// both versions, and leaves the file byte for byte as it was.
func TestServeRefusesANewerDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "newer.db")
	s, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	newer := store.SchemaVersion() + 1
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", newer)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	code, _, stderr := runCmd(t, context.Background(), "serve", "--addr", "127.0.0.1:0", "--db", path)
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr %q", code, stderr)
	}
	for _, want := range []string{path, fmt.Sprintf("schema %d", newer), fmt.Sprintf("this build knows %d", store.SchemaVersion()), "upgrade crowdtrain"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not mention %q", stderr, want)
		}
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("serve changed the newer database (read: %v)", err)
	}
}

// export only reads: it refuses a database of an older schema, which
// serve would upgrade, and leaves it as it was.
func TestExportRefusesAnOlderDatabase(t *testing.T) {
	sqlText, err := os.ReadFile(filepath.Join("..", "..", "store", "testdata", "schema-v1.sql"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(sqlText)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, context.Background(), "export", "--db", path, "--job", "job-run", "--out", filepath.Join(t.TempDir(), "m.safetensors"))
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr %q", code, stderr)
	}
	for _, want := range []string{path, "schema 1", fmt.Sprintf("this build writes %d", store.SchemaVersion()), "crowdtrain serve"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not mention %q", stderr, want)
		}
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("export changed the older database (read: %v)", err)
	}
}
