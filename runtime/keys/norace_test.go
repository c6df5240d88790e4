//go:build !race

package keys

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are only exact without it.
const raceEnabled = false
