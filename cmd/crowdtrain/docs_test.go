package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var updateCLIDoc = flag.Bool("update-cli-doc", false, "rewrite docs/CLI.md from the commands' flag sets")

const cliDocPath = "../../docs/CLI.md"

// docFiles are the documents that describe the commands: README.md and
// docs/*.md.
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	paths, _ := filepath.Glob("../../docs/*.md")
	paths = append(paths, "../../README.md")
	docs := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs[strings.TrimPrefix(p, "../../")] = string(b)
	}
	return docs
}

var (
	commandStart = regexp.MustCompile("(?:crowdtrain |`(?:crowdtrain )?)([a-z][a-z-]*)(?:\\s|$)")
	flagMention  = regexp.MustCompile(`(?:^|[\s\[(|,=])--([a-z][a-z0-9-]*)`)
	// A command line ends at a quote's end, a shell separator, a pipe into
	// another program (| --flag is an alternative of a usage line), or
	// another crowdtrain command.
	commandEnd = regexp.MustCompile("`|;|&&|\\|\\s*[^\\s-]|crowdtrain\\s")
)

// commandFlagNames are the flags each command parses.
func commandFlagNames() map[string][]string {
	names := map[string][]string{}
	for _, cmd := range commandNames {
		for _, f := range commandFlags(cmd) {
			names[cmd] = append(names[cmd], f.Name)
		}
	}
	return names
}

// mentionedFlags returns, for each "crowdtrain CMD ..." or "`CMD ..." in
// text (a line, with its \-continued lines), the --flags that follow it
// on that command line.
func mentionedFlags(text string) map[string][]string {
	out := map[string][]string{}
	text = strings.ReplaceAll(text, "\\\n", " ")
	for line := range strings.SplitSeq(text, "\n") {
		starts := commandStart.FindAllStringSubmatchIndex(line, -1)
		for i, m := range starts {
			cmd := line[m[2]:m[3]]
			if !slices.Contains(commandNames, cmd) {
				continue // `curl --fail`, "crowdtrain binary"
			}
			span := line[m[1]:]
			if i+1 < len(starts) {
				span = line[m[1]:starts[i+1][0]]
			}
			if e := commandEnd.FindStringIndex(span); e != nil {
				span = span[:e[0]]
			}
			for _, f := range flagMention.FindAllStringSubmatch(span, -1) {
				out[cmd] = append(out[cmd], f[1])
			}
		}
	}
	return out
}

