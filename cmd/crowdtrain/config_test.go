package main

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// layered is one of the commands that read the environment and --config:
// its flag set, and the value of one of its flags after parsing.
type layered struct {
	cmd   string
	flag  string // a string flag to set through every layer
	parse func(args []string, file string) (value string, set *settings, err error)
}

var layeredCommands = []layered{
	{"serve", "addr", func(args []string, file string) (string, *settings, error) {
		fs, o := newServeFlags()
		set, err := fs.parseLayered(context.Background(), args, file, io.Discard, io.Discard)
		return o.addr, set, err
	}},
	{"work", "coordinator", func(args []string, file string) (string, *settings, error) {
		fs, o := newWorkFlags()
		set, err := fs.parseLayered(context.Background(), args, file, io.Discard, io.Discard)
		return o.coord, set, err
	}},
	{"relay", "upstream", func(args []string, file string) (string, *settings, error) {
		fs, o := newRelayFlags()
		set, err := fs.parseLayered(context.Background(), args, file, io.Discard, io.Discard)
		return o.up, set, err
	}},
}

// Each setting comes from the command line, else the environment
// (CROWDTRAIN_<FLAG>), else the config file, else the default; the file's
// keys are the flags' names, with - or _.
func TestSettingsPrecedenceFlagEnvFile(t *testing.T) {
	for _, c := range layeredCommands {
		dir := t.TempDir()
		file := filepath.Join(dir, c.cmd+".yaml")
		under := strings.ReplaceAll(c.flag, "-", "_")
		os.WriteFile(file, []byte("# settings\n"+under+": from-file\n"), 0o600)
		env := envName(c.flag)
		for _, tc := range []struct {
			name       string
			args       []string
			env        string
			file       bool
			want, from string
		}{
			{"default", nil, "", false, "", "default"},
			{"file", nil, "", true, "from-file", "file " + file + ":2"},
			{"env over file", nil, "from-env", true, "from-env", "env " + env},
			{"flag over env and file", []string{"--" + c.flag, "from-flag"}, "from-env", true, "from-flag", "flag"},
			{"flag over file", []string{"--" + c.flag, "from-flag"}, "", true, "from-flag", "flag"},
			{"env alone", nil, "from-env", false, "from-env", "env " + env},
		} {
			t.Run(c.cmd+"/"+tc.name, func(t *testing.T) {
				t.Setenv(env, tc.env)
				t.Setenv(envName("config"), "")
				args := tc.args
				if tc.file {
					args = append([]string{"--config", file}, args...)
				}
				got, set, err := c.parse(args, "")
				if err != nil {
					t.Fatal(err)
				}
				if tc.want != "" && got != tc.want {
					t.Errorf("--%s = %q, want %q", c.flag, got, tc.want)
				}
				src := set.source[c.flag]
				if src == "" {
					src = "default"
				}
				if src != tc.from {
					t.Errorf("--%s came from %q, want %q", c.flag, src, tc.from)
				}
			})
		}
		// The default file (work's worker.yaml) is read when no --config is
		// given, and $CROWDTRAIN_CONFIG names another.
		t.Run(c.cmd+"/default file and CROWDTRAIN_CONFIG", func(t *testing.T) {
			t.Setenv(env, "")
			got, _, err := c.parse(nil, file)
			if err != nil || got != "from-file" {
				t.Errorf("default file: --%s = %q (%v), want from-file", c.flag, got, err)
			}
			if got, _, err := c.parse([]string{"--config", ""}, file); err != nil || got == "from-file" {
				t.Errorf("--config '': --%s = %q (%v); want the default file left unread", c.flag, got, err)
			}
			other := filepath.Join(dir, "other.yaml")
			os.WriteFile(other, []byte(c.flag+": from-other\n"), 0o600)
			t.Setenv(envName("config"), other)
			got, _, err = c.parse(nil, file)
			if err != nil || got != "from-other" {
				t.Errorf("$%s: --%s = %q (%v), want from-other", envName("config"), c.flag, got, err)
			}
		})
	}
}

