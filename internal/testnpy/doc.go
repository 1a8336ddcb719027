// Package testnpy writes .npy files as numpy.save does, for the tests of
// the npy reader and of jobs trained on npy data. Tests only; it imports
// nothing of ours.
package testnpy
