package rltask

import "strings"

// Reward is 1 if completion answers p exactly and 0 otherwise. The
// completion is cut at its first newline, which ends an answer (the
// newline and whatever a model wrote after it do not count); the rest
// must equal p.Answer byte for byte: no spaces, no leading zeros, no
// other spelling of the same number.
func Reward(p Problem, completion string) float64 {
	if i := strings.IndexByte(completion, '\n'); i >= 0 {
		completion = completion[:i]
	}
	if completion == p.Answer {
		return 1
	}
	return 0
}
