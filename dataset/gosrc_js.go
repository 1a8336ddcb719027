package dataset

import "fmt"

// GoSourceDir finds no Go source in a browser: the coordinator loads data
// sets, workers only decode shards.
func GoSourceDir() (string, error) {
	return "", &KeyError{Key: "dataset", Problem: fmt.Sprintf("%s: %v: a browser has no Go toolchain", GoSource, ErrGoSourceNotFound), Err: ErrGoSourceNotFound}
}