// A repeatable flag takes a list in the file; $CROWDTRAIN_DATA keeps its
// older meaning (where the MNIST search looks) and sets no --data, while
// the file's data: does.
func TestSettingsListsAndTheReservedDataVariable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "serve.yaml")
	os.WriteFile(file, []byte("public-url: [http://a.example:80, http://b.example:80]\ntrusted_proxy: 10.0.0.1\n"), 0o600)
	t.Setenv("CROWDTRAIN_DATA", "/mnist/from/env")
	fs, o := newServeFlags()
	if _, err := fs.parseLayered(context.Background(), []string{"--config", file}, "", io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.access.publicURLs, " "); got != "http://a.example:80 http://b.example:80" {
		t.Errorf("public-url from a list: %q", got)
	}
	if got := strings.Join(o.access.trustedProxies, " "); got != "10.0.0.1" {
		t.Errorf("trusted_proxy from one value: %q", got)
	}
	if o.dataDir != "" {
		t.Errorf("$CROWDTRAIN_DATA set --data to %q; it is the MNIST search's, not a setting", o.dataDir)
	}
	os.WriteFile(file, []byte("data: /text/from/file\n"), 0o600)
	fs, o = newServeFlags()
	set, err := fs.parseLayered(context.Background(), []string{"--config", file}, "", io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.dataDir != "/text/from/file" || set.source["data"] != "file "+file+":1" {
		t.Errorf("data: from the file under $CROWDTRAIN_DATA: %q from %q", o.dataDir, set.source["data"])
	}
}

// A mistake in the config file stops serve with exit status 2 before
// anything changes, naming the file, the line and the key.
func TestBadConfigFileNamesFileLineAndKey(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		cmd, file string
		words     []string
	}{
		{"serve", "addr: 127.0.0.1:0\nadmin-tokne: abcdefghijklmnopq\n", []string{"line 2", `"admin-tokne"`, "did you mean admin-token?"}},
		{"serve", "addr: 127.0.0.1:0\n\nthreads: many\n", []string{"line 3", "threads", `"many"`}},
		{"serve", "ping-interval: 30\n", []string{"line 1", "ping-interval", `"30"`}},
		{"serve", "job: [mnist-mlp, charlm]\n", []string{"line 1", "job", "takes one value, not a list"}},
		{"serve", "addr: 127.0.0.1:0\njoin: maybe\n", []string{"line 2", "key join", "--join", "maybe"}},
		{"serve", "addr: 127.0.0.1:0\nadmin_token: short\n", []string{"line 2", "admin_token", "16 characters"}},
		{"serve", "keep-checkpoints: 1\nkeep_checkpoints: 2\n", []string{"line 2", "keep_checkpoints", "set twice", "line 1"}},
		{"serve", "config: other.yaml\n", []string{"line 1", "config", "command line"}},
		{"serve", "addr: [a, b]\n", []string{"line 1", "addr", "takes one value"}},
		{"serve", "db: x.db\nthreads: -x\n", []string{"line 2", "threads", `"-x"`}}, // checked though --db and --threads override it below
		{"serve", "- addr\n", []string{"line 1", "want a mapping"}},
		{"serve", "addr: [unclosed\n", []string{"line 1"}},
		{"work", "coordinator: ws://127.0.0.1:1/ws\nmax_cpus: 50%\n", []string{"line 2", `"max_cpus"`, "did you mean max-cpu?"}},
		{"relay", "upstream: nats://127.0.0.1:1\ncreds: ''\nnats_ca: 5\nnats-cert: x\n", []string{"line 4", `"nats-cert"`}},
	} {
		path := filepath.Join(dir, c.cmd+".yaml")
		os.WriteFile(path, []byte(c.file), 0o600)
		db := filepath.Join(dir, "ct.db")
		args := []string{c.cmd, "--config", path}
		if c.cmd == "serve" {
			args = append(args, "--db", db, "--threads", "1")
		}
		if c.cmd == "work" {
			args = append(args, "--key-file", "")
		}
		code, _, stderr := runCmd(t, context.Background(), args...)
		if code != 2 {
			t.Errorf("%s with %q: exit %d, want 2; stderr %q", c.cmd, c.file, code, stderr)
		}
		for _, w := range append(c.words, path) {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s with %q: stderr %q does not say %q", c.cmd, c.file, stderr, w)
			}
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%s with %q: want one line, got %q", c.cmd, c.file, stderr)
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Fatalf("%s with %q: the database exists (stat: %v); a refused start must create nothing", c.cmd, c.file, err)
		}
	}
	code, _, stderr := runCmd(t, context.Background(), "serve", "--config", filepath.Join(dir, "missing.yaml"))
	if code != 2 || !strings.Contains(stderr, "missing.yaml does not exist") {
		t.Errorf("--config of a missing file: exit %d, stderr %q", code, stderr)
	}
	t.Setenv("CROWDTRAIN_THREADS", "many")
	code, _, stderr = runCmd(t, context.Background(), "serve", "--db", filepath.Join(dir, "ct.db"))
	if code != 2 || !strings.Contains(stderr, "CROWDTRAIN_THREADS") || !strings.Contains(stderr, "many") {
		t.Errorf("a bad $CROWDTRAIN_THREADS: exit %d, stderr %q", code, stderr)
	}
}

