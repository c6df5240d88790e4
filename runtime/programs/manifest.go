package programs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/caphost/caphost/runtime/certainty"
)

// Manifest bounds. The manifest is embedded, but DecodeManifest is also the
// parser behind `caphost programs verify`, so it treats its input as untrusted.
const (
	maxManifestBytes = 1 << 20
	maxPrograms      = 256
	maxKeysPerProg   = 8
	maxArgsPerProg   = 16
	maxStatuses      = 32
	maxResultFields  = 12
	maxValueBytes    = 1 << 20 // hard cap of any opaque-bytes argument
	maxSafeInteger   = 1<<53 - 1
	maxNameLen       = 64
	maxTextLen       = 256
)

// Manifest is the decoded program-set.json: the single source of truth of
// the program contract.
type Manifest struct {
	// ProgramSet names the set (e.g. "ca-redis-programs-v1").
	ProgramSet string `json:"programSet"`
	// SetVersion is the set's integer version, reported by the library's
	// info function.
	SetVersion int `json:"setVersion"`
	// ResultSchemaVersion is the first element of every program reply.
	ResultSchemaVersion int `json:"resultSchemaVersion"`
	// MinimumRedisVersion is the lowest server version the set supports.
	MinimumRedisVersion string `json:"minimumRedisVersion"`
	// MaxTTLMillis is the upper TTL bound every program enforces.
	MaxTTLMillis int64 `json:"maxTtlMillis"`
	// Library names the Redis Functions library and its info function.
	Library LibrarySpec `json:"library"`
	// Programs are sorted by ID.
	Programs []ProgramSpec `json:"programs"`
}

// LibrarySpec names the generated Functions library.
type LibrarySpec struct {
	Name         string `json:"name"`
	InfoFunction string `json:"infoFunction"`
}

// ProgramSpec is one manifest entry.
type ProgramSpec struct {
	ID                       string        `json:"id"`
	Function                 string        `json:"function"`
	Script                   string        `json:"script"`
	SHA256                   string        `json:"sha256"`
	SHA1                     string        `json:"sha1"`
	Summary                  string        `json:"summary"`
	Keys                     []KeySpec     `json:"keys"`
	Arguments                []ArgSpec     `json:"arguments"`
	Result                   []ResultField `json:"result"`
	State                    StateSpec     `json:"state"`
	ValidateBeforeFirstWrite []string      `json:"validateBeforeFirstWrite"`
	Statuses                 []StatusSpec  `json:"statuses"`
	Complexity               string        `json:"complexity"`
	StateGrowth              string        `json:"stateGrowth"`
	Clock                    string        `json:"clock"`
	ReadOnly                 *bool         `json:"readOnly"`
	RetrySafety              string        `json:"retrySafety"`
	TimeoutCertainty         string        `json:"timeoutCertainty"`
	MinimumRedisVersion      string        `json:"minimumRedisVersion"`
	ACLCommands              []string      `json:"aclCommands"`
}

// KeySpec describes one KEYS[index] slot.
type KeySpec struct {
	Index         int    `json:"index"`
	Name          string `json:"name"`
	SameSlotGroup string `json:"sameSlotGroup"`
}

// Argument types.
const (
	ArgOpaqueBytes = "opaque-bytes" // minBytes..maxBytes arbitrary bytes (minBytes may be 0)
	ArgInteger     = "integer"      // canonical decimal, min..max
	ArgLowerHex    = "lower-hex"    // [0-9a-f], minBytes..maxBytes
)

// ArgSpec describes one ARGV[index] slot. Byte-typed arguments carry
// MinBytes/MaxBytes, integers Min/Max; the other pair must be absent.
type ArgSpec struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	Type     string `json:"type"`
	MinBytes *int64 `json:"minBytes,omitempty"`
	MaxBytes *int64 `json:"maxBytes,omitempty"`
	Min      *int64 `json:"min,omitempty"`
	Max      *int64 `json:"max,omitempty"`
}

