//go:build !race

package envelope_test

const raceEnabled = false
