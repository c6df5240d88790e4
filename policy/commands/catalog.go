// Package commands owns caphost's closed Redis command catalog: the embedded
// commands.yaml, its strict parser, and the immutable Catalog that the guard
// (runtime/guard) consults before any command reaches the wire.
//
// The catalog is default-deny: a command or COMMAND|SUBCOMMAND that has no
// entry is unknown and is never sent. Adding a command means adding an entry
// to commands.yaml (and a test); the invariants checked by Parse (risk versus
// support, retry safety versus idempotency, TTL duties) must not be relaxed
// here to make an entry fit. This package is plain data plus validation: it
// imports no Redis client.
package commands

import (
	_ "embed"
	"slices"
	"strconv"
	"strings"

	"github.com/caphost/caphost/policy"
)

//go:embed commands.yaml
var defaultYAML []byte

// Default parses the embedded catalog. Each call returns a new, independent
// Catalog (there is no package-level cache, hence no shared mutable state).
func Default() (*Catalog, error) { return Parse(defaultYAML) }

// DefaultYAML returns a copy of the embedded catalog source (for tooling
// such as `caphost check` that prints or diffs it).
func DefaultYAML() []byte { return slices.Clone(defaultYAML) }

// Risk classifies how much harm a command can do.
type Risk uint8

// The closed set of risks.
const (
	_ Risk = iota
	// R1 is a bounded, single-key, ordinary command.
	R1
	// R2 is O(N), multi-key, large-reply, blocking or large-payload.
	R2
	// R3 is server, client, ACL or topology administration: never on the
	// application path.
	R3
	// R4 is destructive: blocked everywhere.
	R4
)

// String returns "R1".."R4".
func (r Risk) String() string {
	if r >= R1 && r <= R4 {
		return "R" + strconv.Itoa(int(r))
	}
	return "R?"
}

// Support is how caphost exposes a command.
type Support string

// The closed set of support classes.
const (
	// SupportTyped commands back the typed runtime facades.
	SupportTyped Support = "typed"
	// SupportAdvancedTyped commands need a bounded shape (multi-key, range)
	// and are used only by specific typed facades.
	SupportAdvancedTyped Support = "advanced-typed"
	// SupportAdminOnly commands run on the admin lane only.
	SupportAdminOnly Support = "admin-only"
	// SupportConnection commands are sent by go-redis itself to set up a
	// connection or discover topology (HELLO, SELECT, CLUSTER SLOTS, ...).
	SupportConnection Support = "connection"
	// SupportBlocked commands are never sent.
	SupportBlocked Support = "blocked"
)

func (s Support) valid() bool {
	switch s {
	case SupportTyped, SupportAdvancedTyped, SupportAdminOnly, SupportConnection, SupportBlocked:
		return true
	}
	return false
}

// CreatesKey states whether a command can create a key, and under which duty.
type CreatesKey string

// The closed set of key-creation duties.
const (
	// CreatesNo: the command never creates a key.
	CreatesNo CreatesKey = "no"
	// CreatesWithTTL: the command may create a key and must carry one of the
	// entry's TTL options (e.g. SET ... PX 500).
	CreatesWithTTL CreatesKey = "ttl"
	// CreatesProgramOnly: the command creates keys without a TTL, so it is
	// allowed only inside catalog programs that set one atomically; the guard
	// rejects it when sent directly.
	CreatesProgramOnly CreatesKey = "program-only"
)

// Reply is the declared bound class of a command's reply. The guard measures
// every decoded reply against the lane budget whatever the class; the class
// adds a pre-send check where the request itself bounds the reply.
type Reply string

// The closed set of reply classes.
const (
	// ReplyScalar: an integer, status or small fixed-shape reply.
	ReplyScalar Reply = "scalar"
	// ReplyBounded: bounded by the stored value(s) it returns, which the
	// request budget and key-builder bounds keep small.
	ReplyBounded Reply = "bounded"
	// ReplyRangeBounded: bounded by a byte range in the request
	// (GETRANGE key start end); checked before sending.
	ReplyRangeBounded Reply = "range-bounded"
	// ReplyCollection: a server-sized collection (COUNT-limited streams,
	// topology, INFO); only the measured reply budget bounds it.
	ReplyCollection Reply = "collection"
)

func (r Reply) valid() bool {
	switch r {
	case ReplyScalar, ReplyBounded, ReplyRangeBounded, ReplyCollection:
		return true
	}
	return false
}

// Entry is one catalog entry: a command or a COMMAND|SUBCOMMAND.
type Entry struct {
	// Name is the canonical upper-case name, e.g. "GET" or "CONFIG|GET".
	Name string
	// Lanes that may carry the command, in policy.Lanes() order. Empty for
	// blocked entries.
	Lanes []policy.Lane
	// Risk and Support are the two orthogonal classifications.
	Risk    Risk
	Support Support
	// ReadOnly commands never modify data.
	ReadOnly bool
	// RetrySafe commands may be repeated after an ambiguous failure.
	RetrySafe bool
	// Idempotent writes produce the same state when repeated.
	Idempotent bool
	// Keys locates the key arguments.
	Keys KeySpec
	// Channels locates Pub/Sub channel arguments, which must carry the
	// namespace like keys but do not hash to slots.
	Channels KeySpec
	// CreatesKey and TTLOptions state the TTL duty of key-creating writes.
	CreatesKey CreatesKey
	// TTLOptions are the option tokens (upper case) of which one must be
	// present when CreatesKey is CreatesWithTTL.
	TTLOptions []string
	// OptionsFrom is the argument index where options start (0 = not used).
	OptionsFrom int
	// MaxArgs bounds the argument count, command name included.
	MaxArgs int
	// Reply is the declared reply bound class.
	Reply Reply
	// Note is free text: why the entry is shaped (or blocked) this way.
	Note string
}

