package commands

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/caphost/caphost/policy"
)

// ErrInvalidCatalog is matched (errors.Is) by every error Parse returns.
var ErrInvalidCatalog = errors.New("invalid command catalog")

// maxCatalogBytes bounds the input; the real catalog is a few tens of KiB.
const maxCatalogBytes = 1 << 20

// maxProblems bounds the aggregated error list so a hostile input cannot
// produce an unbounded error.
const maxProblems = 200

// Problem is one defect found in a catalog. Command and Field are empty when
// the defect is not tied to one.
type Problem struct {
	Line    int
	Command string
	Field   string
	Message string
}

// Error renders "line N: COMMAND.field: message".
func (p *Problem) Error() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Command != "" {
		b.WriteString(p.Command)
		if p.Field != "" {
			b.WriteString("." + p.Field)
		}
		b.WriteString(": ")
	} else if p.Field != "" {
		b.WriteString(p.Field + ": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Is makes errors.Is(problem, ErrInvalidCatalog) true.
func (p *Problem) Is(target error) bool { return target == ErrInvalidCatalog }

// CatalogError aggregates every Problem found by Parse (in input order).
// errors.As(err, **Problem) finds the first; Problems lists all.
type CatalogError struct {
	Problems []*Problem
}

// Error lists every problem on one line.
func (e *CatalogError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Error()
	}
	return fmt.Sprintf("%s: %d problem(s): %s", ErrInvalidCatalog, len(e.Problems), strings.Join(msgs, "; "))
}

// Unwrap exposes each Problem to errors.Is / errors.As.
func (e *CatalogError) Unwrap() []error {
	out := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p
	}
	return out
}

// Is makes errors.Is(err, ErrInvalidCatalog) true even with no problems.
func (e *CatalogError) Is(target error) bool { return target == ErrInvalidCatalog }

var (
	namePart  = `[A-Z][A-Z0-9_-]{0,39}`
	nameRegex = regexp.MustCompile(`^` + namePart + `(\|` + namePart + `)?$`)
	optRegex  = regexp.MustCompile(`^[A-Z][A-Z0-9_-]{0,15}$`)
)

// The closed set of entry fields.
const (
	fLanes       = "lanes"
	fRisk        = "risk"
	fSupport     = "support"
	fReadOnly    = "read-only"
	fRetrySafe   = "retry-safe"
	fIdempotent  = "idempotent"
	fKeys        = "keys"
	fChannels    = "channels"
	fCreatesKey  = "creates-key"
	fTTLOptions  = "ttl-options"
	fOptionsFrom = "options-from"
	fMaxArgs     = "max-args"
	fReply       = "reply"
	fNote        = "note"
)

var knownFields = []string{fLanes, fRisk, fSupport, fReadOnly, fRetrySafe, fIdempotent, fKeys, fChannels,
	fCreatesKey, fTTLOptions, fOptionsFrom, fMaxArgs, fReply, fNote}

// blockedFields are the only fields a blocked entry may carry: it has no
// execution path, so lanes, keys or TTL rules would be dead configuration.
var blockedFields = []string{fRisk, fSupport, fNote}

type parser struct {
	problems []*Problem
	empty    map[string]bool // fields of the current entry reported empty
}

func (p *parser) add(line int, command, field, format string, a ...any) {
	if len(p.problems) == maxProblems {
		p.problems = append(p.problems, &Problem{Message: "too many problems; stopping"})
	}
	if len(p.problems) > maxProblems {
		return
	}
	p.problems = append(p.problems, &Problem{Line: line, Command: command, Field: field, Message: fmt.Sprintf(format, a...)})
}

