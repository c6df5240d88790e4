//go:build race

package envelope_test

const raceEnabled = true
