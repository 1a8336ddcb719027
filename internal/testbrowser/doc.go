// Package testbrowser is what the browser tests of several packages share:
// finding Chromium, starting it headless with the flags this machine needs,
// opening tabs, copying their console to the test log, and building the
// browser worker from the working tree. Tests only; of ours it imports only
// internal/testenv and web (for the names of the worker's files).
package testbrowser
