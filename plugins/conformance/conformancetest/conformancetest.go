// Package conformancetest holds the assertions the guest flavours' tests
// make on a conformance report. It is imported by tests only.
package conformancetest

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

// Failure is a check a report must fail: of Kind, with a detail holding
// every string of Detail.
type Failure struct {
	Kind   abi.Kind
	Detail []string
}

// ExactFailures asserts that rep fails exactly the checks of want (each
// also named in the bounded summary) and passes every other check. It
// returns how many checks ran per kind, so a caller can assert that a kind
// ran its suite rather than passed vacuously.
func ExactFailures(t testing.TB, rep plugins.ConformanceReport, want map[string]Failure) map[abi.Kind]int {
	t.Helper()
	assert.False(t, rep.OK(), "a report with expected failures")
	left := make(map[string]Failure, len(want))
	for name, f := range want {
		left[name] = f
	}
	kinds := map[abi.Kind]int{}
	for _, c := range rep.Checks {
		kinds[c.Kind]++
		w, isWanted := left[c.Name]
		if !isWanted {
			assert.Equal(t, plugins.CheckPass, c.Status, "%s [%s]: %s", c.Name, c.Kind, c.Detail)
			continue
		}
		delete(left, c.Name)
		assert.Equal(t, plugins.CheckFail, c.Status, c.Name)
		assert.Equal(t, w.Kind, c.Kind, c.Name)
		for _, s := range w.Detail {
			assert.Contains(t, c.Detail, s, c.Name)
		}
		assert.Contains(t, rep.Summary(), c.Name+": ")
	}
	assert.Empty(t, left, "checks that did not run")
	return kinds
}
