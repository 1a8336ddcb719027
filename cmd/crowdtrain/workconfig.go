package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/crowdtrain/crowdtrain/worker"
)

// hoursFlag is --hours: a daily window of local time (worker.ParseHours).
type hoursFlag struct{ h worker.Hours }

func (f *hoursFlag) String() string {
	if f == nil || !f.h.Set() {
		return ""
	}
	return f.h.String()
}

func (f *hoursFlag) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		f.h = worker.Hours{}
		return nil
	}
	h, err := worker.ParseHours(s)
	f.h = h
	return err
}

// percentFlag is a share of something given in percent: "50%" or "50",
// in (0, 100]; it holds the fraction.
type percentFlag struct{ v float64 }

func (f *percentFlag) String() string {
	if f == nil {
		return ""
	}
	return strconv.FormatFloat(100*f.v, 'f', -1, 64) + "%"
}

func (f *percentFlag) Set(s string) error {
	n, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || !(n > 0 && n <= 100) {
		return fmt.Errorf("%q is not a percentage in (0, 100], such as 50%%", s)
	}
	f.v = n / 100
	return nil
}

// priorityFlag is --priority: low (the default) or normal.
type priorityFlag struct{ normal bool }

func (f *priorityFlag) String() string {
	if f != nil && f.normal {
		return "normal"
	}
	return "low"
}

func (f *priorityFlag) Set(s string) error {
	switch strings.TrimSpace(s) {
	case "low":
		f.normal = false
	case "normal":
		f.normal = true
	default:
		return fmt.Errorf("%q is not low or normal", s)
	}
	return nil
}

// workConfigName is the worker's config file, in the config directory.
const workConfigName = "worker.yaml"

// defaultWorkConfig is the worker config file read when --config is not
// given: worker.yaml beside the volunteer key (~/.config/crowdtrain, or
// $XDG_CONFIG_HOME/crowdtrain) or, where that does not exist, in the
// OS's config directory (os.UserConfigDir: ~/Library/Application Support
// on macOS, %AppData% on Windows). "" when neither exists.
func defaultWorkConfig() string {
	var dirs []string
	if k := defaultKeyFile(); k != "" {
		dirs = append(dirs, filepath.Dir(k))
	}
	if d, err := os.UserConfigDir(); err == nil {
		dirs = append(dirs, filepath.Join(d, "crowdtrain"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, workConfigName)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// applyWorkConfig reads the worker config file path, a YAML mapping whose
// keys are work's flags with _ for - (max_cpu: 50%), and sets each flag
// the command line did not: flags override the file. Every value goes
// through its flag's own parsing, so the file takes what the flags take.
// An unknown key, a value that is not a scalar, or one the flag refuses
// is an error naming the key and its line.
func applyWorkConfig(fset *flag.FlagSet, path string, notInFile ...string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("config file %s does not exist", path)
		}
		return fmt.Errorf("config file: %v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("config file %s: %v", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty: nothing set
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("config file %s: want a mapping of settings (coordinator: ws://HOST:PORT/ws, ...), not a %s", path, kindName(m.Kind))
	}
	onCommandLine := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		name := strings.ReplaceAll(k.Value, "_", "-")
		if fset.Lookup(name) == nil || slices.Contains(notInFile, name) {
			return fmt.Errorf("config file %s line %d: unknown key %q; the keys are %s", path, k.Line, k.Value, workConfigKeys(fset, notInFile))
		}
		if seen[name] {
			return fmt.Errorf("config file %s line %d: %q is set twice", path, k.Line, k.Value)
		}
		seen[name] = true
		if v.Kind != yaml.ScalarNode {
			return fmt.Errorf("config file %s line %d: %s takes one value, not a %s", path, v.Line, k.Value, kindName(v.Kind))
		}
		if onCommandLine[name] {
			continue
		}
		if err := fset.Set(name, v.Value); err != nil {
			return fmt.Errorf("config file %s line %d: %s: %v", path, v.Line, k.Value, err)
		}
	}
	return nil
}

func workConfigKeys(fset *flag.FlagSet, notInFile []string) string {
	var keys []string
	fset.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(notInFile, f.Name) {
			keys = append(keys, strings.ReplaceAll(f.Name, "-", "_"))
		}
	})
	return strings.Join(keys, ", ")
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	}
	return "scalar"
}

// idleResumeAfter is how long the machine must stay idle before an
// --idle-only worker resumes: one busy moment (a build, a cron job) does
// not make it hand back and take leases every second.
const idleResumeAfter = 10 * time.Second
