package main

import (
	"bytes"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// sampleCmd runs `crowdtrain sample` as a process and returns its exit
// status, stdout and stderr.
func sampleCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(crowdtrainBinary(t), append([]string{"sample"}, args...)...)
	cmd.Env = append(cmd.Environ(), adminTokenEnv+"=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatal(err)
	return 0, "", ""
}

// Generating text is an admin call: without the token, or with a wrong
// one, the coordinator refuses it (the API answers 401), and the command
// says how to pass the token. A job that does not read text is refused
// with a reason, exit status 2.
func TestSampleNeedsTheAdminToken(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a coordinator process; skipped with -short")
	}
	addr := freeAddr(t)
	srv := startProc(t, "serve", "--addr", addr, "--db", "", "--job", "mnist-mlp", "--admin-token", modesAdminToken)
	defer srv.kill()
	srv.waitLine("coordinator listening", 60*time.Second)
	v := waitJob(t, addr, 30*time.Second, "a job", func(coordinator.JobView) bool { return true })
	url := "http://" + addr

	resp, err := http.Post(url+"/api/v1/jobs/"+v.ID+"/sample", "application/json", strings.NewReader(`{"prompt": "In the"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST sample without a token: %s, want 401", resp.Status)
	}

	code, stdout, stderr := sampleCmd(t, "--coordinator", url, "--job", v.ID, "--prompt", "In the")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "--token") {
		t.Fatalf("sample without a token: exit %d, stdout %q, stderr %q; want 2 saying --token", code, stdout, stderr)
	}
	code, stdout, stderr = sampleCmd(t, "--coordinator", url, "--job", v.ID, "--prompt", "In the", "--token", "not-the-token-not-the-token")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "refused the admin token") {
		t.Fatalf("sample with a wrong token: exit %d, stdout %q, stderr %q; want 1, refused", code, stdout, stderr)
	}
	code, stdout, stderr = sampleCmd(t, "--coordinator", url, "--job", v.ID, "--prompt", "In the", "--token", modesAdminToken)
	if code != 2 || stdout != "" || !strings.Contains(stderr, "not a text model") {
		t.Fatalf("sample of an image job: exit %d, stdout %q, stderr %q; want 2, not a text model", code, stdout, stderr)
	}
	for _, bad := range [][]string{{"--tokens", "0"}, {"--tokens", "4096"}, {"--temperature", "-1"}, {"--prompt", ""}} {
		args := append([]string{"--coordinator", url, "--job", v.ID, "--prompt", "x", "--token", modesAdminToken}, bad...)
		if code, _, stderr := sampleCmd(t, args...); code != 2 || !strings.Contains(stderr, strings.TrimPrefix(bad[0], "--")) {
			t.Errorf("sample %v: exit %d, %q; want 2 naming %s", bad, code, stderr, bad[0])
		}
	}
}