// Blocked reports whether the command is never sent.
func (e Entry) Blocked() bool { return e.Support == SupportBlocked }

// AllowsLane reports whether l may carry the command.
func (e Entry) AllowsLane(l policy.Lane) bool { return slices.Contains(e.Lanes, l) }

// KeyPositions returns the indexes into args (as from go-redis cmd.Args())
// that hold keys. It fails with a *ArgsError when args do not have the shape
// the spec requires (too few arguments, bad numkeys, no STREAMS section).
func (e Entry) KeyPositions(args []any) ([]int, error) {
	return e.Keys.Positions(e.Name, args)
}

// AppendKeyPositions is KeyPositions appending to dst.
func (e Entry) AppendKeyPositions(dst []int, args []any) ([]int, error) {
	return e.Keys.AppendPositions(dst, e.Name, args)
}

// ChannelPositions is KeyPositions for Pub/Sub channel arguments.
func (e Entry) ChannelPositions(args []any) ([]int, error) {
	return e.Channels.Positions(e.Name, args)
}

// Catalog is an immutable, validated command catalog.
//
// Lookup hands out pointers to the catalog's own entries (copying a ~240-byte
// Entry twice per command showed in profiles). An Entry reached through a
// Catalog is shared by every caller and must never be written, nor its
// slices (Lanes, TTLOptions) appended to or modified.
type Catalog struct {
	entries map[string]*Entry
	// parents holds command names that have subcommand entries: for them the
	// lookup key is COMMAND|SUBCOMMAND and the bare name is never an entry.
	parents map[string]bool
	names   []string
	// exact resolves a plain (non-parent) command token spelled exactly as
	// go-redis sends it (lower case) or canonically (upper case) with one
	// map probe and no case folding: Lookup runs twice per command on the
	// hot path. Every other spelling takes the folding path, so the result
	// never depends on which path answered.
	exact map[string]*Entry
}

// index builds exact from entries; called once by the parser.
func (c *Catalog) index() {
	c.exact = make(map[string]*Entry, 2*len(c.entries))
	for name := range c.entries {
		if strings.Contains(name, "|") || c.parents[name] {
			continue
		}
		e := c.entries[name]
		c.exact[name] = e
		c.exact[strings.ToLower(name)] = e
	}
}

// Len returns the number of entries.
func (c *Catalog) Len() int { return len(c.entries) }

// Names returns every entry name, sorted (for metrics label pre-registration).
func (c *Catalog) Names() []string { return slices.Clone(c.names) }

// Entry returns the entry with the canonical name (e.g. "CONFIG|GET").
func (c *Catalog) Entry(name string) (Entry, bool) {
	if e, ok := c.entries[name]; ok {
		return *e, true
	}
	return Entry{}, false
}

// maxNameLen bounds a command token; longer tokens cannot be in the catalog,
// so they are not upper-cased at all.
const maxNameLen = 40

// Lookup resolves args (go-redis cmd.Args(): name first, any case) to an
// entry: COMMAND|SUBCOMMAND when the command has subcommand entries,
// otherwise COMMAND. A subcommand without its own entry is unknown: there is
// no fall-back to the parent.
//
// The entry is the catalog's own (nil when unknown): read it, never write it
// (see Catalog).
func (c *Catalog) Lookup(args []any) (*Entry, bool) {
	if c == nil || len(args) == 0 {
		return nil, false
	}
	if s, ok := args[0].(string); ok {
		if e, ok := c.exact[s]; ok {
			return e, true
		}
	}
	var buf [2*maxNameLen + 1]byte
	n, ok := appendUpper(buf[:0], args[0])
	if !ok {
		return nil, false
	}
	name := n
	if c.parents[string(name)] {
		if len(args) < 2 {
			return nil, false
		}
		name = append(name, '|')
		name, ok = appendUpper(name, args[1])
		if !ok {
			return nil, false
		}
	}
	e, found := c.entries[string(name)] // no allocation: map index with string(bytes)
	return e, found
}

// appendUpper appends the upper-cased command token a to dst. It refuses
// non-string tokens and tokens longer than maxNameLen.
func appendUpper(dst []byte, a any) ([]byte, bool) {
	var s string
	switch v := a.(type) {
	case string:
		s = v
	case []byte:
		if len(v) > maxNameLen {
			return dst, false
		}
		s = string(v)
	default:
		return dst, false
	}
	if len(s) == 0 || len(s) > maxNameLen {
		return dst, false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch == '|' {
			return dst, false // the separator is ours, never the caller's
		}
		if 'a' <= ch && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		dst = append(dst, ch)
	}
	return dst, true
}