// Parse strictly parses a catalog. The document is a mapping with exactly
// `version: 1` and `commands:`, a mapping from entry name to a mapping of
// scalar fields (lanes is a sequence). Tabs, anchors, aliases, merge keys,
// explicit tags, indentation other than 0/2/4 (block style), unknown,
// duplicate or empty fields, duplicate commands, invalid enums and broken
// invariants are all reported, every one of them, in a *CatalogError.
func Parse(data []byte) (*Catalog, error) {
	p := &parser{}
	if len(data) > maxCatalogBytes {
		p.add(0, "", "", "catalog is %d bytes, limit %d", len(data), maxCatalogBytes)
		return nil, p.err()
	}
	if len(bytes.TrimSpace(data)) == 0 {
		p.add(0, "", "", "catalog is empty")
		return nil, p.err()
	}
	for i, line := range bytes.Split(data, []byte("\n")) {
		if bytes.IndexByte(line, '\t') >= 0 {
			p.add(i+1, "", "", "tab character (indent with spaces)")
		}
	}
	if len(p.problems) > 0 {
		return nil, p.err() // tabs make yaml positions meaningless
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		p.add(0, "", "", "yaml: %s", sanitize(err.Error()))
		return nil, p.err()
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		p.add(extra.Line, "", "", "more than one YAML document")
	}
	p.checkNodes(&doc, 0, "", "")
	if len(p.problems) > 0 {
		return nil, p.err() // an alias could make the walk below lie
	}
	c := p.catalog(&doc)
	if len(p.problems) > 0 {
		return nil, p.err()
	}
	return c, nil
}

func (p *parser) err() error {
	return &CatalogError{Problems: p.problems}
}

// sanitize bounds a yaml error message (it may quote input).
func sanitize(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// checkNodes rejects anchors, aliases, merge keys and explicit tags anywhere,
// naming the command and field they occur in (depth: 0 document, 1 root
// mapping, 2 commands mapping, 3 entry mapping).
func (p *parser) checkNodes(n *yaml.Node, depth int, command, field string) {
	if n.Anchor != "" {
		p.add(n.Line, command, field, "anchors are not allowed")
	}
	if n.Kind == yaml.AliasNode {
		p.add(n.Line, command, field, "aliases are not allowed")
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!merge" {
		p.add(n.Line, command, field, "merge keys are not allowed")
	}
	if n.Style&yaml.TaggedStyle != 0 {
		p.add(n.Line, command, field, "explicit tags are not allowed")
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			cmd, fld := command, field
			switch depth {
			case 2:
				cmd = boundName(k.Value)
			case 3:
				fld = boundName(k.Value)
			}
			p.checkNodes(k, depth+1, cmd, fld)
			p.checkNodes(v, depth+1, cmd, fld)
		}
		return
	}
	for _, c := range n.Content {
		p.checkNodes(c, depth+1, command, field)
	}
}

func (p *parser) catalog(doc *yaml.Node) *Catalog {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		p.add(doc.Line, "", "", "root must be a mapping with version and commands")
		return nil
	}
	root := doc.Content[0]
	var commandsNode *yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		p.indent(k, 1, "", "")
		if seen[k.Value] {
			p.add(k.Line, "", k.Value, "duplicate root key")
			continue
		}
		seen[k.Value] = true
		switch k.Value {
		case "version":
			if v.Kind != yaml.ScalarNode || v.Value != "1" {
				p.add(v.Line, "", "version", "must be 1")
			}
		case "commands":
			commandsNode = v
		default:
			p.add(k.Line, "", k.Value, "unknown root key (want version, commands)")
		}
	}
	if !seen["version"] {
		p.add(root.Line, "", "version", "missing")
	}
	if commandsNode == nil {
		p.add(root.Line, "", "commands", "missing")
		return nil
	}
	if commandsNode.Kind != yaml.MappingNode || len(commandsNode.Content) == 0 {
		p.add(commandsNode.Line, "", "commands", "must be a non-empty mapping")
		return nil
	}
	c := &Catalog{entries: map[string]*Entry{}, parents: map[string]bool{}}
	lines := map[string]int{}
	for i := 0; i+1 < len(commandsNode.Content); i += 2 {
		k, v := commandsNode.Content[i], commandsNode.Content[i+1]
		name := k.Value
		p.indent(k, 3, name, "")
		if k.Kind != yaml.ScalarNode || !nameRegex.MatchString(name) {
			p.add(k.Line, boundName(name), "", "invalid command name (want COMMAND or COMMAND|SUBCOMMAND, upper case)")
			continue
		}
		if first, dup := lines[name]; dup {
			p.add(k.Line, name, "", "duplicate command (first at line %d)", first)
			continue
		}
		lines[name] = k.Line
		e, ok := p.entry(name, v)
		if ok {
			c.entries[name] = &e
		}
	}
	for name := range lines {
		if parent, _, sub := strings.Cut(name, "|"); sub {
			c.parents[parent] = true
		}
	}
	for name := range lines {
		if c.parents[name] {
			p.add(lines[name], name, "", "has subcommand entries, so it cannot also be a plain entry")
		}
	}
	c.names = make([]string, 0, len(c.entries))
	for name := range c.entries {
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)
	c.index()
	return c
}

