package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// docs/crowdtrain.service passes systemd-analyze verify: every directive
// known, every value parsed, with the hardening an operator expects.
func TestServiceUnitVerifies(t *testing.T) {
	unit, err := os.ReadFile("../../docs/crowdtrain.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DynamicUser=yes", "ProtectSystem=strict", "StateDirectory=crowdtrain", "NoNewPrivileges=yes",
		"Restart=on-failure", "ExecStart=/usr/local/bin/crowdtrain serve ", "--db /var/lib/crowdtrain/"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("docs/crowdtrain.service has no %q", want)
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian package systemd; .ci/run installs it)")
	}
	// verify checks that ExecStart's program exists: this test's binary
	// stands in for /usr/local/bin/crowdtrain.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "crowdtrain.service")
	os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/crowdtrain", self)), 0o644)
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	// An unknown key or a bad value is only a warning to verify (exit 0),
	// so any line about the unit fails the test.
	if err != nil || strings.Contains(string(out), "crowdtrain.service") {
		t.Fatalf("systemd-analyze verify docs/crowdtrain.service: %v\n%s", err, out)
	}
}

// docs/prometheus/alerts.yml passes promtool check rules, has a rule for
// each thing an operator must hear of, and names only metrics the
// coordinator exports (or node_exporter's, for the disk, and up).
func TestAlertRules(t *testing.T) {
	const path = "../../docs/prometheus/alerts.yml"
	rules, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CrowdtrainCoordinatorDown", "CrowdtrainCheckpointFailing", "CrowdtrainNoAcceptedResults",
		"CrowdtrainRelayPlaneDown", "CrowdtrainDiskNearlyFull"} {
		if !strings.Contains(string(rules), "alert: "+want+"\n") {
			t.Errorf("%s has no alert %s", path, want)
		}
	}
	var src strings.Builder
	files, _ := filepath.Glob("../../coordinator/*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	names := regexp.MustCompile(`\bcrowdtrain_[a-z_]+\b`).FindAllString(string(rules), -1)
	if len(names) < 5 {
		t.Fatalf("%s names %d crowdtrain metrics: %q", path, len(names), names)
	}
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		if !strings.Contains(src.String(), `"`+name+`"`) {
			t.Errorf("%s: the coordinator exports no metric %s", path, name)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", path, err, out)
	}
}

// docs/DEPLOY.md names only commands and flags the binary has: each
// `crowdtrain SUBCOMMAND` line (with its continuation lines) against
// that subcommand's -h, and every other --flag against some
// subcommand's, but the container tools' own.
func TestDeployGuideNamesRealCommandsAndFlags(t *testing.T) {
	testenv.Long(t, "builds and runs the binary for each subcommand's -h")
	doc, err := os.ReadFile("../../docs/DEPLOY.md")
	if err != nil {
		t.Fatal(err)
	}
	bin := crowdtrainBinary(t)
	helps := map[string]string{}
	help := func(sub string) string {
		if h, ok := helps[sub]; ok {
			return h
		}
		out, _ := exec.Command(bin, sub, "-h").CombinedOutput() // -h exits 0 or 2 by command
		helps[sub] = string(out)
		return helps[sub]
	}
	has := func(h, flag string) bool {
		return regexp.MustCompile(`(^|[\s\[|])--?` + regexp.QuoteMeta(strings.TrimLeft(flag, "-")) + `\b`).MatchString(h)
	}
	// podman's (the Container section) and systemctl's.
	notOurs := map[string]bool{"--storage-driver": true, "--isolation": true, "--runtime": true, "--cgroup-manager": true,
		"--name": true, "--env-file": true, "--ulimit": true, "--now": true}
	subcommands := []string{"serve", "relay", "relay-credential", "work", "status", "jobs", "tokens", "volunteers", "backup",
		"submit", "bench", "export", "attack", "sample", "version"}
	flagRE := regexp.MustCompile(`(?:^|[\s` + "`" + `(])(--[a-z][a-z0-9-]*)`)
	cmdRE := regexp.MustCompile(`\bcrowdtrain ([a-z][a-z-]*)`)
	lines := strings.Split(string(doc), "\n")
	named := 0
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		for strings.HasSuffix(strings.TrimSpace(line), `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(strings.TrimSpace(line), `\`) + " " + lines[i]
		}
		if strings.Contains(line, "podman") || strings.Contains(line, "PODMAN") {
			continue
		}
		flags := flagRE.FindAllStringSubmatch(line, -1)
		if m := cmdRE.FindStringSubmatch(line); m != nil {
			sub := m[1]
			if !slices.Contains(subcommands, sub) {
				t.Errorf("DEPLOY.md line %d names `crowdtrain %s`, no such command", i+1, sub)
				continue
			}
			for _, f := range flags {
				named++
				if !has(help(sub), f[1]) {
					t.Errorf("DEPLOY.md line %d: `crowdtrain %s` has no flag %s", i+1, sub, f[1])
				}
			}
			continue
		}
		for _, f := range flags {
			named++
			if notOurs[f[1]] {
				continue
			}
			if !slices.ContainsFunc(subcommands, func(sub string) bool { return has(help(sub), f[1]) }) {
				t.Errorf("DEPLOY.md line %d names %s, which no crowdtrain command takes", i+1, f[1])
			}
		}
	}
	if named < 30 {
		t.Errorf("found only %d flags in DEPLOY.md; the parsing above is broken", named)
	}
}
