package rlsconfig

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds of a configuration and of a descriptor. They bound memory and the
// work of one match; a file or request beyond them is refused, never
// truncated.
const (
	// MaxFileBytes bounds one configuration file.
	MaxFileBytes = 1 << 20
	// MaxDomainBytes bounds a domain name.
	MaxDomainBytes = 256
	// MaxKeyBytes and MaxValueBytes bound a descriptor entry's key and value.
	MaxKeyBytes   = 256
	MaxValueBytes = 1024
	// MaxDepth bounds the nesting of descriptors, and so the entries of a
	// descriptor that can match anything.
	MaxDepth = 16
	// MaxNodes bounds the descriptors of one configuration (all files).
	MaxNodes = 100_000
	// MaxNameBytes bounds a rate_limit name.
	MaxNameBytes = 256
	// MaxDetailedRules bounds the rules with detailed_metric: true (of all
	// files), and so the rule label values of the Envoy service's
	// per-rule metric.
	MaxDetailedRules = 256
)

// Unit is a rate_limit unit.
type Unit uint8

// The units, every one of envoyproxy/ratelimit's. Year is 365 days, longer
// than every caphost rate algorithm's window but the fixed window's (up to
// 366 days): a year rule needs algorithm fixed-window.
const (
	_ Unit = iota
	Second
	Minute
	Hour
	Day
	Week
	Month
	Year
)

var unitNames = map[string]Unit{"second": Second, "minute": Minute, "hour": Hour, "day": Day, "week": Week, "month": Month, "year": Year}

// String is the unit's name as the YAML spells it.
func (u Unit) String() string {
	for n, v := range unitNames {
		if v == u {
			return n
		}
	}
	return "unknown"
}

