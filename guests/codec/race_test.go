//go:build race

package main

// raceEnabled: the race detector slows the twins' Wasm calls about fivefold;
// TestTwinDifferential then sends a tenth of its corpus (make test runs the
// whole corpus once more without it).
const raceEnabled = true
