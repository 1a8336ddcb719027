package dataset

import (
	"fmt"
	"path"
	"strings"
)

// A glob selects files of a text tree by their path relative to the tree's
// root, with "/" between directories: path.Match's patterns per segment
// (*, ?, [a-z]), plus "**" as a whole segment matching zero or more
// directories. "**/*.go" is every .go file at any depth, "*.go" only those
// at the top, "src/**/*_test.go" test files anywhere under src.

// CheckGlob says what is wrong with glob, or returns nil.
func CheckGlob(glob string) error {
	if glob == "" {
		return fmt.Errorf("the glob is empty (want a pattern such as **/*.go)")
	}
	if strings.HasPrefix(glob, "/") {
		return fmt.Errorf("glob %q is absolute: it matches paths relative to the tree's root (say **/*.go)", glob)
	}
	for _, seg := range strings.Split(glob, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("glob %q has an empty segment (a doubled or trailing /)", glob)
		case seg == "." || seg == "..":
			return fmt.Errorf("glob %q has a %q segment: it matches paths inside the tree only", glob, seg)
		case seg == "**":
		case strings.Contains(seg, "**"):
			return fmt.Errorf("glob %q: ** must be a whole segment (**/x, a/**/b), not part of %q", glob, seg)
		default:
			if _, err := path.Match(seg, ""); err != nil {
				return fmt.Errorf("glob %q: segment %q is not a valid pattern (path.Match's syntax: *, ?, [a-z], \\ escapes)", glob, seg)
			}
		}
	}
	return nil
}

// matchGlob reports whether the slash-separated relative path rel matches
// glob (valid, CheckGlob).
func matchGlob(glob, rel string) bool {
	return matchSegments(strings.Split(glob, "/"), strings.Split(rel, "/"))
}

// matchSegments matches by dynamic programming over (pattern segment,
// name segment), so no run of ** segments can make it backtrack
// exponentially: at most len(pat)*len(name) segment matches. ok[j] says
// whether pat[i:] matches name[j:], for i from the end down.
func matchSegments(pat, name []string) bool {
	ok := make([]bool, len(name)+1)
	next := make([]bool, len(name)+1)
	ok[len(name)] = true
	for i := len(pat) - 1; i >= 0; i-- {
		if pat[i] == "**" {
			// Zero directories, or one more and still **.
			next[len(name)] = ok[len(name)]
			for j := len(name) - 1; j >= 0; j-- {
				next[j] = ok[j] || next[j+1]
			}
		} else {
			next[len(name)] = false
			for j := len(name) - 1; j >= 0; j-- {
				m := false
				if ok[j+1] {
					m, _ = path.Match(pat[i], name[j])
				}
				next[j] = m
			}
		}
		ok, next = next, ok
	}
	return ok[0]
}
