//go:build race

package extism

const raceEnabled = true
