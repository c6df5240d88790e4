//go:build !race

package guests

const raceEnabled = false
