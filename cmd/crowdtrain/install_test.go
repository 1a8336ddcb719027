package main

import (
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/dist"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// A volunteer's one-line install, end to end: a coordinator started with
// --downloads over this machine's release archive serves install.sh; run
// in an empty HOME it installs the worker into ~/.local/bin, the worker
// runs and trains with results accepted, --service registers a systemd
// user unit (systemctl is a stand-in that notes its calls), --uninstall
// leaves the HOME as empty as it was, and a tampered archive or checksum
// file is refused with nothing installed.
func TestInstallScriptEndToEnd(t *testing.T) {
	testenv.Long(t, "builds a release archive, starts a coordinator and runs install.sh")
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("install.sh is for Linux and macOS")
	}
	for _, tool := range []string{"sh", "curl", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool+" not found: install.sh needs it")
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	downloads := t.TempDir()
	host := dist.Target{OS: runtime.GOOS, Arch: runtime.GOARCH}
	if _, err := dist.Build(t.Context(), dist.Options{Root: root, Out: downloads, Version: "v0.0.0-install",
		Commit: "feedface", Targets: []dist.Target{host}}); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(downloads, host.ArchiveName("v0.0.0-install"))
	sums := filepath.Join(downloads, dist.SumsFile)

	addr := freeAddr(t)
	base := "http://" + addr
	// Downloads count against the anonymous bulk budget (16 MiB at once by
	// default); this test installs six times from one address.
	srv := startProc(t, "serve", "--addr", addr, "--db", "", "--job", "mnist-mlp", "--downloads", downloads,
		"--anon-bulk-burst", "67108864")
	srv.waitLine("worker downloads from", 60*time.Second)
	script := filepath.Join(t.TempDir(), "install.sh")
	resp, err := http.Get(base + "/install.sh")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("COORDINATOR='"+base+"'")) {
		t.Fatalf("GET /install.sh: %s\n%.300s", resp.Status, body)
	}
	if err := os.WriteFile(script, body, 0o644); err != nil {
		t.Fatal(err)
	}

	// A stand-in systemctl on the PATH notes what it is asked.
	stub := t.TempDir()
	calls := filepath.Join(stub, "calls")
	if err := os.WriteFile(filepath.Join(stub, "systemctl"), []byte("#!/bin/sh\necho \"$*\" >>"+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	installer := func(home string, args ...string) (string, error) {
		cmd := exec.Command("sh", append([]string{script}, args...)...)
		cmd.Env = []string{"HOME=" + home, "PATH=" + stub + ":" + os.Getenv("PATH"), "LC_ALL=C"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := installer(home)
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	bin := filepath.Join(home, ".local", "bin", "crowdtrain")
	v, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "crowdtrain v0.0.0-install\n") || !strings.Contains(string(v), "cgo: false\n") ||
		!strings.Contains(string(v), "os/arch: "+host.String()+"\n") {
		t.Fatalf("installed crowdtrain version: %v\n%s\ninstall.sh said:\n%s", err, v, out)
	}
	if !strings.Contains(out, "work --coordinator "+base) {
		t.Errorf("install.sh does not say how to start the worker:\n%s", out)
	}

	// The installed worker trains: its results are accepted. Its own
	// state (volunteer key, shard cache) goes to a HOME of its own.
	worker := exec.Command(bin, "work", "--coordinator", base)
	worker.Env = append(os.Environ(), "HOME="+t.TempDir(), "XDG_CONFIG_HOME=", "XDG_CACHE_HOME=")
	var wlog bytes.Buffer
	worker.Stdout, worker.Stderr = &wlog, &wlog
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	waitJob(t, addr, 90*time.Second, "results of the installed worker applied", func(v coordinator.JobView) bool {
		return v.UpdatesApplied >= 5
	})
	_ = worker.Process.Signal(syscall.SIGTERM)
	if err := worker.Wait(); err != nil {
		t.Errorf("the installed worker on SIGTERM: %v\n%s", err, wlog.String())
	}

	// --service: a systemd user unit, enabled and started.
	if runtime.GOOS == "linux" {
		out, err = installer(home, "--service")
		if err != nil {
			t.Fatalf("install.sh --service: %v\n%s", err, out)
		}
		unit, err := os.ReadFile(filepath.Join(home, ".config", "systemd", "user", "crowdtrain-worker.service"))
		if err != nil || !strings.Contains(string(unit), `ExecStart="`+bin+`" work --coordinator `+base) {
			t.Errorf("the unit: %v\n%s", err, unit)
		}
		if c, _ := os.ReadFile(calls); !strings.Contains(string(c), "--user enable --now crowdtrain-worker.service") {
			t.Errorf("systemctl was asked %q, want --user enable --now crowdtrain-worker.service", c)
		}
	}

	out, err = installer(home, "--uninstall")
	if err != nil {
		t.Fatalf("install.sh --uninstall: %v\n%s", err, out)
	}
	if runtime.GOOS == "linux" {
		if c, _ := os.ReadFile(calls); !strings.Contains(string(c), "--user disable --now crowdtrain-worker.service") {
			t.Errorf("uninstall asked systemctl %q, want --user disable --now crowdtrain-worker.service", c)
		}
	}
	if left := filesUnder(t, home); len(left) > 0 {
		t.Errorf("uninstall left %v behind\n%s", left, out)
	}

	// Tampered: the archive, then the checksum file. Nothing installed,
	// in the default prefix or another.
	good, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	goodSums, err := os.ReadFile(sums)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0x55
	badSums := []byte(strings.Replace(string(goodSums), string(goodSums[:8]), "00000000", 1))
	for _, c := range []struct {
		what          string
		archive, sums []byte
	}{{"a tampered archive", bad, goodSums}, {"a tampered SHA256SUMS", good, badSums}} {
		if err := os.WriteFile(archive, c.archive, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sums, c.sums, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{nil, {"--prefix", filepath.Join(home, "opt")}} {
			out, err := installer(home, args...)
			if err == nil || !strings.Contains(out, "checksum mismatch") || !strings.Contains(out, "nothing was installed") {
				t.Errorf("%s, install.sh %v: %v, want a refusal saying so:\n%s", c.what, args, err, out)
			}
			if left := filesUnder(t, home); len(left) > 0 {
				t.Errorf("%s, install.sh %v left %v", c.what, args, left)
			}
		}
	}
}

// filesUnder lists what is under dir, folders included.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			left = append(left, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return left
}
