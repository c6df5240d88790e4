//go:build !linux

package main

// hardenProcess has nothing to do where PR_SET_DUMPABLE does not exist.
func hardenProcess() error { return nil }
