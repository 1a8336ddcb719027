package attack

import (
	"fmt"
	"strings"
)

// Kind is one attack.
type Kind string

// The attacks.
const (
	SignFlip  Kind = "signflip"
	Scale     Kind = "scale"
	Ratchet   Kind = "ratchet"
	Early     Kind = "early"
	ALIE      Kind = "alie"
	IPM       Kind = "ipm"
	LabelFlip Kind = "labelflip"
	NaN       Kind = "nan"
	Noise     Kind = "noise"
	Mimic     Kind = "mimic"
	Replay    Kind = "replay"
	Hostage   Kind = "hostage"
	Sybil     Kind = "sybil"
	// Zero answers every task at once with an all-zero update, taking as
	// many leases as it may: work that costs nothing to fake.
	Zero Kind = "zero"
	// ForgeRollout answers an RL job's rollout leases with the task's
	// right answers and made-up log-probabilities, sampling nothing.
	ForgeRollout Kind = "forge-rollout"
)

// Kinds lists every attack, in the order the docs give them.
var Kinds = []Kind{SignFlip, Scale, Ratchet, Early, ALIE, IPM, LabelFlip, NaN, Noise, Mimic, Replay, Hostage, Sybil, Zero, ForgeRollout}

// ParseKind returns the attack s names, or an error listing them all.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return "", fmt.Errorf("unknown attack kind %q: want one of %s", s, strings.Join(names, ", "))
}

// DefaultScale is the kind's S when --scale is not given (0 for kinds
// that take none; scale's own default comes from the job's spec).
func DefaultScale(k Kind) float64 {
	switch k {
	case SignFlip, ALIE, Noise:
		return 1
	case Ratchet:
		return 0.1
	case Early:
		return 1e6
	case IPM:
		return 0.5
	}
	return 0
}

// DefaultN is how many attackers run when --n is not given.
func DefaultN(k Kind) int {
	if k == Sybil {
		return 20
	}
	return 1
}

// computes says whether the kind needs the data, the snapshot and a
// backend to forge its result (hostage, nan and sybil never compute;
// forge-rollout computes only its learn leases, on the host).
func (k Kind) computes() bool {
	switch k {
	case Hostage, NaN, Sybil, Zero, ForgeRollout:
		return false
	}
	return true
}

// rl says whether the kind takes RL jobs' leases (hello.caps.rl).
func (k Kind) rl() bool { return k == ForgeRollout }

// computes says whether the run needs the data and the snapshot: its
// kind does, or some of its results are honest (Fraction < 1).
func (cfg *Config) computes() bool { return cfg.Kind.computes() || cfg.Fraction < 1 }
