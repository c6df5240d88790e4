//go:build race

package wasmtest

const raceEnabled = true
