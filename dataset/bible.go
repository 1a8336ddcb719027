//go:build !js

package dataset

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// BibleText runs `bible` and returns the King James text.
func BibleText() ([]byte, error) {
	path, err := exec.LookPath(BibleCommand)
	if err != nil {
		return nil, &KeyError{Key: "dataset", Problem: fmt.Sprintf("%s: %v: %s", BibleKJV, ErrBibleNotFound, BibleFix), Err: ErrBibleNotFound}
	}
	var out, stderr bytes.Buffer
	cmd := exec.Command(path, BibleArgs...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, &KeyError{Key: "dataset", Problem: fmt.Sprintf("%s: `%s %s` failed: %v: %s (is bible-kjv-text installed? %s)",
			BibleKJV, BibleCommand, strings.Join(BibleArgs, " "), err, strings.TrimSpace(stderr.String()), BibleFix), Err: ErrBibleNotFound}
	}
	if out.Len() < 1<<20 {
		return nil, &KeyError{Key: "dataset", Problem: fmt.Sprintf("%s: `%s %s` printed only %d bytes (%q...); is bible-kjv-text installed? %s",
			BibleKJV, BibleCommand, strings.Join(BibleArgs, " "), out.Len(), clip(out.String()), BibleFix), Err: ErrBibleNotFound}
	}
	if err := checkUTF8(out.Bytes()); err != nil {
		return nil, &KeyError{Key: "dataset", Problem: fmt.Sprintf("%s: the output of `%s`: %v", BibleKJV, BibleCommand, err)}
	}
	return out.Bytes(), nil
}
