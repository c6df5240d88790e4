package capability

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// CardItem is one of the 13 items every capability card holds, in order.
type CardItem int

// The card items, in the order a card lists them.
const (
	ItemOwner CardItem = iota + 1
	ItemProviders
	ItemGuarantees
	ItemFailureMode
	ItemTopology
	ItemConfiguration
	ItemHealth
	ItemObservability
	ItemFit
	ItemUnsafeRecipes
	ItemTests
	ItemUpgrade
	ItemRunbook
)

// CardItems is the number of items on a card.
const CardItems = 13

var itemTitles = [CardItems + 1]string{
	ItemOwner:         "Owner module and semantic port",
	ItemProviders:     "Provider IDs and readiness level",
	ItemGuarantees:    "Guarantees and explicit non-guarantees",
	ItemFailureMode:   "Default failure mode and allowed overrides",
	ItemTopology:      "Required topology and persistence/eviction policy",
	ItemConfiguration: "Configuration and secrets",
	ItemHealth:        "Liveness and readiness impact",
	ItemObservability: "Bounded-cardinality metrics and trace spans",
	ItemFit:           "Fit, non-fit, cost model and resource bounds",
	ItemUnsafeRecipes: "Unsafe recipes, the failure they create, the safe replacement",
	ItemTests:         "Focused, integration and failure tests",
	ItemUpgrade:       "Rolling upgrade and recovery",
	ItemRunbook:       "Runbook",
}

// Title returns the item's heading text.
func (i CardItem) Title() string {
	if i < ItemOwner || i > ItemRunbook {
		return ""
	}
	return itemTitles[i]
}

// Heading returns the item's exact markdown heading, e.g.
// "## 2. Provider IDs and readiness level".
func (i CardItem) Heading() string { return fmt.Sprintf("## %d. %s", int(i), i.Title()) }

// MaxCardBytes bounds a card.
const MaxCardBytes = 64 << 10

// Card is a parsed capability card: a markdown document whose first line is
// "# <title>" and which then holds exactly the 13 item headings, in order,
// each followed by non-empty text. Item 2 states the readiness level on a
// line of its own, "Readiness: R<n>".
type Card struct {
	Title     string
	Readiness Readiness
	sections  [CardItems + 1]string
}

// Section returns the text under item i (trimmed).
func (c *Card) Section(i CardItem) string {
	if i < ItemOwner || i > ItemRunbook {
		return ""
	}
	return c.sections[i]
}

// ErrInvalidCard is matched by ParseCard's errors.
var ErrInvalidCard = errors.New("capability: invalid card")

var readinessLine = regexp.MustCompile(`^Readiness: (R[0-9])$`)

// ParseCard parses and checks a card, reporting every problem.
func ParseCard(b []byte) (*Card, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidCard, fmt.Sprintf(format, args...)))
	}
	if len(b) > MaxCardBytes {
		bad("larger than %d bytes", MaxCardBytes)
		return nil, errors.Join(errs...)
	}
	if !utf8.Valid(b) {
		bad("not UTF-8")
		return nil, errors.Join(errs...)
	}
	c := &Card{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), MaxCardBytes)
	var (
		cur      CardItem // 0: before the first item
		next     = ItemOwner
		body     strings.Builder
		first    = true
		readings []string
	)
	flush := func() {
		if cur != 0 {
			c.sections[cur] = strings.TrimSpace(body.String())
		}
		body.Reset()
	}
	inFence := false
	for sc.Scan() {
		line := sc.Text()
		if first {
			first = false
			t, ok := strings.CutPrefix(line, "# ")
			if !ok || strings.TrimSpace(t) == "" {
				bad(`the first line must be "# <title>"`)
			}
			c.Title = strings.TrimSpace(t)
			continue
		}
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(line, "## ") {
			flush()
			if next > ItemRunbook {
				bad("extra section %q after item 13", line)
				cur = 0
				continue
			}
			if line != next.Heading() {
				bad("section %d must be %q, got %q", int(next), next.Heading(), line)
			}
			cur, next = next, next+1
			continue
		}
		if !inFence && strings.HasPrefix(line, "# ") {
			bad("a second title %q", line)
		}
		if cur == ItemProviders {
			if m := readinessLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
				readings = append(readings, m[1])
			}
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	flush()
	if err := sc.Err(); err != nil {
		bad("%v", err)
	}
	if next <= ItemRunbook {
		bad("missing items %d–13 (next expected %q)", int(next), next.Heading())
	}
	for i := ItemOwner; i < next && i <= ItemRunbook; i++ {
		if c.sections[i] == "" {
			bad("item %d (%s) is empty", int(i), i.Title())
		}
	}
	switch len(readings) {
	case 0:
		bad(`item 2 has no "Readiness: R<n>" line`)
	case 1:
		r, err := ParseReadiness(readings[0])
		if err != nil {
			bad("%v", err)
		}
		c.Readiness = r
	default:
		bad(`item 2 states its readiness %d times`, len(readings))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// TestRef is one `go test` command a card names as evidence: the package
// patterns it runs and the test names of its -run pattern (empty: all).
type TestRef struct {
	Command  string
	Packages []string
	Tests    []string
}

var (
	codeSpan  = regexp.MustCompile("`(go test [^`]+)`")
	runFlag   = regexp.MustCompile(`-run[ =]'([^']+)'`)
	testIdent = regexp.MustCompile(`^(Test|Fuzz|Example)[A-Za-z0-9_]*$`)
)

// Tests returns the `go test` commands named in item 11 (each in a code
// span). A -run pattern must be a plain alternation of test names,
// optionally anchored: '^(TestA|TestB)$' or 'TestA|TestB'; anything else is
// an error, because evidence a reader cannot resolve to named tests is not
// evidence.
func (c *Card) Tests() ([]TestRef, error) {
	var out []TestRef
	var errs []error
	for _, m := range codeSpan.FindAllStringSubmatch(c.Section(ItemTests), -1) {
		cmd := m[1]
		ref := TestRef{Command: cmd}
		for _, f := range strings.Fields(cmd) {
			if strings.HasPrefix(f, "./") {
				ref.Packages = append(ref.Packages, f)
			}
		}
		if len(ref.Packages) == 0 {
			errs = append(errs, fmt.Errorf("%w: %q names no ./package", ErrInvalidCard, cmd))
		}
		if rm := runFlag.FindStringSubmatch(cmd); rm != nil {
			pat := strings.TrimSuffix(strings.TrimPrefix(rm[1], "^"), "$")
			pat = strings.TrimSuffix(strings.TrimPrefix(pat, "("), ")")
			for _, name := range strings.Split(pat, "|") {
				if !testIdent.MatchString(name) {
					errs = append(errs, fmt.Errorf("%w: %q: -run names %q, not a test", ErrInvalidCard, cmd, name))
					continue
				}
				ref.Tests = append(ref.Tests, name)
			}
		} else if strings.Contains(cmd, "-run") {
			errs = append(errs, fmt.Errorf("%w: %q: quote the -run pattern with single quotes", ErrInvalidCard, cmd))
		}
		out = append(out, ref)
	}
	return out, errors.Join(errs...)
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Links returns the targets of the markdown links in item i, as written.
func (c *Card) Links(i CardItem) []string {
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(c.Section(i), -1) {
		out = append(out, m[1])
	}
	return out
}
