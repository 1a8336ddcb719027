package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/peterbourgon/ff/v3"
	"gopkg.in/yaml.v3"
)

// The long-running commands (serve, work, relay) take each flag from the
// command line, else from the environment as CROWDTRAIN_<FLAG>, else from
// the YAML file --config names, else its default. ff (peterbourgon/ff)
// does that layering on the standard flag.FlagSet, so every value still
// goes through its flag's own parsing; the YAML is read here, on yaml.v3
// nodes, so that a mistake in the file is reported with its line.

// envPrefix starts every environment variable that sets a flag.
const envPrefix = "CROWDTRAIN"

// envName is the environment variable that sets flag name.
func envName(name string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// envReserved are flags whose CROWDTRAIN_<FLAG> variable already means
// something else, and so does not set them: $CROWDTRAIN_DATA is the first
// place the MNIST search looks (dataset.EnvData), while --data names a
// text job's text as well.
var envReserved = []string{"data"}

// addConfigFlags adds --config and --print-config and makes c layered.
// fresh builds another flag set of the command, on which the file's
// values are checked even where the command line or the environment
// overrides them: a mistake in the file shows before it takes effect.
func (c *cliFlags) addConfigFlags(fresh func() *cliFlags) {
	c.layered = true
	c.fresh = fresh
	c.StringVar(&c.configPath, "config", "", "YAML `FILE` of settings: a mapping whose keys are these flags' names (addr: 127.0.0.1:8080); the command line and CROWDTRAIN_<FLAG> variables win over it")
	c.BoolVar(&c.printConfig, "print-config", false, "print the settings in effect (YAML: each flag, its value and where it came from; secrets redacted) and exit")
}

// settings records where each flag's value came from.
type settings struct {
	flags  *cliFlags
	file   string
	source map[string]string // flag name -> "flag", "env NAME" or "file PATH:LINE"
	line   map[string]int    // flag name -> its line in the file
	key    map[string]string // flag name -> its key in the file, as written
}

// errPrinted is returned after --print-config printed the settings: the
// command is done, and successfully.
var errPrinted = errors.New("settings printed")

// parseLayered parses a layered command's flags from the command line,
// the environment and the config file (defaultFile when none is named),
// and answers --print-config on stdout (errPrinted).
func (c *cliFlags) parseLayered(ctx context.Context, args []string, defaultFile string, stdout, stderr io.Writer) (*settings, error) {
	if err := c.parse(ctx, args, stderr); err != nil {
		return nil, err
	}
	s := &settings{flags: c, source: map[string]string{}, line: map[string]int{}, key: map[string]string{}}
	c.Visit(func(f *flag.Flag) { s.source[f.Name] = "flag" })
	if s.source["config"] == "" && os.Getenv(envName("config")) == "" {
		c.configPath = defaultFile
	}
	fromFile := map[string][]string{}
	err := ff.Parse(c.FlagSet, nil, // the command line is parsed: its flags count as given
		ff.WithEnvVarPrefix(envPrefix),
		ff.WithConfigFileVia(&c.configPath),
		ff.WithConfigFileParser(s.parseYAML(fromFile)))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, usagef("config file %s does not exist", c.configPath)
	case err != nil:
		var ce *configError
		if errors.As(err, &ce) {
			return nil, usagef("%v", ce)
		}
		return nil, usagef("%v", envError(c, err))
	}
	s.file = c.configPath
	if err := s.settle(fromFile); err != nil {
		return nil, err
	}
	if c.printConfig {
		return nil, s.print(stdout)
	}
	return s, nil
}

// envError rewords ff's error for a variable a flag refused, naming the
// variable, its value and the flag.
func envError(c *cliFlags, err error) error {
	var named error
	c.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		if named == nil && strings.Contains(err.Error(), fmt.Sprintf("%q", env)) {
			inner := err
			for errors.Unwrap(inner) != nil {
				inner = errors.Unwrap(inner)
			}
			named = fmt.Errorf("$%s=%q: invalid value for --%s: %v", env, os.Getenv(env), f.Name, inner)
		}
	})
	if named != nil {
		return named
	}
	return err
}

