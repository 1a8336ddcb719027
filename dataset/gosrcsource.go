package dataset

import "errors"

// The built-in data set go-source is the Go standard library's source as
// the toolchain on the machine ships it: every .go file under GOROOT/src
// (BSD-licensed), a tree of about 90 MB read as ReadTextTree reads one.
const (
	GoSource            = "go-source"
	GoSourceGlob        = "**/*.go"
	GoSourceValFraction = 0.01
)

// EnvGoSource names a directory GoSourceSource reads instead of
// GOROOT/src (a machine without Go, or a test).
const EnvGoSource = "CROWDTRAIN_GO_SOURCE"

// ErrGoSourceNotFound is wrapped by GoSourceSource's error when no Go
// source tree is found.
var ErrGoSourceNotFound = errors.New("the Go toolchain's source (GOROOT/src) was not found")

// GoSourceFix says how to get the Go source or use other text.
const GoSourceFix = "install Go (https://go.dev/dl, or apt-get install golang-go), set $" + EnvGoSource +
	" to a directory of Go source, or pass --data DIR naming a tree of text files"

// GoSourceSource loads go-source: the tree GoSourceDir finds, by
// GoSourceGlob, with GoSourceValFraction of its files held out.
type GoSourceSource struct{}

func (GoSourceSource) Load(o Options) (train, test *Set, err error) {
	dir, err := GoSourceDir()
	if err != nil {
		return nil, nil, err
	}
	tree, err := ReadTextTree(dir, GoSourceGlob, GoSourceValFraction)
	if err != nil {
		return nil, nil, err
	}
	return treeSplits(GoSource, "dataset", tree, o)
}