func boundName(s string) string {
	if len(s) > 48 {
		return s[:48] + "..."
	}
	return s
}

// indent enforces the 0/2/4-space layout for block-style mapping keys
// (yaml columns are 1-based).
func (p *parser) indent(k *yaml.Node, col int, command, field string) {
	if k.Column != col {
		p.add(k.Line, command, field, "indented %d spaces, want %d", k.Column-1, col-1)
	}
}

type fieldSet map[string]*yaml.Node

func (p *parser) entry(name string, v *yaml.Node) (Entry, bool) {
	before := len(p.problems)
	if v.Kind != yaml.MappingNode {
		p.add(v.Line, name, "", "entry must be a mapping of fields")
		return Entry{}, false
	}
	fs := fieldSet{}
	empty := map[string]bool{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		fk, fv := v.Content[i], v.Content[i+1]
		field := fk.Value
		p.indent(fk, 5, name, field)
		if !slices.Contains(knownFields, field) {
			p.add(fk.Line, name, boundName(field), "unknown field")
			continue
		}
		if _, dup := fs[field]; dup {
			p.add(fk.Line, name, field, "duplicate field")
			continue
		}
		if fv.Kind == yaml.ScalarNode && (fv.Value == "" || fv.Tag == "!!null") {
			p.add(fv.Line, name, field, "empty value")
			empty[field] = true
			continue
		}
		fs[field] = fv
	}
	p.empty = empty // reported already; keeps "missing required field" quiet
	e := Entry{Name: name, CreatesKey: CreatesNo}
	e.Risk = p.risk(name, fs, v.Line)
	e.Support = p.support(name, fs, v.Line)
	if e.Support == SupportBlocked {
		for i := 0; i+1 < len(v.Content); i += 2 {
			f := v.Content[i].Value
			if _, ok := fs[f]; ok && !slices.Contains(blockedFields, f) {
				p.add(v.Content[i].Line, name, f, "a blocked entry has no execution path; remove the field")
			}
		}
		if _, ok := fs[fNote]; !ok {
			p.add(v.Line, name, fNote, "a blocked entry must say why (note)")
		}
		e.Note = p.str(name, fNote, fs)
	} else {
		// Also with an invalid support, so every field problem is reported.
		p.fillExecutable(&e, fs, v.Line)
	}
	p.invariants(&e, fs, v.Line)
	return e, len(p.problems) == before
}

func (p *parser) required(name, field string, fs fieldSet, line int) (*yaml.Node, bool) {
	n, ok := fs[field]
	if !ok && !p.empty[field] {
		p.add(line, name, field, "missing required field")
	}
	return n, ok
}

func (p *parser) scalar(name, field string, n *yaml.Node) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.add(n.Line, name, field, "must be a scalar")
		return "", false
	}
	return n.Value, true
}

func (p *parser) str(name, field string, fs fieldSet) string {
	n, ok := fs[field]
	if !ok {
		return ""
	}
	s, _ := p.scalar(name, field, n)
	if len(s) > 300 {
		p.add(n.Line, name, field, "longer than 300 bytes")
	}
	return s
}

func (p *parser) risk(name string, fs fieldSet, line int) Risk {
	n, ok := p.required(name, fRisk, fs, line)
	if !ok {
		return 0
	}
	s, ok := p.scalar(name, fRisk, n)
	if !ok {
		return 0
	}
	switch s {
	case "R1":
		return R1
	case "R2":
		return R2
	case "R3":
		return R3
	case "R4":
		return R4
	}
	p.add(n.Line, name, fRisk, "invalid value %q (want R1, R2, R3 or R4)", boundName(s))
	return 0
}

