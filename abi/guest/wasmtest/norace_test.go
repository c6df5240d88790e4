//go:build !race

package wasmtest

const raceEnabled = false