// Duration is the unit's length, as envoyproxy/ratelimit counts it
// (UnitToDivider: a month is 30 days, a year 365).
func (u Unit) Duration() time.Duration {
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// Entry is one key/value pair of a descriptor.
type Entry struct{ Key, Value string }

// Rule is a descriptor with a rate_limit block: the limit a matching
// request descriptor gets.
type Rule struct {
	// Domain and Path locate the rule: Path is the chain of configured
	// entries from the top level down to the rule (a value-less entry has
	// Value "", a wildcard entry its pattern).
	Domain string
	Path   []Entry
	// Name is rate_limit.name ("" when absent).
	Name string
	// Unlimited rules are never counted.
	Unlimited bool
	// Unit and RequestsPerUnit are the limit (Unit 0 when Unlimited).
	// RequestsPerUnit 0 denies every request (envoyproxy/ratelimit's
	// "black list" idiom).
	Unit            Unit
	RequestsPerUnit uint32
	// Shadow rules are counted but always answer OK.
	Shadow bool
	// DetailedMetric: the Envoy service counts the rule's outcomes in a
	// per-rule metric labelled with its KeyPath (see the package doc).
	DetailedMetric bool
	// Caphost is the rule's caphost block (nil when absent): what
	// envoyproxy/ratelimit's format cannot say.
	Caphost *Extension
	// Where locates the rule in its file ("file:line: path"), for
	// problems found after parsing.
	Where string
	file  string
	line  int
	path  string
}

// ID is a stable identity of the rule's place in the configuration (domain
// and path), independent of its limit: the lower-hex Digest of its domain
// and path.
func (r *Rule) ID() string { return hex.EncodeToString(Digest(r.Domain, r.Path)) }

// KeyPath names the rule by its place in the configuration as written:
// the domain, then each entry of its path — the key, and for an entry
// with a value `="value"` (Go-quoted; a wildcard's pattern as written) —
// separated by spaces, for example `messaging message_type="marketing"
// to_number`. A domain or key that is empty or holds a space, `=`, a
// quote, a backslash or an unprintable character is Go-quoted too, so two
// rules never share a key path. It holds configured text only, never a
// request's value.
func (r *Rule) KeyPath() string {
	var b strings.Builder
	b.WriteString(pathToken(r.Domain))
	for _, e := range r.Path {
		b.WriteByte(' ')
		b.WriteString(pathToken(e.Key))
		if e.Value != "" {
			b.WriteByte('=')
			b.WriteString(strconv.Quote(e.Value))
		}
	}
	return b.String()
}

func pathToken(s string) string {
	if s == "" || strings.ContainsAny(s, " =\"\\") || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// Digest is the sha256 of a domain and entries, each length-prefixed, so
// that no two different descriptors share a digest. The Envoy service keys
// a request descriptor's counter by it.
func Digest(domain string, es []Entry) []byte {
	h := sha256.New()
	var n [4]byte
	lp := func(s string) {
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	lp(domain)
	for _, e := range es {
		lp(e.Key)
		lp(e.Value)
	}
	return h.Sum(nil)
}

// node is one level of a domain's descriptor tree.
type node struct {
	rule *Rule
	// exact holds the entries with a value (patterns included: a request
	// value equal to the pattern text matches it exactly first, as
	// upstream); wild the pattern entries in file order; byKey the
	// value-less entries.
	exact map[Entry]*node
	wild  []wildEntry
	byKey map[string]*node
}

type wildEntry struct {
	key   string
	parts []string // the value split on "*"
	next  *node
}

func newNode() *node { return &node{exact: map[Entry]*node{}, byKey: map[string]*node{}} }

func (n *node) empty() bool { return len(n.exact) == 0 && len(n.byKey) == 0 }

// Config is a loaded, immutable set of domains. It is safe for concurrent
// use.
type Config struct {
	domains map[string]*node
	rules   []*Rule
}

// Domain is one parsed file: a domain and its descriptor tree.
type Domain struct {
	name  string
	file  string
	root  *node
	rules []*Rule
	nodes int
}

// Name is the domain's name.
func (d *Domain) Name() string { return d.name }

// Rules lists the domain's rules in file order.
func (d *Domain) Rules() []*Rule { return append([]*Rule(nil), d.rules...) }

// New combines parsed domains into a Config. A domain defined twice is an
// error (envoyproxy/ratelimit's default; it has an opt-in merge caphost
// does not offer).
func New(domains ...*Domain) (*Config, error) {
	c := &Config{domains: make(map[string]*node, len(domains))}
	var ps Problems
	first := map[string]string{}
	nodes, detailed := 0, 0
	for _, d := range domains {
		if d == nil {
			continue
		}
		if f, dup := first[d.name]; dup {
			ps.add(d.file, "domain", 0, fmt.Sprintf("duplicate domain %q (first in %s)", d.name, f))
			continue
		}
		first[d.name] = d.file
		nodes += d.nodes
		c.domains[d.name] = d.root
		c.rules = append(c.rules, d.rules...)
		for _, r := range d.rules {
			if r.DetailedMetric {
				if detailed++; detailed == MaxDetailedRules+1 {
					ps.add(r.file, r.path+".detailed_metric", r.line, fmt.Sprintf("more than %d rules with detailed_metric: true", MaxDetailedRules))
				}
			}
		}
	}
	if nodes > MaxNodes {
		ps.add("", "", 0, fmt.Sprintf("%d descriptors, at most %d", nodes, MaxNodes))
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// Rules lists every rule of every domain (domains in New's order, rules
// in file order).
func (c *Config) Rules() []*Rule { return append([]*Rule(nil), c.rules...) }

// HasDomain reports whether the domain is configured.
func (c *Config) HasDomain(domain string) bool {
	_, ok := c.domains[domain]
	return ok
}

// Match returns the rule governing a request descriptor of domain, or nil
// when none does (an unknown domain, no match, or a depth that differs from
// every matching rule's). See the package doc for the order of matching.
func (c *Config) Match(domain string, entries []Entry) *Rule {
	n := c.domains[domain]
	if n == nil || len(entries) == 0 {
		return nil
	}
	var rule *Rule
	for i, e := range entries {
		next := n.exact[e]
		if next == nil {
			for _, w := range n.wild {
				if w.key == e.Key && wildcardMatch(w.parts, e.Value) {
					next = w.next
					break
				}
			}
		}
		if next == nil {
			next = n.byKey[e.Key]
		}
		if next == nil {
			return nil
		}
		if next.rule != nil && i == len(entries)-1 {
			rule = next.rule
		}
		if next.empty() {
			break
		}
		n = next
	}
	return rule
}

// wildcardMatch reports whether value matches a pattern split on "*":
// each "*" matches zero or more bytes, in order (envoyproxy/ratelimit's
// algorithm).
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	fixed := 0
	for _, p := range parts {
		fixed += len(p)
	}
	if len(value) < fixed || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// ErrInvalid matches every *Error.
var ErrInvalid = errors.New("rlsconfig: invalid configuration")

// Problem is one configuration problem: where, and why. Reason never
// repeats more than a bounded prefix of a configured value.
type Problem struct {
	File   string
	Path   string // for example descriptors[1].rate_limit.unit
	Line   int    // 0 when unknown
	Reason string
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	if p.Path != "" {
		b.WriteString(": " + p.Path)
	}
	b.WriteString(": " + p.Reason)
	return b.String()
}

// Error lists every problem of a load.
type Error struct{ Problems []Problem }

func (e *Error) Error() string {
	s := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		s[i] = p.String()
	}
	return "rlsconfig: " + strings.Join(s, "; ")
}

// Is reports whether target is ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Problems collects problems.
type Problems []Problem

func (ps *Problems) add(file, path string, line int, reason string) {
	*ps = append(*ps, Problem{File: file, Path: path, Line: line, Reason: reason})
}

func (ps Problems) err() error {
	if len(ps) == 0 {
		return nil
	}
	return &Error{Problems: ps}
}

// clip bounds a configured value quoted in a reason.
func clip(s string) string {
	const n = 64
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "?")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}
