// Package dist builds the release archives of `make dist`: the worker build
// of cmd/crowdtrain (CGO_ENABLED=0) for every volunteer platform, one
// .tar.gz (or .zip for Windows) per target holding the binary and the
// README, and a SHA256SUMS in sha256sum's format (docs/DIST.md).
//
// The archives are reproducible: the binaries are built with -trimpath and
// an empty build id, the version and commit stamped with -X, and the
// archives hold their files in a fixed order with a fixed time, owner and
// mode. Two builds of one commit with one Go give the same checksums.
//
// It runs the go command and git; it imports nothing of ours.
package dist
