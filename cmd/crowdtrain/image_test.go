//go:build cgo

package main

import (
	"encoding/json"
	"fmt"
	"net"
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

// The container image (Containerfile, make image) builds FROM scratch
// out of this build, and `crowdtrain serve` in it trains: its database in
// the image's volume, MNIST from the image, a local worker; it stops
// cleanly on podman stop.
func TestContainerImageServes(t *testing.T) {
	testenv.Long(t, "builds a container image and trains in it")
	podman, err := exec.LookPath("podman")
	if err != nil {
		testenv.Missing(t, "podman not found: install Debian's podman and runc to test the container image")
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "the container image test runs podman as root (rootless podman needs subordinate ids set up)")
	}
	bin := crowdtrainBinary(t)
	ctx := filepath.Join(t.TempDir(), "image")
	if out, err := exec.Command("../../scripts/image-rootfs.sh", bin, ctx).CombinedOutput(); err != nil {
		t.Fatalf("scripts/image-rootfs.sh: %v\n%s", err, out)
	}
	// A storage of the test's own, on vfs, with chroot isolation and
	// cgroupfs: what works inside a container or VM as well as on a host.
	global := []string{"--root", t.TempDir(), "--runroot", t.TempDir(), "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"}
	if _, err := exec.LookPath("runc"); err == nil {
		global = append(global, "--runtime", "runc") // crun refuses hybrid cgroup hierarchies
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(podman, append(global, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("build", "--isolation", "chroot", "-t", "crowdtrain:test", "-f", filepath.Join(ctx, "Containerfile"), ctx)

	// podman's default limits are above this process's, which a root
	// without CAP_SYS_RESOURCE (a container) cannot raise to: the
	// container gets this process's open-file limit.
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	const token = "container-test-admin-token"
	name := fmt.Sprintf("crowdtrain-test-%d", time.Now().UnixNano())
	run("run", "-d", "--name", name, "--network", "host",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Max, nofile.Max), "--ulimit", "nproc=4096:4096",
		"-e", "CROWDTRAIN_ADMIN_TOKEN="+token, "crowdtrain:test",
		"serve", "--addr", addr, "--db", "/var/lib/crowdtrain/crowdtrain.db", "--data", "/usr/share/crowdtrain/mnist",
		"--job", "mnist-mlp", "--local-workers", "1")
	t.Cleanup(func() { exec.Command(podman, append(global, "rm", "-f", name)...).Run() })

	jobs := func() ([]coordinator.JobView, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/jobs", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var vs []coordinator.JobView
		return vs, json.NewDecoder(resp.Body).Decode(&vs)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		vs, err := jobs()
		if err == nil && len(vs) == 1 && vs[0].Version >= 20 {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := exec.Command(podman, append(global, "logs", name)...).CombinedOutput()
			t.Fatalf("the job in the container did not train (%v, %+v); its log:\n%s", err, vs, logs)
		}
		time.Sleep(500 * time.Millisecond)
	}
	run("stop", "-t", "60", name)
	if code := run("inspect", "--format", "{{.State.ExitCode}}", name); code != "0" {
		logs, _ := exec.Command(podman, append(global, "logs", name)...).CombinedOutput()
		t.Fatalf("serve in the container exited with %s after podman stop; its log:\n%s", code, logs)
	}
	if logs := run("logs", name); !strings.Contains(logs, "shutting down") {
		t.Errorf("no clean shutdown in the container's log:\n%s", logs)
	}
}
