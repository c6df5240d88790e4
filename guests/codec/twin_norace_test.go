//go:build !race

package main

import "testing"

// TestTwinDifferentialWhole is TestTwinDifferential over the whole
// generated corpus (a tenth with -short). make test runs it in its pass
// without the race detector.
func TestTwinDifferentialWhole(t *testing.T) {
	n := *twinInputs
	if testing.Short() {
		n /= 10
	}
	twinDifferential(t, n)
}
