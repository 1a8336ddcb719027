package dataset

import "errors"

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
	return textSplits(BibleKJV, "dataset", text, o, DefaultValFraction)
}