func (p *parser) support(name string, fs fieldSet, line int) Support {
	n, ok := p.required(name, fSupport, fs, line)
	if !ok {
		return ""
	}
	s, ok := p.scalar(name, fSupport, n)
	if !ok {
		return ""
	}
	if !Support(s).valid() {
		p.add(n.Line, name, fSupport, "invalid value %q (want typed, advanced-typed, admin-only, connection or blocked)", boundName(s))
		return ""
	}
	return Support(s)
}

func (p *parser) boolean(name, field string, fs fieldSet) bool {
	n, ok := fs[field]
	if !ok {
		return false
	}
	s, ok := p.scalar(name, field, n)
	if !ok {
		return false
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	}
	p.add(n.Line, name, field, "invalid boolean %q (want true or false)", boundName(s))
	return false
}

func (p *parser) integer(name, field string, n *yaml.Node, lo, hi int) int {
	s, ok := p.scalar(name, field, n)
	if !ok {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi || strconv.Itoa(v) != s {
		p.add(n.Line, name, field, "invalid integer %q (want %d..%d)", boundName(s), lo, hi)
		return 0
	}
	return v
}

func (p *parser) keySpec(name, field string, n *yaml.Node) KeySpec {
	s, ok := p.scalar(name, field, n)
	if !ok {
		return KeySpec{}
	}
	ks, err := ParseKeySpec(s)
	if err != nil {
		p.add(n.Line, name, field, "%s", err.Error())
	}
	return ks
}

func (p *parser) fillExecutable(e *Entry, fs fieldSet, line int) {
	name := e.Name
	if n, ok := p.required(name, fLanes, fs, line); ok {
		e.Lanes = p.lanes(name, n)
	}
	if n, ok := p.required(name, fKeys, fs, line); ok {
		e.Keys = p.keySpec(name, fKeys, n)
	}
	if n, ok := fs[fChannels]; ok {
		e.Channels = p.keySpec(name, fChannels, n)
	}
	if n, ok := p.required(name, fMaxArgs, fs, line); ok {
		e.MaxArgs = p.integer(name, fMaxArgs, n, 1, 4096)
	}
	if n, ok := p.required(name, fReply, fs, line); ok {
		if s, ok := p.scalar(name, fReply, n); ok {
			if !Reply(s).valid() {
				p.add(n.Line, name, fReply, "invalid value %q (want scalar, bounded, range-bounded or collection)", boundName(s))
			} else {
				e.Reply = Reply(s)
			}
		}
	}
	e.ReadOnly = p.boolean(name, fReadOnly, fs)
	e.RetrySafe = p.boolean(name, fRetrySafe, fs)
	e.Idempotent = p.boolean(name, fIdempotent, fs)
	if n, ok := fs[fCreatesKey]; ok {
		if s, ok := p.scalar(name, fCreatesKey, n); ok {
			switch CreatesKey(s) {
			case CreatesNo, CreatesWithTTL, CreatesProgramOnly:
				e.CreatesKey = CreatesKey(s)
			default:
				p.add(n.Line, name, fCreatesKey, "invalid value %q (want no, ttl or program-only)", boundName(s))
			}
		}
	}
	if n, ok := fs[fTTLOptions]; ok {
		if s, ok := p.scalar(name, fTTLOptions, n); ok {
			for _, opt := range strings.Fields(s) {
				if !optRegex.MatchString(opt) || slices.Contains(e.TTLOptions, opt) {
					p.add(n.Line, name, fTTLOptions, "invalid or repeated option %q", boundName(opt))
					continue
				}
				e.TTLOptions = append(e.TTLOptions, opt)
			}
		}
	}
	if n, ok := fs[fOptionsFrom]; ok {
		e.OptionsFrom = p.integer(name, fOptionsFrom, n, 1, 64)
	}
	e.Note = p.str(name, fNote, fs)
}

func (p *parser) lanes(name string, n *yaml.Node) []policy.Lane {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.add(n.Line, name, fLanes, "must be a non-empty sequence of lanes")
		return nil
	}
	var set []policy.Lane
	for _, c := range n.Content {
		if c.Kind != yaml.ScalarNode {
			p.add(c.Line, name, fLanes, "lane must be a scalar")
			continue
		}
		l, err := policy.ParseLane(c.Value)
		if err != nil {
			p.add(c.Line, name, fLanes, "unknown lane %q", boundName(c.Value))
			continue
		}
		if slices.Contains(set, l) {
			p.add(c.Line, name, fLanes, "duplicate lane %q", l)
			continue
		}
		set = append(set, l)
	}
	// Canonical order, so equal catalogs compare equal.
	out := make([]policy.Lane, 0, len(set))
	for _, l := range policy.Lanes() {
		if slices.Contains(set, l) {
			out = append(out, l)
		}
	}
	return out
}

