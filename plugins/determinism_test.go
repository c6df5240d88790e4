package plugins

import (
	"errors"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The interleaved rounds are permutations, never ask an input twice in a
// row (also across rounds and after the first pass, which ends with input
// n-1, and in later rounds than the suite uses), and give inputs different
// neighbours from round to round.
func TestInterleavedRounds(t *testing.T) {
	for n := 0; n <= 130; n++ {
		rounds := interleavedRounds(n, 2*determinismRounds+1)
		require.Len(t, rounds, 2*determinismRounds+1)
		prev := n - 1
		for r, order := range rounds {
			sorted := append([]int(nil), order...)
			sort.Ints(sorted)
			for i := range sorted {
				require.Equal(t, i, sorted[i], "n=%d round %d is not a permutation: %v", n, r, order)
			}
			for _, i := range order {
				if n > 1 {
					require.NotEqual(t, prev, i, "n=%d round %d asks %d twice in a row", n, r, i)
				}
				prev = i
			}
		}
		if n >= 5 {
			// Most successions are new: an input meets different
			// predecessors, not the same one every round.
			first3 := map[[2]int]bool{}
			prev := n - 1
			for _, order := range rounds[:determinismRounds] {
				for _, i := range order {
					first3[[2]int{prev, i}] = true
					prev = i
				}
			}
			assert.Greater(t, len(first3), 2*n, "n=%d", n)
		}
	}
}

// Every repetition is compared with the first answer, and a failure names
// the call that differed.
func TestRepeatInterleaved(t *testing.T) {
	calls := map[string]int{}
	mk := func(group, where string, divergeAt int) probe {
		return probe{group: group, where: where, first: "x", call: func() (any, error) {
			calls[where]++
			if calls[where]+2 == divergeAt { // the first two calls were made by the check itself
				return "y", nil
			}
			return "x", nil
		}}
	}
	failing := probe{where: "err", firstErr: errors.New("status a"), call: func() (any, error) { return nil, errors.New("status b") }}
	out := repeatInterleaved([]probe{mk("g1", "a", 4), mk("g1", "b", 0), mk("g2", "c", 5), failing})
	assert.Equal(t, []string{"a: call 4 differs from call 1"}, out["g1"])
	assert.Equal(t, []string{"c: call 5 differs from call 1"}, out["g2"])
	assert.Equal(t, []string{"err: call 3 differs from call 1"}, out[""])
	assert.Equal(t, determinismRounds, calls["b"], "every input is asked every round")
}
