package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// The King James text comes from Debian: bible-kjv installs the `bible`
// program and bible-kjv-text its data, stored in a format only `bible`
// reads.
const (
	BibleCommand  = "bible"
	BiblePackages = "bible-kjv bible-kjv-text"
)

// BibleArgs makes `bible` print the whole text, Genesis to Revelation
// (4,404,412 bytes), one verse per line prefixed by its reference.
var BibleArgs = []string{"-f", "Gen1:1-Rev22:21"}

// ErrBibleNotFound is wrapped by BibleSource's error when `bible` is not
// installed.
var ErrBibleNotFound = errors.New("the bible program (Debian bible-kjv) is not installed")

// BibleFix says how to get the King James text or use other text.
const BibleFix = "install it with `apt-get install " + BiblePackages + "`, or pass --data FILE naming a UTF-8 text file (or a directory of them)"

// BibleSource is the built-in text data set bible-kjv: the output of
// `bible -f Gen1:1-Rev22:21`, split as text with DefaultValFraction held
// out.
type BibleSource struct{}

func (BibleSource) Load(o Options) (train, test *Set, err error) {
	text, err := BibleText()
	if err != nil {
		return nil, nil, err
	}
	return TextSplits(BibleKJV, "dataset", text, o.Context, DefaultValFraction)
}

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
