package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The completion scripts are made from the commands' flag sets: bash
// accepts its script and, loaded, completes serve's flags and the
// commands; zsh and fish check theirs where they are installed.
func TestCompletionScripts(t *testing.T) {
	scripts := map[string]string{}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, stderr := runCmd(t, context.Background(), "completion", sh)
		if code != 0 {
			t.Fatalf("completion %s: exit %d: %s", sh, code, stderr)
		}
		for _, w := range []string{"admin-token", "join-token", "print-config", "relay-credential", "memory-mb"} {
			if !strings.Contains(out, w) {
				t.Errorf("completion %s does not name %s", sh, w)
			}
		}
		scripts[sh] = filepath.Join(t.TempDir(), "crowdtrain."+sh)
		os.WriteFile(scripts[sh], []byte(out), 0o644)
	}
	// Every flag of every command is offered after it.
	bash, _ := os.ReadFile(scripts["bash"])
	for _, cmd := range commandNames {
		for _, f := range commandFlags(cmd) {
			if !strings.Contains(string(bash), "--"+f.Name+" ") && !strings.Contains(string(bash), "--"+f.Name+"'") {
				t.Errorf("bash completion lacks %s --%s", cmd, f.Name)
			}
		}
	}
	if out, err := exec.Command("bash", "-n", scripts["bash"]).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	complete := func(words ...string) string {
		t.Helper()
		script := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _crowdtrain; echo "${COMPREPLY[*]}"`
		out, err := exec.Command("bash", append([]string{"-c", script, "bash", scripts["bash"]}, words...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("completing %q: %v\n%s", words, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := complete("crowdtrain", "serve", "--adm"); got != "--admin-token" {
		t.Errorf("crowdtrain serve --adm<TAB>: %q, want --admin-token", got)
	}
	if got := complete("crowdtrain", "se"); got != "serve" {
		t.Errorf("crowdtrain se<TAB>: %q, want serve", got)
	}
	if got := complete("crowdtrain", "jobs", "pa"); got != "pause patch" {
		t.Errorf("crowdtrain jobs pa<TAB>: %q, want pause patch", got)
	}
	if got := complete("crowdtrain", "work", "--max"); got != "--max-cpu" {
		t.Errorf("crowdtrain work --max<TAB>: %q, want --max-cpu", got)
	}
	for sh, check := range map[string][]string{"zsh": {"zsh", "-n"}, "fish": {"fish", "--no-execute"}} {
		if _, err := exec.LookPath(sh); err != nil {
			t.Logf("%s is not installed: its script's syntax is not checked", sh)
			continue
		}
		if out, err := exec.Command(check[0], append(check[1:], scripts[sh])...).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", strings.Join(check, " "), err, out)
		}
	}
	if _, err := exec.LookPath("fish"); err == nil {
		out, err := exec.Command("fish", "-c", `source $argv[1]; complete -C "crowdtrain serve --adm"`, scripts["fish"]).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "--admin-token\t") {
			t.Errorf("fish: crowdtrain serve --adm<TAB>: %q (%v), want --admin-token with its help", out, err)
		}
	}
	code, _, stderr := runCmd(t, context.Background(), "completion", "tcsh")
	if code != 2 || !strings.Contains(stderr, "bash, zsh or fish") {
		t.Errorf("completion tcsh: exit %d, %q", code, stderr)
	}
}
