// Package testdisk gives tests a small disk that can really fill up: a
// tmpfs mounted for the test, and a way to fill it to the last block and
// free it again. Tests only; it imports nothing of ours.
package testdisk