// settle works out where each value came from and undoes what ff took
// from a reserved variable, putting the file's value (or the default)
// in its place.
func (s *settings) settle(fromFile map[string][]string) error {
	var err error
	s.flags.Visit(func(f *flag.Flag) {
		if s.source[f.Name] == "flag" || err != nil {
			return
		}
		env := envName(f.Name)
		if os.Getenv(env) == "" {
			s.source[f.Name] = fmt.Sprintf("file %s:%d", s.file, s.line[f.Name])
			return
		}
		if !slices.Contains(envReserved, f.Name) {
			s.source[f.Name] = "env " + env
			return
		}
		if err = s.flags.Set(f.Name, f.DefValue); err != nil {
			return
		}
		delete(s.source, f.Name)
		for _, v := range fromFile[f.Name] {
			if err = s.flags.Set(f.Name, v); err != nil {
				err = &configError{s.file, s.line[f.Name], f.Name, err}
				return
			}
			s.source[f.Name] = fmt.Sprintf("file %s:%d", s.file, s.line[f.Name])
		}
	})
	if err != nil {
		return usagef("%v", err)
	}
	return nil
}

// configError is a mistake in the config file, at a line and a key.
type configError struct {
	file string
	line int
	key  string
	err  error
}

func (e *configError) Error() string {
	if e.key == "" {
		return fmt.Sprintf("config file %s line %d: %v", e.file, e.line, e.err)
	}
	return fmt.Sprintf("config file %s line %d: %s: %v", e.file, e.line, e.key, e.err)
}

// parseYAML is ff's config file parser: the file is a mapping of flag
// names (- or _ between words: admin-token, max_cpu) to scalars, or to
// lists for a repeatable flag. fromFile collects every value, which
// settle needs for a reserved variable's flag.
func (s *settings) parseYAML(fromFile map[string][]string) ff.ConfigFileParser {
	return func(r io.Reader, set func(name, value string) error) error {
		file := s.flags.configPath
		b, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("config file %s: %w", file, err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("config file %s: %v", file, err)
		}
		if len(doc.Content) == 0 {
			return nil // empty: nothing set
		}
		m := doc.Content[0]
		if m.Kind != yaml.MappingNode {
			return &configError{file, m.Line, "", fmt.Errorf("want a mapping of settings (addr: 127.0.0.1:8080, ...), not a %s", kindName(m.Kind))}
		}
		var scratch *cliFlags
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			name := strings.ReplaceAll(k.Value, "_", "-")
			f := s.flags.Lookup(name)
			switch {
			case name == "config" || name == "print-config":
				return &configError{file, k.Line, k.Value, errors.New("not a setting a config file can hold; give it on the command line")}
			case f == nil:
				return &configError{file, k.Line, k.Value, errors.New(s.unknownKey(k.Value))}
			case s.line[name] != 0:
				return &configError{file, k.Line, k.Value, fmt.Errorf("set twice (first at line %d)", s.line[name])}
			}
			s.line[name], s.key[name] = k.Line, k.Value
			var values []*yaml.Node
			switch {
			case v.Kind == yaml.ScalarNode:
				values = []*yaml.Node{v}
			case v.Kind == yaml.SequenceNode && isListFlag(f):
				values = v.Content
			default:
				return &configError{file, v.Line, k.Value, fmt.Errorf("takes one value, not a %s", kindName(v.Kind))}
			}
			for _, e := range values {
				if e.Kind != yaml.ScalarNode {
					return &configError{file, e.Line, k.Value, fmt.Errorf("takes plain values, not a %s", kindName(e.Kind))}
				}
				value := e.Value
				if e.Tag == "!!null" {
					value = ""
				}
				fromFile[name] = append(fromFile[name], value)
				if scratch == nil {
					scratch = s.flags.fresh()
				}
				err := scratch.Set(name, value)
				if err == nil {
					err = set(name, value) // unless the command line or environment set it
				}
				if err != nil {
					if inner := errors.Unwrap(err); inner != nil {
						err = inner // ff's wrapping repeats the name
					}
					return &configError{file, e.Line, k.Value, fmt.Errorf("invalid value %q: %w", value, err)}
				}
			}
		}
		return nil
	}
}