// Result field types.
const (
	ResultInteger = "integer"
	ResultBytes   = "bytes"
)

// ResultField describes one element after serverNowMillis in the reply.
type ResultField struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// StateSpec describes the Redis state a program owns.
type StateSpec struct {
	Type        string `json:"type"`
	Description string `json:"description"`
	TTL         string `json:"ttl"`
}

// StatusSpec is one member of a program's complete status enum.
type StatusSpec struct {
	Name    string `json:"name"`
	Code    int64  `json:"code"`
	Outcome string `json:"outcome"`
}

// ErrManifest marks every manifest decoding or validation failure.
var ErrManifest = errors.New("programs: invalid program-set manifest")

// ManifestError lists every problem found in a manifest.
type ManifestError struct {
	Problems []string
}

// Error implements error; it lists every problem.
func (e *ManifestError) Error() string {
	return "programs: invalid program-set manifest: " + strings.Join(e.Problems, "; ")
}

// Is makes errors.Is(err, ErrManifest) true.
func (e *ManifestError) Is(target error) bool { return target == ErrManifest }

var (
	reProgramID = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*-v[1-9][0-9]*$`)
	reName      = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)
	reStatus    = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	reFunction  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	reLowerHex  = regexp.MustCompile(`^[0-9a-f]+$`)
	reACL       = regexp.MustCompile(`^[A-Z]+$`)
	reVersion   = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)
	reSlug      = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
)

// Closed vocabularies of the manifest (functions, so nothing package-level
// is mutable).
func clocks() []string { return []string{"none", "redis-time"} }

func retrySafeties() []string {
	return []string{"safe-repeat", "inspect-or-repeat-desired-absent", "inspect-or-repeat-same-value", "repeat-same-operation", "not-retry-safe"}
}

// complexities admits O(1) and the one explicitly bounded form (§7.4 "O(1)
// or an explicit small N"): a sorted set capped by a validated limit.
func complexities() []string {
	return []string{"O(1)", "O(log N + M), N <= M <= limit <= 10000", "O(log N + M), N <= M <= 2 * limit <= 20000"}
}

func timeoutCertainties() []string { return []string{"indeterminate", "not-applicable"} }

// DecodeManifest strictly decodes and validates a program-set manifest:
// unknown fields, trailing data, missing fields, non-contiguous indexes,
// duplicate statuses and insane bounds are all errors.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > maxManifestBytes {
		return nil, &ManifestError{Problems: []string{fmt.Sprintf("manifest is %d bytes, limit %d", len(b), maxManifestBytes)}}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, &ManifestError{Problems: []string{"decode: " + err.Error()}}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &ManifestError{Problems: []string{"trailing data after the manifest object"}}
	}
	if p := m.validate(); len(p) > 0 {
		return nil, &ManifestError{Problems: p}
	}
	return &m, nil
}

func (m *Manifest) validate() []string {
	var p []string
	add := func(format string, a ...any) { p = append(p, fmt.Sprintf(format, a...)) }
	if !reSlug.MatchString(m.ProgramSet) || len(m.ProgramSet) > maxNameLen {
		add("programSet %q is not a bounded slug", m.ProgramSet)
	}
	if m.SetVersion < 1 {
		add("setVersion must be >= 1")
	}
	if m.ResultSchemaVersion != 1 {
		add("resultSchemaVersion %d is not supported (want 1)", m.ResultSchemaVersion)
	}
	if !reVersion.MatchString(m.MinimumRedisVersion) {
		add("minimumRedisVersion %q is not MAJOR.MINOR", m.MinimumRedisVersion)
	}
	if m.MaxTTLMillis < 1 || m.MaxTTLMillis > maxSafeInteger {
		add("maxTtlMillis %d out of range", m.MaxTTLMillis)
	}
	if !reFunction.MatchString(m.Library.Name) || len(m.Library.Name) > maxNameLen {
		add("library.name %q invalid", m.Library.Name)
	}
	if !reFunction.MatchString(m.Library.InfoFunction) || len(m.Library.InfoFunction) > maxNameLen {
		add("library.infoFunction %q invalid", m.Library.InfoFunction)
	}
	if len(m.Programs) == 0 || len(m.Programs) > maxPrograms {
		add("programs: want 1..%d entries, have %d", maxPrograms, len(m.Programs))
	}
	functions := map[string]bool{m.Library.InfoFunction: true}
	shas := map[string]bool{}
	for i := range m.Programs {
		prog := &m.Programs[i]
		if i > 0 && m.Programs[i-1].ID >= prog.ID {
			add("programs must be sorted by id without duplicates (%q after %q)", prog.ID, m.Programs[i-1].ID)
		}
		for _, s := range prog.validate(m) {
			add("program %q: %s", prog.ID, s)
		}
		if functions[prog.Function] {
			add("program %q: function %q is not unique", prog.ID, prog.Function)
		}
		functions[prog.Function] = true
		if shas[prog.SHA1] {
			add("program %q: sha1 is not unique", prog.ID)
		}
		shas[prog.SHA1] = true
	}
	return p
}

func (s *ProgramSpec) validate(m *Manifest) []string {
	var p []string
	add := func(format string, a ...any) { p = append(p, fmt.Sprintf(format, a...)) }
	if !reProgramID.MatchString(s.ID) || len(s.ID) > maxNameLen {
		add("id must be a lower-case slug ending in -v<N>")
	}
	if want := "ca_" + strings.ReplaceAll(s.ID, "-", "_"); s.Function != want {
		add("function %q, want %q", s.Function, want)
	}
	if want := "lua/" + s.ID + ".lua"; s.Script != want {
		add("script %q, want %q", s.Script, want)
	}
	if len(s.SHA256) != 64 || !reLowerHex.MatchString(s.SHA256) {
		add("sha256 must be 64 lower-case hex digits")
	}
	if len(s.SHA1) != 40 || !reLowerHex.MatchString(s.SHA1) {
		add("sha1 must be 40 lower-case hex digits")
	}
	if s.Summary == "" || len(s.Summary) > maxTextLen {
		add("summary must be 1..%d bytes", maxTextLen)
	}
	if len(s.Keys) == 0 || len(s.Keys) > maxKeysPerProg {
		add("keys: want 1..%d", maxKeysPerProg)
	}
	for i, k := range s.Keys {
		if k.Index != i+1 {
			add("keys[%d].index %d, want %d (contiguous from 1)", i, k.Index, i+1)
		}
		if !reName.MatchString(k.Name) || len(k.Name) > maxNameLen {
			add("keys[%d].name %q invalid", i, k.Name)
		}
		if !reSlug.MatchString(k.SameSlotGroup) || len(k.SameSlotGroup) > maxNameLen {
			add("keys[%d].sameSlotGroup %q invalid", i, k.SameSlotGroup)
		}
	}
	if len(s.Arguments) > maxArgsPerProg {
		add("arguments: at most %d", maxArgsPerProg)
	}
	for i, a := range s.Arguments {
		if a.Index != i+1 {
			add("arguments[%d].index %d, want %d (contiguous from 1)", i, a.Index, i+1)
		}
		if !reName.MatchString(a.Name) || len(a.Name) > maxNameLen {
			add("arguments[%d].name %q invalid", i, a.Name)
		}
		if msg := a.validateBounds(m.MaxTTLMillis); msg != "" {
			add("arguments[%d] (%s): %s", i, a.Name, msg)
		}
	}
	if len(s.Result) == 0 || len(s.Result) > maxResultFields {
		add("result: want 1..%d fields", maxResultFields)
	}
	for i, f := range s.Result {
		if !reName.MatchString(f.Name) || len(f.Name) > maxNameLen {
			add("result[%d].name %q invalid", i, f.Name)
		}
		if f.Type != ResultInteger && f.Type != ResultBytes {
			add("result[%d].type %q (want integer or bytes)", i, f.Type)
		}
	}
	if s.State.Type == "" || s.State.Description == "" || s.State.TTL == "" ||
		len(s.State.Type) > maxNameLen || len(s.State.Description) > maxTextLen || len(s.State.TTL) > maxTextLen {
		add("state: type, description and ttl are required and bounded")
	}
	if len(s.ValidateBeforeFirstWrite) == 0 {
		add("validateBeforeFirstWrite must list the checks")
	}
	for _, v := range s.ValidateBeforeFirstWrite {
		if !reSlug.MatchString(v) || len(v) > maxNameLen {
			add("validateBeforeFirstWrite entry %q invalid", v)
		}
	}
	p = append(p, validateStatuses(s.Statuses)...)
	if !contains(complexities(), s.Complexity) {
		add("complexity %q: only O(1) or an explicitly bounded N are admitted (%v)", s.Complexity, complexities())
	}
	if s.StateGrowth == "" || len(s.StateGrowth) > maxTextLen {
		add("stateGrowth is required")
	}
	if !contains(clocks(), s.Clock) {
		add("clock %q (want one of %v)", s.Clock, clocks())
	}
	if s.ReadOnly == nil {
		add("readOnly is required")
	}
	if !contains(retrySafeties(), s.RetrySafety) {
		add("retrySafety %q (want one of %v)", s.RetrySafety, retrySafeties())
	}
	if !contains(timeoutCertainties(), s.TimeoutCertainty) {
		add("timeoutCertainty %q (want one of %v)", s.TimeoutCertainty, timeoutCertainties())
	}
	if s.ReadOnly != nil && !*s.ReadOnly && s.TimeoutCertainty != "indeterminate" {
		add("a writing program's timeoutCertainty must be indeterminate")
	}
	if !reVersion.MatchString(s.MinimumRedisVersion) {
		add("minimumRedisVersion %q is not MAJOR.MINOR", s.MinimumRedisVersion)
	}
	if len(s.ACLCommands) == 0 {
		add("aclCommands must list every command the program calls")
	}
	seen := map[string]bool{}
	for _, c := range s.ACLCommands {
		if !reACL.MatchString(c) || len(c) > 32 {
			add("aclCommands entry %q invalid", c)
		}
		if forbiddenInProgram(c) {
			add("aclCommands entry %q is forbidden inside programs", c)
		}
		if seen[c] {
			add("aclCommands entry %q duplicated", c)
		}
		seen[c] = true
	}
	return p
}

// forbiddenInProgram lists commands that make a program unbounded or
// non-deterministic in what it touches (§7.4).
func forbiddenInProgram(c string) bool {
	switch c {
	case "KEYS", "SCAN", "SMEMBERS", "HGETALL", "ZRANGE", "LRANGE", "FLUSHALL", "FLUSHDB", "EVAL", "EVALSHA", "FCALL", "SCRIPT", "FUNCTION", "CONFIG", "DEBUG":
		return true
	}
	return false
}

func validateStatuses(st []StatusSpec) []string {
	var p []string
	if len(st) < 2 || len(st) > maxStatuses {
		p = append(p, fmt.Sprintf("statuses: want 2..%d", maxStatuses))
	}
	names := map[string]bool{}
	for i, s := range st {
		if s.Code != int64(i+1) {
			p = append(p, fmt.Sprintf("statuses[%d].code %d, want %d (contiguous from 1)", i, s.Code, i+1))
		}
		if !reStatus.MatchString(s.Name) || len(s.Name) > maxNameLen {
			p = append(p, fmt.Sprintf("statuses[%d].name %q invalid", i, s.Name))
		}
		if names[s.Name] {
			p = append(p, fmt.Sprintf("statuses[%d].name %q duplicated", i, s.Name))
		}
		names[s.Name] = true
		if _, ok := parseOutcome(s.Outcome); !ok {
			p = append(p, fmt.Sprintf("statuses[%d].outcome %q is not a server-reported outcome", i, s.Outcome))
		}
	}
	return p
}

// parseOutcome admits only outcomes a server answer can carry: a program
// status never means "not sent" or "indeterminate".
func parseOutcome(s string) (certainty.Outcome, bool) {
	for _, o := range []certainty.Outcome{certainty.Applied, certainty.NotApplied, certainty.Conflict, certainty.Rejected} {
		if o.String() == s {
			return o, true
		}
	}
	return 0, false
}

func (a ArgSpec) validateBounds(maxTTL int64) string {
	switch a.Type {
	case ArgOpaqueBytes, ArgLowerHex:
		if a.Min != nil || a.Max != nil {
			return "byte-typed argument must not carry min/max"
		}
		if a.MinBytes == nil || a.MaxBytes == nil {
			return "minBytes and maxBytes are required"
		}
		// minBytes 0 admits an empty argument: the encoding of "not
		// applicable" for an argument that only some modes use.
		if *a.MinBytes < 0 || *a.MaxBytes < max(*a.MinBytes, 1) || *a.MaxBytes > maxValueBytes {
			return fmt.Sprintf("byte bounds must satisfy 0 <= minBytes <= maxBytes, 1 <= maxBytes <= %d", maxValueBytes)
		}
	case ArgInteger:
		if a.MinBytes != nil || a.MaxBytes != nil {
			return "integer argument must not carry minBytes/maxBytes"
		}
		if a.Min == nil || a.Max == nil {
			return "min and max are required"
		}
		if *a.Min < -maxSafeInteger || *a.Max > maxSafeInteger || *a.Max < *a.Min {
			return "integer bounds must satisfy -(2^53-1) <= min <= max <= 2^53-1"
		}
		if strings.HasPrefix(strings.ToLower(a.Name), "ttl") && (*a.Min < 1 || *a.Max > maxTTL) {
			return fmt.Sprintf("TTL bounds must lie in 1..%d", maxTTL)
		}
	default:
		return fmt.Sprintf("type %q (want opaque-bytes, integer or lower-hex)", a.Type)
	}
	return ""
}

func contains(set []string, s string) bool {
	for _, x := range set {
		if x == s {
			return true
		}
	}
	return false
}

// Program is the immutable view of one catalog program.
type Program struct {
	spec   ProgramSpec
	source string
}

// ID returns the program id (e.g. "compare-and-delete-v1").
func (p Program) ID() string { return p.spec.ID }

// Function returns the registered Redis Function name.
func (p Program) Function() string { return p.spec.Function }

// SHA1 returns the Redis script id of the source.
func (p Program) SHA1() string { return p.spec.SHA1 }

// SHA256 returns the sha256 of the source bytes.
func (p Program) SHA256() string { return p.spec.SHA256 }

// Source returns the embedded Lua source.
func (p Program) Source() string { return p.source }

// Spec returns a deep copy of the manifest entry.
func (p Program) Spec() ProgramSpec { return p.spec.clone() }

func (s ProgramSpec) clone() ProgramSpec {
	c := s
	c.Keys = append([]KeySpec(nil), s.Keys...)
	c.Arguments = make([]ArgSpec, len(s.Arguments))
	for i, a := range s.Arguments {
		c.Arguments[i] = a
		c.Arguments[i].MinBytes = clonePtr(a.MinBytes)
		c.Arguments[i].MaxBytes = clonePtr(a.MaxBytes)
		c.Arguments[i].Min = clonePtr(a.Min)
		c.Arguments[i].Max = clonePtr(a.Max)
	}
	c.Result = append([]ResultField(nil), s.Result...)
	c.ValidateBeforeFirstWrite = append([]string(nil), s.ValidateBeforeFirstWrite...)
	c.Statuses = append([]StatusSpec(nil), s.Statuses...)
	c.ReadOnly = clonePtr(s.ReadOnly)
	c.ACLCommands = append([]string(nil), s.ACLCommands...)
	return c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
