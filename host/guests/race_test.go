//go:build race

package guests

const raceEnabled = true