// invariants are the cross-field rules. They are what makes the catalog a
// policy rather than a list, so they are checked on every load.
func (p *parser) invariants(e *Entry, fs fieldSet, line int) {
	name := e.Name
	if e.Risk == 0 || e.Support == "" {
		return // already reported
	}
	if e.Risk == R4 && e.Support != SupportBlocked {
		p.add(line, name, fSupport, "risk R4 requires support blocked")
	}
	if e.Risk == R3 && e.Support != SupportAdminOnly && e.Support != SupportBlocked {
		p.add(line, name, fSupport, "risk R3 requires support admin-only or blocked")
	}
	if e.Support == SupportBlocked {
		return
	}
	if e.Support == SupportConnection && e.Risk > R2 {
		p.add(line, name, fRisk, "connection commands must be R1 or R2")
	}
	if e.RetrySafe && !e.ReadOnly && !e.Idempotent {
		p.add(line, name, fRetrySafe, "a write cannot be retry-safe unless idempotent is true")
	}
	if e.Idempotent && e.ReadOnly {
		p.add(line, name, fIdempotent, "only writes are declared idempotent")
	}
	if e.Support == SupportAdminOnly && !slices.Equal(e.Lanes, []policy.Lane{policy.LaneAdmin}) {
		p.add(line, name, fLanes, "admin-only commands run on the admin lane only")
	}
	if e.AllowsLane(policy.LaneAdmin) && e.Support != SupportAdminOnly && e.Support != SupportConnection {
		p.add(line, name, fLanes, "the admin lane carries only admin-only and connection commands")
	}
	if e.ReadOnly && e.CreatesKey != CreatesNo {
		p.add(line, name, fCreatesKey, "a read-only command cannot create keys")
	}
	if e.CreatesKey != CreatesNo && e.Keys.Kind == KeysNone {
		p.add(line, name, fCreatesKey, "a key-creating command must declare its keys")
	}
	if e.CreatesKey == CreatesWithTTL {
		if len(e.TTLOptions) == 0 {
			p.add(line, name, fTTLOptions, "creates-key ttl requires ttl-options")
		}
		if e.OptionsFrom < 2 {
			p.add(line, name, fOptionsFrom, "creates-key ttl requires options-from >= 2")
		}
	} else {
		if _, ok := fs[fTTLOptions]; ok {
			p.add(line, name, fTTLOptions, "only creates-key ttl takes ttl-options")
		}
		if _, ok := fs[fOptionsFrom]; ok {
			p.add(line, name, fOptionsFrom, "only creates-key ttl takes options-from")
		}
	}
	if e.Reply == ReplyRangeBounded && (e.Keys != KeySpec{Kind: KeysRange, First: 1, Last: 1, Step: 1} || e.MaxArgs != 4) {
		p.add(line, name, fReply, "range-bounded needs the GETRANGE shape (keys 1 1 1, max-args 4)")
	}
	if e.MaxArgs > 0 {
		reach := 0
		switch e.Keys.Kind {
		case KeysRange:
			reach = e.Keys.First
			if e.Keys.Last > reach {
				reach = e.Keys.Last
			}
		case KeysNumkeys:
			reach = e.Keys.Index
		}
		if reach >= e.MaxArgs {
			p.add(line, name, fMaxArgs, "max-args %d cannot reach key position %d", e.MaxArgs, reach)
		}
	}
	if e.Keys.Kind != KeysNone && e.Channels.Kind != KeysNone {
		p.add(line, name, fChannels, "a command has keys or channels, not both")
	}
}
