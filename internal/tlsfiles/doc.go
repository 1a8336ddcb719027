// Package tlsfiles serves a TLS certificate from files an operator (or
// certbot) replaces while the process runs, and reads a private CA for the
// clients of such a server. The serving side keeps the pair it has when a
// replacement fails to load or has expired, so a bad renewal never takes a
// coordinator off the air. It imports nothing of ours.
package tlsfiles
