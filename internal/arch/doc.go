// Package arch holds no code, only tests that keep the architecture of
// DESIGN.md true: which packages may import which, and one package doc
// per package.
package arch
