package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// TestMain keeps the workers these tests run (in process and as
// processes) from making a volunteer key in the user's own config
// directory: $XDG_CONFIG_HOME points at a temporary one.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "crowdtrain-config")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// work --token was the join token once; now it is refused, pointing to
// --join-token, so that --token means the admin token everywhere.
func TestWorkTokenFlagIsRefused(t *testing.T) {
	code, _, stderr := runCmd(t, context.Background(), "work", "--token", "abc")
	if code != 2 || !strings.Contains(stderr, "--token is the admin token of status and submit; the join token is --join-token") {
		t.Fatalf("work --token: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCmd(t, context.Background(), "serve", "--join", "closed")
	if code != 2 || !strings.Contains(stderr, "--join \"closed\": want open") {
		t.Fatalf("serve --join closed: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCmd(t, context.Background(), "work", "--name", "bad\nname", "--key-file", "")
	if code != 2 || !strings.Contains(stderr, "--name") || !strings.Contains(stderr, "control") {
		t.Fatalf("work --name with a newline: exit %d, stderr %q", code, stderr)
	}
}

// The key file is made once (0600, 32 random bytes in base64url) and
// reused; a file that holds no key is an error naming it.
func TestVolunteerKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "volunteer-key")
	key, err := loadVolunteerKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != 43 || protocol.CheckVolunteerKey(key) != nil {
		t.Fatalf("new key %q: want 43 characters of base64url", key)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	again, err := loadVolunteerKey(path)
	if err != nil || again != key {
		t.Fatalf("second load: %q, %v; want the same key %q", again, err, key)
	}
	if other, _ := loadVolunteerKey(filepath.Join(t.TempDir(), "k")); other == key {
		t.Fatal("two new key files hold the same key")
	}
	bad := filepath.Join(t.TempDir(), "bad-key")
	os.WriteFile(bad, []byte("not a key\n"), 0o600)
	code, _, stderr := runCmd(t, context.Background(), "work", "--key-file", bad)
	if code != 2 || !strings.Contains(stderr, bad) || !strings.Contains(stderr, "does not hold a volunteer key") {
		t.Fatalf("work with a bad key file: exit %d, stderr %q", code, stderr)
	}
}

// Real processes: a coordinator in token mode refuses a worker without a
// token (which stops, saying why), and a worker with a token issued over
// the API trains and earns credit under its name.
func TestJoinTokenWorkerTrains(t *testing.T) {
	testenv.Long(t, "starts a coordinator and worker processes")
	const admin = "admin-token-for-this-test-0123"
	addr := freeAddr(t)
	startProc(t, "serve", "--addr", addr, "--job", "mnist-mlp", "--db", "", "--join", "token", "--admin-token", admin)
	waitJob(t, addr, 30*time.Second, "the coordinator", func(coordinator.JobView) bool { return true })

	refused := startProc(t, "work", "--coordinator", "ws://"+addr+"/ws", "--backend", "cpu")
	select {
	case err := <-refused.done:
		if err == nil || !strings.Contains(refused.logText(), "join_token") || !strings.Contains(refused.logText(), "--join-token") {
			t.Fatalf("a worker without a token: exit %v; log:\n%s", err, refused.logText())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("a worker without a token did not stop; log:\n%s", refused.logText())
	}

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/tokens", strings.NewReader(`{"name": "alice"}`))
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tok coordinator.IssuedToken
	err = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || tok.Token == "" {
		t.Fatalf("POST /api/v1/tokens: %d, %+v, %v", resp.StatusCode, tok, err)
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	w := startProc(t, "work", "--coordinator", "ws://"+addr+"/ws", "--backend", "cpu", "--join-token", tok.Token, "--name", "Alice", "--key-file", keyFile)
	w.waitLine("connected as", 30*time.Second)
	waitJob(t, addr, 60*time.Second, "the worker to train", func(v coordinator.JobView) bool { return v.Workers == 1 && v.Version > 2 })
	if _, err := os.Stat(keyFile); err != nil {
		t.Errorf("the worker made no key file: %v", err)
	}
	var board struct {
		Volunteers []coordinator.LeaderboardEntry `json:"volunteers"`
	}
	resp, err = http.Get("http://" + addr + "/api/v1/volunteers")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&board)
	resp.Body.Close()
	if err != nil || len(board.Volunteers) != 1 || board.Volunteers[0].Name != "Alice" || board.Volunteers[0].Examples <= 0 ||
		board.Volunteers[0].FLOPs <= 0 {
		t.Fatalf("leaderboard: %+v, %v; want Alice with credit", board, err)
	}
}
