//go:build !race

package plugins

import "testing"

// TestManagerSwapUnderLoadFull is TestManagerSwapUnderLoad at the issue's
// 100 swaps, under the same leak bound, which holds only without the race
// detector (see TestManagerSwapUnderLoad).
func TestManagerSwapUnderLoadFull(t *testing.T) { swapUnderLoad(t, 100) }
