//go:build !race

package extism

const raceEnabled = false