// The documents' command lines are read as a user would: the flags after
// "crowdtrain CMD" up to the end of the command.
func TestMentionedFlagsReadsCommandLines(t *testing.T) {
	got := mentionedFlags("Run `crowdtrain serve --addr X \\\n  --bogus` then `curl --foo` and crowdtrain work --job ID | tee --log;\n" +
		"    crowdtrain jobs list [--json | --token T] && ls --all\n--stray")
	want := map[string][]string{"serve": {"addr", "bogus"}, "work": {"job"}, "jobs": {"json", "token"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Every --flag the documents (and the top-level usage) give a command is
// one of that command's flags.
func TestDocsNameRealFlags(t *testing.T) {
	flags := commandFlagNames()
	docs := docFiles(t)
	docs["crowdtrain's usage (main.go)"] = usageByCommand(usage)
	checked := 0
	for name, text := range docs {
		for cmd, mentioned := range mentionedFlags(text) {
			have := flags[cmd]
			var refused map[string]string // names the command answers with a hint
			if fs := describeFlags(cmd); fs != nil {
				refused = fs.hints
			}
			for _, f := range mentioned {
				checked++
				if _, ok := refused[f]; !ok && !slices.Contains(have, f) {
					t.Errorf("%s names crowdtrain %s --%s, which %s does not have", name, cmd, f, cmd)
				}
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d flag mentions checked: the documents' command lines are not being read", checked)
	}
}

// usageByCommand rewrites the top-level usage so that each continuation
// line starts with the command it continues.
func usageByCommand(u string) string {
	var b strings.Builder
	cmd := ""
	for line := range strings.SplitSeq(u, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "crowdtrain "):
			if m := commandStart.FindStringSubmatch(trimmed); m != nil {
				cmd = m[1]
			}
			b.WriteString(trimmed)
		case strings.HasPrefix(line, "       ") && cmd != "":
			b.WriteString("crowdtrain " + cmd + " " + trimmed)
		default:
			cmd = ""
			b.WriteString(line)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Every flag of every command is documented: README.md or docs/ names it
// as --flag (docs/CLI.md, made from the flag sets, names them all).
func TestEveryFlagIsDocumented(t *testing.T) {
	var all strings.Builder
	for _, text := range docFiles(t) {
		all.WriteString(text)
	}
	for cmd, names := range commandFlagNames() {
		for _, f := range names {
			if !regexp.MustCompile(`--` + regexp.QuoteMeta(f) + `\b`).MatchString(all.String()) {
				t.Errorf("crowdtrain %s --%s is in no document (README.md, docs/*.md)", cmd, f)
			}
		}
	}
	// And the top-level usage names every command.
	for _, cmd := range commandNames {
		if !strings.Contains(usage, "crowdtrain "+cmd+" ") {
			t.Errorf("the usage does not show crowdtrain %s", cmd)
		}
	}
}

// docs/CLI.md is what the flag sets say; go test -run TestCLIReference
// -update-cli-doc rewrites it.
func TestCLIReferenceIsCurrent(t *testing.T) {
	t.Setenv(adminTokenEnv, "")
	t.Setenv("XDG_CONFIG_HOME", "~/.config") // --key-file's default as the docs show it
	want := cliReference()
	if *updateCLIDoc {
		if err := os.WriteFile(cliDocPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("docs/CLI.md is not what the flag sets say; rewrite it with\n" +
			"  go test ./cmd/crowdtrain -run TestCLIReferenceIsCurrent -update-cli-doc")
	}
}

// machineDefaults are defaults that depend on the machine, as the
// reference states them.
var machineDefaults = map[string]string{
	"max-params": "a quarter of this machine's memory, at 72 bytes a parameter",
}

// cliReference renders docs/CLI.md from the commands' flag sets.
func cliReference() string {
	var b bytes.Buffer
	b.WriteString(`# Command-line reference

<!-- Made from the commands' flag sets: go test ./cmd/crowdtrain -run TestCLIReferenceIsCurrent -update-cli-doc.
     Edit the flags' help in the code, not this file. -->

Every command's flags, under the headings its ` + "`-h`" + ` shows. ` + "`crowdtrain COMMAND -h`" + ` prints
the same; ` + "`crowdtrain completion bash|zsh|fish`" + ` prints a shell completion script made from them.

## Settings from the environment and a file

` + "`serve`, `work` and `relay`" + ` take each flag from, in order of precedence:

1. the command line (` + "`--admin-token T`" + `);
2. the environment, as ` + "`CROWDTRAIN_<FLAG>`" + `: upper case, ` + "`-`" + ` as ` + "`_`" + ` (` + "`CROWDTRAIN_ADMIN_TOKEN`" + `,
   ` + "`CROWDTRAIN_ADDR`" + `). One exception: ` + "`$CROWDTRAIN_DATA`" + ` keeps its older meaning, the first place
   the MNIST search looks, and does not set ` + "`--data`" + `;
3. the YAML file ` + "`--config FILE`" + ` (or ` + "`$CROWDTRAIN_CONFIG`" + `) names: a mapping whose keys are the flags'
   names, with ` + "`-`" + ` or ` + "`_`" + ` between words, and a list for a repeatable flag. For ` + "`work`" + ` the file
   is ` + "`~/.config/crowdtrain/worker.yaml`" + ` (or the OS's config directory) when there is one
   (` + "`--config ''`" + ` reads none);
4. the flag's default.

An unknown key, a value the flag refuses, or one a later check refuses stops the command with
exit status 2 and a message naming the file, the line and the key; ` + "`serve`" + ` then has created
nothing (no database). ` + "`--print-config`" + ` prints the settings in effect as YAML, each value
with where it came from (flag, env, file with its line, or default), tokens, keys and URL
passwords redacted, and exits.

    # /etc/crowdtrain/serve.yaml
    addr: 0.0.0.0:8443
    public-url: [https://grid.example.org:8443]
    tls-cert: /etc/crowdtrain/fullchain.pem
    tls-key: /etc/crowdtrain/privkey.pem
    join: token
    db: /var/lib/crowdtrain/crowdtrain.db

    CROWDTRAIN_ADMIN_TOKEN=... crowdtrain serve --config /etc/crowdtrain/serve.yaml --print-config

The admin token (` + "`--admin-token`" + `, ` + "`$CROWDTRAIN_ADMIN_TOKEN`" + `) and the metrics token must be at
least 16 characters.
`)
	for _, cmd := range commandNames {
		fmt.Fprintf(&b, "\n## crowdtrain %s\n", cmd)
		subs := subcommandNames[cmd]
		var sets []*cliFlags
		if subs != nil && cmd != "completion" {
			for _, s := range subs {
				sets = append(sets, describeFlags(cmd, s))
			}
		} else {
			sets = append(sets, describeFlags(cmd))
		}
		fmt.Fprintf(&b, "\n    crowdtrain %s\n", strings.ReplaceAll(sets[0].synopsis, "\n       ", "\n    "))
		if sets[0].NFlag() == 0 && countFlags(sets[0]) == 0 {
			b.WriteString("\nNo flags.\n")
			continue
		}
		// The subcommands' flags together; a flag not all of them take says which do.
		only := map[string][]string{}
		for i, s := range sets {
			s.VisitAll(func(f *flag.Flag) {
				if i < len(subs) {
					only[f.Name] = append(only[f.Name], subs[i])
				}
			})
		}
		seen := map[string]bool{}
		for _, s := range sets {
			for _, g := range s.groups() {
				var rows []string
				for _, f := range g.flags {
					if seen[f.Name] {
						continue
					}
					seen[f.Name] = true
					arg, use := flag.UnquoteUsage(f)
					name := "`--" + f.Name
					if arg != "" {
						name += " " + arg
					}
					name += "`"
					def := s.shownDefault(f)
					if d, ok := machineDefaults[f.Name]; ok {
						def = d
					} else if def != "" {
						def = "`" + def + "`"
					}
					if len(sets) > 1 && len(only[f.Name]) < len(sets) {
						use += " (" + cmd + " " + strings.Join(only[f.Name], ", ") + ")"
					}
					rows = append(rows, fmt.Sprintf("| %s | %s | %s |", name, def, strings.ReplaceAll(use, "|", `\|`)))
				}
				if len(rows) == 0 {
					continue
				}
				if len(s.headings) > 0 {
					fmt.Fprintf(&b, "\n### %s\n", g.heading)
				}
				b.WriteString("\n| Flag | Default | |\n|---|---|---|\n")
				b.WriteString(strings.Join(rows, "\n") + "\n")
			}
		}
	}
	return b.String()
}
