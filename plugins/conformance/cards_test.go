package conformance_test

import (
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins/conformance"
)

// cardHeadings are the 13 item headings of a capability card, in order. They
// repeat host/capability's CardItem.Heading() because plugins may not import
// host; the full ParseCard and evidence check of these cards runs in package
// host, so a drift between the two lists fails there.
var cardHeadings = []string{
	"## 1. Owner module and semantic port",
	"## 2. Provider IDs and readiness level",
	"## 3. Guarantees and explicit non-guarantees",
	"## 4. Default failure mode and allowed overrides",
	"## 5. Required topology and persistence/eviction policy",
	"## 6. Configuration and secrets",
	"## 7. Liveness and readiness impact",
	"## 8. Bounded-cardinality metrics and trace spans",
	"## 9. Fit, non-fit, cost model and resource bounds",
	"## 10. Unsafe recipes, the failure they create, the safe replacement",
	"## 11. Focused, integration and failure tests",
	"## 12. Rolling upgrade and recovery",
	"## 13. Runbook",
}

var readinessLine = regexp.MustCompile(`^Readiness: R[0-3]$`)

// kindsOfExports lists every guest kind, taken from the ABI's exports rather
// than a list kept here, so a kind added to the ABI without a card fails.
func kindsOfExports() []abi.Kind {
	var out []abi.Kind
	seen := map[abi.Kind]bool{}
	for e := abi.ExportDescribe; e.Valid(); e++ {
		if k := e.Kind(); k != "" && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// cardSections splits a card into its title and the text under each "## "
// heading outside code fences, the way ParseCard reads it.
func cardSections(card string) (title string, headings, bodies []string) {
	lines := strings.Split(card, "\n")
	title = lines[0]
	inFence := false
	for _, line := range lines[1:] {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(line, "## ") {
			headings = append(headings, line)
			bodies = append(bodies, "")
			continue
		}
		if len(bodies) > 0 {
			bodies[len(bodies)-1] += line + "\n"
		}
	}
	return title, headings, bodies
}

func TestKindCards(t *testing.T) {
	kinds := kindsOfExports()
	require.Len(t, kinds, 4, "ABI v1 has four guest kinds")
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			b, ok := conformance.KindCard(k)
			require.True(t, ok, "guest kind %s has no card: add cards/%s.md", k, k)
			title, headings, bodies := cardSections(string(b))
			assert.True(t, strings.HasPrefix(title, "# ") && strings.TrimSpace(title[2:]) != "", "first line %q", title)
			require.Equal(t, cardHeadings, headings, "the 13 item headings, in order, exactly once")
			for i, body := range bodies {
				assert.NotEmpty(t, strings.TrimSpace(body), "%s is empty", headings[i])
			}
			var readiness []string
			for _, line := range strings.Split(bodies[1], "\n") {
				if readinessLine.MatchString(strings.TrimSpace(line)) {
					readiness = append(readiness, line)
				}
			}
			assert.Len(t, readiness, 1, `item 2 states "Readiness: R<n>" exactly once`)
			assert.Contains(t, bodies[10], "`go test ./", "item 11 names its evidence as go test commands")

			// The copy is the caller's: changing it does not change the card.
			b[0] = 'x'
			again, _ := conformance.KindCard(k)
			assert.Equal(t, byte('#'), again[0])
		})
	}

	// Every card file is a kind's card: a misspelt name would be a card
	// nothing ever reads.
	files, err := fs.Glob(os.DirFS("cards"), "*.md")
	require.NoError(t, err)
	var names []string
	for _, k := range kinds {
		names = append(names, string(k)+".md")
	}
	assert.ElementsMatch(t, names, files)

	for _, k := range []abi.Kind{"", "lua", "../conformance", "cards/codec", "Codec"} {
		_, ok := conformance.KindCard(k)
		assert.False(t, ok, "%q is not a kind", k)
	}
}
