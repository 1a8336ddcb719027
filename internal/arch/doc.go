// Package arch holds no code, only tests that keep the architecture of
// docs/ARCHITECTURE.md true: which packages may import which, what the
// browser and GPU builds may link, and one package doc per package.
package arch
