package dataset

import "fmt"

// BibleText runs `bible`, which a browser cannot: the coordinator loads
// data sets, workers only decode shards.
func BibleText() ([]byte, error) {
	return nil, &KeyError{Key: "dataset", Problem: fmt.Sprintf("%s: %v: a browser runs no programs", BibleKJV, ErrBibleNotFound), Err: ErrBibleNotFound}
}
