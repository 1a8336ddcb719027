package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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

// idleResumeAfter is how long the machine must stay idle before an
// --idle-only worker resumes: one busy moment (a build, a cron job) does
// not make it hand back and take leases every second.
const idleResumeAfter = 10 * time.Second
