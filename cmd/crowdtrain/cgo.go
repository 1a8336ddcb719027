//go:build cgo

package main

func init() { cgoEnabled = true }