// --print-config prints every setting with its source, as YAML, with the
// secrets redacted, and exits 0 having started nothing.
func TestPrintConfigRedactsSecrets(t *testing.T) {
	dir := t.TempDir()
	const adminToken, metricsToken, natsPassword, joinToken = "admin-secret-0123456789", "metrics-secret-0123456789", "nats-pw-0123", "join-secret-0123456789"
	file := filepath.Join(dir, "serve.yaml")
	os.WriteFile(file, []byte("metrics_token: "+metricsToken+"\nthreads: 2\nnats: nats://root:"+natsPassword+"@127.0.0.1:4222\n"), 0o600)
	t.Setenv(adminTokenEnv, adminToken)
	db := filepath.Join(dir, "ct.db")
	code, stdout, stderr := runCmd(t, context.Background(), "serve", "--config", file, "--print-config", "--db", db, "--addr", "127.0.0.1:0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, secret := range []string{adminToken, metricsToken, natsPassword} {
		if strings.Contains(stdout, secret) {
			t.Errorf("the secret %q is printed:\n%s", secret, stdout)
		}
	}
	var got map[string]any
	if err := yaml.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, stdout)
	}
	for line, want := range map[string]string{
		"admin-token: " + redacted:   "# env " + adminTokenEnv,
		"metrics-token: " + redacted: "# file " + file + ":1",
		"threads: 2":                 "# file " + file + ":2",
		"addr: 127.0.0.1:0":          "# flag",
		"db: ":                       "# flag",
		"keep-checkpoints: 5":        "# default",
		"local-workers: 0":           "# default",
		"nats: nats://root:":         "# file " + file + ":3",
	} {
		found := false
		for l := range strings.SplitSeq(stdout, "\n") {
			if strings.HasPrefix(l, line) && strings.HasSuffix(l, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("no line %q ... %q in\n%s", line, want, stdout)
		}
	}
	fs, _ := newServeFlags()
	if len(got) != countFlags(fs)-2 { // all but --config and --print-config
		t.Errorf("%d settings printed, serve has %d flags besides --config and --print-config", len(got), countFlags(fs)-2)
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("--print-config created the database (stat: %v)", err)
	}
	// work: the join token, given as a flag.
	code, stdout, stderr = runCmd(t, context.Background(), "work", "--join-token", joinToken, "--print-config", "--config", os.DevNull)
	if code != 0 || strings.Contains(stdout, joinToken) || !strings.Contains(stdout, "join-token: "+redacted+" # flag") {
		t.Errorf("work --print-config: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	// A file naming a secret is not one: --key-file is shown.
	if !strings.Contains(stdout, "key-file: ") || strings.Contains(stdout, "key-file: "+redacted) {
		t.Errorf("work --print-config: --key-file should show its path:\n%s", stdout)
	}
}

func countFlags(fs *cliFlags) int {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n
}

// A mistyped flag or command is one line naming the nearest ones and -h,
// exit 2: not the whole list of flags.
func TestUnknownFlagSuggestsTheNearest(t *testing.T) {
	for _, c := range []struct {
		args  []string
		words []string
	}{
		{[]string{"serve", "--admin"}, []string{"unknown flag --admin", "did you mean --admin-token?", "crowdtrain serve -h"}},
		{[]string{"serve", "--local-worker", "2"}, []string{"--local-workers"}},
		{[]string{"serve", "--tls-cret", "x"}, []string{"--tls-cert"}},
		{[]string{"relay", "--upstrem", "x"}, []string{"--upstream", "crowdtrain relay -h"}},
		{[]string{"work", "--corodinator", "x"}, []string{"--coordinator"}},
		{[]string{"work", "--token", "x"}, []string{"--join-token"}},
		{[]string{"bench", "--modle", "x"}, []string{"--model", "crowdtrain bench -h"}},
		{[]string{"jobs", "list", "--jsn"}, []string{"--json"}},
		{[]string{"serve", "--zzzzzzzz"}, []string{"unknown flag --zzzzzzzz", "crowdtrain serve -h"}},
		{[]string{"serv"}, []string{`unknown command "serv"`, "did you mean serve?", "crowdtrain -h"}},
	} {
		code, stdout, stderr := runCmd(t, context.Background(), c.args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2", c.args, code)
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") > 0 || stdout != "" {
			t.Errorf("%q: want one line on stderr, got stdout %q, stderr %q", c.args, stdout, stderr)
		}
		for _, w := range c.words {
			if !strings.Contains(stderr, w) {
				t.Errorf("%q: stderr %q does not say %q", c.args, stderr, w)
			}
		}
	}
}

// -h lists the flags under headings by concern, each as --flag with its
// default; serve, work and relay place every flag under a heading.
func TestHelpGroupsFlagsByConcern(t *testing.T) {
	for cmd, headings := range map[string][]string{
		"serve": {"Network and TLS:", "Jobs:", "Storage:", "Security:", "Relays:", "Observability:", "Configuration:"},
		"work":  {"Coordinator:", "Compute:", "Manners (docs/DAEMON.md):", "Configuration:"},
		"relay": {"Root:", "Network and TLS:", "Configuration:"},
	} {
		code, _, help := runCmd(t, context.Background(), cmd, "-h")
		if code != 0 {
			t.Fatalf("%s -h: exit %d", cmd, code)
		}
		for _, h := range headings {
			if !strings.Contains(help, "\n"+h+"\n") {
				t.Errorf("%s -h: no heading %q in\n%s", cmd, h, help)
			}
		}
		if strings.Contains(help, "\nOther:\n") {
			t.Errorf("%s -h: flags under no heading:\n%s", cmd, help)
		}
		fs := describeFlags(cmd)
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(help, "\n  --"+f.Name+" ") && !strings.Contains(help, "\n  --"+f.Name+"\n") {
				t.Errorf("%s -h does not list --%s", cmd, f.Name)
			}
		})
		if !strings.Contains(help, "CROWDTRAIN_") {
			t.Errorf("%s -h does not say that the environment sets flags", cmd)
		}
	}
	_, _, help := runCmd(t, context.Background(), "serve", "-h")
	for _, w := range []string{"--local-workers int   (default 0)", "--addr HOST:PORT   (default 127.0.0.1:8080)", "at least 16 characters"} {
		if !strings.Contains(help, w) {
			t.Errorf("serve -h lacks %q", w)
		}
	}
	// The token's default is the environment's: help does not print it.
	t.Setenv(adminTokenEnv, "help-must-not-show-this-token")
	_, _, help = runCmd(t, context.Background(), "status", "-h")
	if strings.Contains(help, "help-must-not-show-this-token") || !strings.Contains(help, "--token TOKEN") {
		t.Errorf("status -h:\n%s", help)
	}
}

// `crowdtrain --version` prints what `crowdtrain version` does.
func TestVersionFlagIsTheVersionCommand(t *testing.T) {
	_, a, _ := runCmd(t, context.Background(), "version")
	_, b, _ := runCmd(t, context.Background(), "--version")
	if a == "" || a != b {
		t.Errorf("version:\n%s\n--version:\n%s", a, b)
	}
}
