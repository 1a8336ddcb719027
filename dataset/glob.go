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

func matchSegments(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			// Zero or more whole directories; a trailing ** matches the
			// rest, whatever its depth.
			for skip := 0; skip <= len(name); skip++ {
				if matchSegments(pat[1:], name[skip:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}
