package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// nginxConf is the configuration docs ship for nginx in front of a
// coordinator.
const nginxConf = "../../docs/nginx/crowdtrain.conf"

// startNginx runs Debian's nginx with the shipped configuration, its
// three EDIT lines pointed at listen (HOST:PORT), upstream and a cache in
// a temporary folder; it returns the access log's path.
func startNginx(t *testing.T, listen, upstream string) (accessLog string) {
	t.Helper()
	bin := testenv.NeedNginx(t)
	raw, err := os.ReadFile(nginxConf)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := string(raw)
	for _, r := range [][2]string{
		{"/var/cache/nginx/crowdtrain", dir},
		{"server 127.0.0.1:8080; # EDIT", "server " + upstream + "; # EDIT"},
		{"listen 8081; # EDIT", "listen " + listen + "; # EDIT"},
	} {
		if !strings.Contains(conf, r[0]) {
			t.Fatalf("%s no longer has %q, which this test edits", nginxConf, r[0])
		}
		conf = strings.ReplaceAll(conf, r[0], r[1])
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	global := fmt.Sprintf("daemon off; pid %s/nginx.pid; error_log stderr notice;", dir)
	if os.Geteuid() == 0 {
		global += " user root;" // its workers must reach the temporary folder
	}
	cmd := exec.Command(bin, "-p", dir, "-c", path, "-e", "stderr", "-g", global)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its workers hold the output pipe too: do not wait for them long.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) // the master stops its workers
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("nginx exited: %v\n%s", err, out.String())
		default:
		}
		if resp, err := http.Get("http://" + listen + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return filepath.Join(dir, "access.log")
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not answer on %s within 15 s:\n%s", listen, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// 20 workers behind the shipped nginx configuration fetch the same
// snapshot: nginx serves it 20 times, and the coordinator sends it once.
// The job is DiLoCo with 60 long leases an epoch (mnist-cnn, 1,000 inner
// steps of one example: seconds each here) and rounds of 40 results, so
// that every worker's first lease is on version 0.
func TestNginxServesASnapshotOnce(t *testing.T) {
	testenv.Long(t, "runs a coordinator, nginx and 20 worker processes")
	const workers = 20
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	os.WriteFile(spec, []byte("name: cached\nmodel: mnist-cnn\nmode: diloco\nlocal_steps: 1000\nbatch_size: 1\nshard_size: 1000\n"+
		fmt.Sprintf("round_size: %d\nspot_check: 0\n", 2*workers)), 0o644)
	root, front := freeAddr(t), freeAddr(t)
	// nginx is trusted to name the clients; they all come from 127.0.0.1
	// here, so the per-address limits are raised.
	srv := startProc(t, "serve", "--addr", root, "--db", "", "--job", spec, "--trusted-proxy", "127.0.0.1",
		"--max-conns-per-address", "100", "--max-leases-per-address", "100", "--hellos-per-second", "100")
	accessLog := startNginx(t, front, root)
	jobs, err := getJobs(root)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs %v: %v", jobs, err)
	}
	snapPath := fmt.Sprintf("/api/v1/jobs/%s/snapshots/", jobs[0].ID)
	var procs []*proc
	for range workers {
		procs = append(procs, startProc(t, "work", "--coordinator", "ws://"+front+"/ws", "--threads", "1"))
	}
	// Every worker's first lease is on version 0: wait for its 20
	// downloads in nginx's log.
	var lines []string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		raw, _ := os.ReadFile(accessLog)
		lines = lines[:0]
		for l := range strings.SplitSeq(string(raw), "\n") {
			if strings.Contains(l, `"GET `+snapPath) && strings.Contains(l, "/0 HTTP/") {
				lines = append(lines, l)
			}
		}
		if len(lines) >= workers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workers fetched snapshot 0 through nginx within 2 minutes; its log:\n%s\nthe coordinator's:\n%s\na worker's:\n%s",
				len(lines), workers, raw, srv.logText(), procs[workers-1].logText())
		}
		time.Sleep(200 * time.Millisecond)
	}
	view := waitJob(t, root, 10*time.Second, "the job's view", func(coordinator.JobView) bool { return true })
	if view.Version != 0 {
		t.Fatalf("the job reached version %d while the workers started; the test needs version 0 to be the only snapshot", view.Version)
	}
	// The snapshot's size, from the coordinator (a HEAD sends no body and
	// counts nothing).
	resp, err := http.Head(fmt.Sprintf("http://%s%s%d/0", root, snapPath, view.Run))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD snapshot 0: %v %v", resp, err)
	}
	size := resp.ContentLength
	misses := 0
	for _, l := range lines {
		if !strings.Contains(l, `" 200 `) {
			t.Errorf("nginx answered a snapshot request with %q", l)
		}
		if !strings.Contains(l, "cache=HIT") {
			misses++
		}
	}
	t.Logf("%d snapshot downloads through nginx, %d of them from the coordinator; the coordinator served %d snapshot bytes (one snapshot: %d)",
		len(lines), misses, view.BytesOut, size)
	if misses != 1 {
		t.Errorf("nginx went to the coordinator %d times for snapshot 0, want once:\n%s", misses, strings.Join(lines, "\n"))
	}
	if view.BytesOut != size {
		t.Errorf("the coordinator served %d snapshot bytes, want one snapshot's %d", view.BytesOut, size)
	}
}
