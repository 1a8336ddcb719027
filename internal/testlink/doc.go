// Package testlink puts a simulated network link between a test's
// clients and a server: Shopify's toxiproxy, run in the test's process,
// with a bandwidth per direction, a latency and a jitter. Every figure
// measured "over a home link" in this repository goes through it. Tests
// and benchmarks only.
package testlink