// unknownKey says that name is not a setting, and which it may have meant.
func (s *settings) unknownKey(key string) string {
	msg := fmt.Sprintf("unknown key %q", key)
	if near := s.flags.nearest(strings.ReplaceAll(key, "_", "-")); len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return msg + fmt.Sprintf(" (the keys are the flags 'crowdtrain %s -h' lists)", s.flags.cmd)
}

// listFlag is a repeatable flag, which a config file gives as a list.
type listFlag interface{ values() []string }

func isListFlag(f *flag.Flag) bool {
	_, ok := f.Value.(listFlag)
	return ok
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	case yaml.AliasNode:
		return "alias"
	}
	return "scalar"
}

// locate adds, to a usage error that names a flag the config file set,
// where in the file it was set: checks made after parsing (--join maybe)
// then point at the line as the parser's own do.
func (s *settings) locate(err error) error {
	var ue *usageError
	if s == nil || !errors.As(err, &ue) {
		return err
	}
	var where []string
	s.flags.VisitAll(func(f *flag.Flag) {
		if !mentions(ue.msg, "--"+f.Name) {
			return
		}
		if strings.HasPrefix(s.source[f.Name], "env ") {
			where = append(where, "--"+f.Name+" from $"+envName(f.Name))
		} else if strings.HasPrefix(s.source[f.Name], "file ") {
			where = append(where, fmt.Sprintf("--%s from config file %s line %d, key %s", f.Name, s.file, s.line[f.Name], s.key[f.Name]))
		}
	})
	if len(where) == 0 {
		return err
	}
	return usagef("%s (%s)", ue.msg, strings.Join(where, "; "))
}

// mentions reports whether msg names the flag --name itself, not a longer
// one it begins (--tls-cert in --tls-cert-file).
func mentions(msg, flagName string) bool {
	for rest := msg; ; {
		i := strings.Index(rest, flagName)
		if i < 0 {
			return false
		}
		rest = rest[i+len(flagName):]
		if rest == "" || !(rest[0] == '-' || rest[0] >= 'a' && rest[0] <= 'z' || rest[0] >= '0' && rest[0] <= '9') {
			return true
		}
	}
}

// redacted replaces a secret's value wherever settings are shown.
const redacted = "<redacted>"

// isSecret reports whether a flag's value is a secret: a token, key,
// password or credential itself, not the FILE holding one (--key-file,
// --tls-key, --creds name files, which are shown).
func isSecret(f *flag.Flag) bool {
	arg, _ := flag.UnquoteUsage(f)
	if arg == "FILE" || arg == "DIR" || arg == "PATH" {
		return false
	}
	for _, w := range strings.Split(f.Name, "-") {
		switch w {
		case "token", "secret", "password", "passwd", "key", "creds", "credential", "credentials":
			return true
		}
	}
	return false
}

// shown is a value as --print-config shows it: a secret redacted, and a
// URL's password hidden (--nats nats://user:password@host).
func shown(f *flag.Flag, v string) string {
	if v == "" {
		return v
	}
	if isSecret(f) {
		return redacted
	}
	if u, err := url.Parse(v); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			return u.Redacted()
		}
	}
	return v
}

// print writes the settings in effect as YAML a --config file could
// hold, each value followed by where it came from.
func (s *settings) print(w io.Writer) error {
	doc := &yaml.Node{Kind: yaml.MappingNode}
	s.flags.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || f.Name == "print-config" {
			return
		}
		src := s.source[f.Name]
		if src == "" {
			src = "default"
		}
		key := &yaml.Node{Kind: yaml.ScalarNode, Value: f.Name}
		var val *yaml.Node
		if l, ok := f.Value.(listFlag); ok {
			val = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, v := range l.values() {
				val.Content = append(val.Content, scalar(shown(f, v)))
			}
		} else {
			val = scalar(shown(f, f.Value.String()))
		}
		val.LineComment = src
		doc.Content = append(doc.Content, key, val)
	})
	file := s.file
	if file == "" {
		file = "none"
	}
	fmt.Fprintf(w, "# crowdtrain %s: the settings in effect (secrets redacted), each with where it came from:\n"+
		"# flag, env (a CROWDTRAIN_ variable), file (the config file, %s) or default.\n", s.flags.cmd, file)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	return errPrinted
}

// scalar is a YAML string node; an empty one is written "" so that it
// reads back as an empty string, not null.
func scalar(v string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: v}
	if v == "" {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}
