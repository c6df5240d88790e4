package capability_test

import (
	"fmt"

	"github.com/caphost/caphost/host/capability"
)

// A capability claims its readiness in code; a deployment can only lower it.
func ExampleEffectiveReadiness() {
	claimed := capability.R2
	// The operator co-located a correctness role with the evictable cache.
	got := capability.EffectiveReadiness(claimed, []capability.Downgrade{capability.DowngradeUnsafeColocation})
	fmt.Println(claimed, "->", got, got.Meaning())
	// Output: R2 -> R1 local
}
