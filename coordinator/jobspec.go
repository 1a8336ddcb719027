package coordinator

import "github.com/crowdtrain/crowdtrain/jobspec"

// The job spec lives in package jobspec; these names keep the
// coordinator's API as it was.
type (
	JobSpec   = jobspec.Spec
	SpecError = jobspec.Error
	Duration  = jobspec.Duration
	Init      = jobspec.Init
)

// ErrUnknownJob is returned for a --job that is neither a preset nor a file.
var ErrUnknownJob = jobspec.ErrUnknownJob

// Step-size rules for stale results.
const (
	StalenessLRNone    = jobspec.StalenessLRNone
	StalenessLRInverse = jobspec.StalenessLRInverse
)

// LoadJobSpec resolves --job: a preset name or a YAML or JSON spec file.
func LoadJobSpec(nameOrFile string) (JobSpec, error) { return jobspec.Load(nameOrFile) }

// ParseJobSpec parses, fills defaults and validates a spec.
func ParseJobSpec(data []byte) (JobSpec, error) { return jobspec.Parse(data) }

// JobPresetNames lists the built-in jobs, sorted.
func JobPresetNames() []string { return jobspec.PresetNames() }

func specErr(key, format string, args ...any) error { return jobspec.Errorf(key, format, args...) }
