//go:build !unix

package dataset

// openNonblock is 0 where there is no O_NONBLOCK (Windows, js): the
// checks before and after the open still refuse what is not a regular
// file.
const openNonblock = 0
