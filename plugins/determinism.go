package plugins

import (
	"fmt"
	"reflect"
)

// The determinism checks of the conformance suite (ABI.md §2). Each kind's
// check asks every input of its sample twice in a row where it first meets
// it (so a guest that differs on an immediate repeat fails), then hands the
// inputs that answered to repeatInterleaved, which asks each of them
// determinismRounds more times, every time after other inputs, and compares
// every answer with the input's first.

// determinismRounds is how many interleaved repetitions every input gets
// after its first two calls: a guest whose answer to an input changes on
// one of that input's first 2+determinismRounds calls is caught, one that
// changes later is not (ABI.md §2 says what the host cannot detect).
const determinismRounds = 3

// probe is one sampled input of a determinism check.
type probe struct {
	// group names the check the probe belongs to (a region or template id;
	// "" for a kind-wide check); where names the input in reports.
	group, where string
	// call asks the guest again; first and firstErr are its first answer.
	call     func() (any, error)
	first    any
	firstErr error
}

// sameAnswer reports whether two outcomes of one input are equal: equal
// answers, or errors with the same text (guest statuses carry their code
// and detail in it).
func sameAnswer(a any, aErr error, b any, bErr error) bool {
	if (aErr == nil) != (bErr == nil) {
		return false
	}
	if aErr != nil {
		return aErr.Error() == bErr.Error()
	}
	return reflect.DeepEqual(a, b)
}

// repeatInterleaved asks every probe determinismRounds more times in the
// rounds of interleavedRounds and returns, per group, one line per probe
// whose answer ever differed from its first ("where: call N differs from
// call 1", counting the two first calls).
func repeatInterleaved(probes []probe) map[string][]string {
	out := map[string][]string{}
	failed := make([]bool, len(probes))
	for r, order := range interleavedRounds(len(probes), determinismRounds) {
		for _, i := range order {
			p := &probes[i]
			got, err := p.call()
			if failed[i] || sameAnswer(p.first, p.firstErr, got, err) {
				continue
			}
			failed[i] = true
			out[p.group] = append(out[p.group], fmt.Sprintf("%s: call %d differs from call 1", p.where, r+3))
		}
	}
	return out
}

// interleavedRounds returns rounds orders of 0..n-1. Each round is a
// permutation, so within a round an input is never asked twice in a row;
// the rounds walk the inputs differently (reversed; the two halves
// interleaved; odd inputs up, then even ones down; then again, rotated), so
// an input's neighbours change from round to round; and a round never
// starts with the input the previous one ended with. The sample's first
// pass (0..n-1, each asked twice) counts as the round before the first, so
// input n-1 is not asked three times in a row either. With n < 2 there is
// nothing to interleave: the one input is simply asked again.
func interleavedRounds(n, rounds int) [][]int {
	out := make([][]int, 0, rounds)
	prev := n - 1 // the sample's first pass ends with input n-1
	for r := range rounds {
		order := make([]int, 0, n)
		switch r % 3 {
		case 0:
			for i := n - 1; i >= 0; i-- {
				order = append(order, i)
			}
		case 1:
			h := (n + 1) / 2
			for i := range h {
				order = append(order, i)
				if i+h < n {
					order = append(order, i+h)
				}
			}
		case 2:
			for i := 1; i < n; i += 2 {
				order = append(order, i)
			}
			for i := (n - 1) &^ 1; i >= 0; i -= 2 {
				order = append(order, i)
			}
		}
		if k := r / 3; n > 0 && k > 0 {
			order = append(order[k%n:], order[:k%n]...)
		}
		if n > 1 && order[0] == prev {
			order = append(order[1:], order[0])
		}
		if n > 0 {
			prev = order[n-1]
		}
		out = append(out, order)
	}
	return out
}
