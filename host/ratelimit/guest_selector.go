package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
)

// GuestRunner runs fn against the current generation of a guest module
// (of either flavour), pinning that generation for the duration of fn.
// *plugins.Manager implements it.
type GuestRunner interface {
	Use(ctx context.Context, name string, fn func(plugins.Guest) error) error
}

// ErrGuestSelect marks a rate-policy guest failure or a selection the host
// cannot map. Front ends answer 503: a guest failure is never an allow.
var ErrGuestSelect = errors.New("ratelimit: rate-policy guest selection failed")

// GuestSelector asks a rate-policy guest which policies apply to a request.
//
// Mapping of the guest's answer (see GuestPolicyDecls for the declarations):
//   - the policy id is GuestPolicyID(guest id);
//   - a selection value for a declared dimension that is a host subject
//     dimension (tenant, principal, api-key, client-ip, route,
//     resource-class) names the Source that fills it ("" = the source of the
//     same name); the guest never sees the value itself, the host adds it;
//   - a value for a guest classification dimension (for example
//     route-class) is not part of the host key: the policy id already
//     separates the guest's classes, and dropping a class only ever merges
//     buckets, which is stricter, never more permissive.
//
// Any guest failure (trap, deadline, malformed output, an internal or
// other non-OK status) or an unmappable selection is returned as an error
// wrapping ErrGuestSelect. A guest's invalid-request answer is not a
// failure: it wraps ErrSelectionRefused (and abi.CodeInvalidRequest), which
// front ends answer 400.
//
// Selections are memoized per generation: the conformance suite every
// generation passes before it serves requires select to be deterministic
// (a pure function of its request), so the answer for an attribute tuple
// is asked once and reused until the next swap, up to MaxMemoizedSelections
// tuples per generation (further tuples are asked every time). A guest's
// log and counter calls therefore run once per tuple, not per request. A
// failed call is never memoized.
type GuestSelector struct {
	run     GuestRunner
	modules []string
	// tables caches, per module, the mapping of the generation last seen
	// (keyed by its description, which changes with every swap), so a
	// selection costs no per-call map building or id rewriting.
	tables []atomic.Pointer[declTable]
}

// MaxMemoizedSelections bounds the attribute tuples whose selections one
// generation keeps; MaxMemoizedKeyBytes the size of one tuple.
const (
	MaxMemoizedSelections = 4096
	MaxMemoizedKeyBytes   = 1024
)

// declTable is the host view of one generation's rate-policy declarations,
// and the selections it has answered.
type declTable struct {
	desc  *abi.Description
	byID  map[string]guestDecl
	memo  sync.Map // Attributes -> []Selection (never modified once stored)
	memoN atomic.Int64
}

func (t *declTable) remember(a Attributes, sels []Selection) {
	if len(a.Route)+len(a.Method)+len(a.PrincipalTier)+len(a.APIKeyPlan)+len(a.ClientIPClass)+len(a.ResourceClass) > MaxMemoizedKeyBytes {
		return
	}
	if t.memoN.Add(1) > MaxMemoizedSelections {
		t.memoN.Add(-1)
		return
	}
	if _, loaded := t.memo.LoadOrStore(a, sels); loaded {
		t.memoN.Add(-1)
	}
}

type guestDecl struct {
	hostID string
	decl   *abi.RatePolicyDecl
}

func newDeclTable(d *abi.Description) *declTable {
	t := &declTable{desc: d}
	if d == nil {
		return t
	}
	t.byID = make(map[string]guestDecl, len(d.RatePolicies))
	for i := range d.RatePolicies {
		p := &d.RatePolicies[i]
		t.byID[p.ID] = guestDecl{hostID: GuestPolicyID(p.ID), decl: p}
	}
	return t
}

// NewGuestSelector selects through the named modules of run. With more
// than one module the selections are concatenated in the given order and
// evaluated as one hierarchy: every selected policy must allow.
func NewGuestSelector(run GuestRunner, modules ...string) *GuestSelector {
	return &GuestSelector{run: run, modules: slices.Clone(modules), tables: make([]atomic.Pointer[declTable], len(modules))}
}

// Modules names the rate-policy guests the selector calls.
func (s *GuestSelector) Modules() []string { return slices.Clone(s.modules) }

// Select implements Selector.
func (s *GuestSelector) Select(ctx context.Context, a Attributes) ([]Selection, error) {
	var out []Selection
	for i, mod := range s.modules {
		sels, err := s.selectOne(ctx, i, mod, a)
		if err != nil {
			return nil, err
		}
		out = append(out, sels...)
	}
	if len(out) > MaxSelections {
		return nil, fmt.Errorf("%w: %d selections, at most %d", ErrGuestSelect, len(out), MaxSelections)
	}
	return out, nil
}

func (s *GuestSelector) selectOne(ctx context.Context, i int, module string, a Attributes) ([]Selection, error) {
	var out []Selection
	err := s.run.Use(ctx, module, func(m plugins.Guest) error {
		// The table of the generation serving this call: its declarations
		// are the ones plugins checked the selection against.
		t := s.tables[i].Load()
		if d := m.Description(); t == nil || t.desc != d {
			t = newDeclTable(d)
			s.tables[i].Store(t)
		}
		if v, ok := t.memo.Load(a); ok {
			out = v.([]Selection)
			return nil
		}
		req := &abi.RateSelectRequest{
			Route: a.Route, Method: a.Method, PrincipalTier: a.PrincipalTier,
			APIKeyPlan: a.APIKeyPlan, ClientIPClass: a.ClientIPClass,
		}
		if a.ResourceClass != "" {
			req.Attrs = []abi.Attr{{Name: "resource-class", Value: a.ResourceClass}}
		}
		resp, err := plugins.RateSelect(ctx, m, req)
		if err != nil {
			return err
		}
		if out, err = mapSelections(resp.Selections, t); err != nil {
			return err
		}
		t.remember(a, out)
		return nil
	})
	if errors.Is(err, abi.CodeInvalidRequest) {
		// The guest answered deliberately that the request itself is
		// invalid (an unknown method, say): the caller's error, which no
		// retry fixes — not a guest failure.
		return nil, fmt.Errorf("%w: module %s: %w", ErrSelectionRefused, module, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: module %s: %w", ErrGuestSelect, module, err)
	}
	return out, nil
}

func mapSelections(sels []abi.RateSelection, t *declTable) ([]Selection, error) {
	if len(sels) > MaxSelections {
		return nil, fmt.Errorf("%d selections, at most %d", len(sels), MaxSelections)
	}
	out := make([]Selection, 0, len(sels))
	for _, gs := range sels {
		g, ok := t.byID[gs.PolicyID]
		if !ok || len(gs.Dimensions) != len(g.decl.Dimensions) {
			return nil, fmt.Errorf("selection does not match a declared policy")
		}
		sel := Selection{Policy: g.hostID, Cost: int64(gs.Cost)}
		for i, dim := range g.decl.Dimensions {
			if !policy.RateDimension(dim).Valid() || dim == string(policy.DimGlobal) {
				continue // guest classification: not keyed (see GuestSelector)
			}
			src := gs.Dimensions[i]
			if src == "" || src == dim {
				continue
			}
			if !validSource(src) {
				return nil, fmt.Errorf("policy %s: dimension %s names no known source", sel.Policy, dim)
			}
			if sel.Dimensions == nil {
				sel.Dimensions = map[string]string{}
			}
			sel.Dimensions[dim] = src
		}
		out = append(out, sel)
	}
	return out, nil
}

// GuestPolicyID maps a guest policy id ([a-z0-9][a-z0-9._-]*) to the host's
// policy id shape (lower-case slug joined by single hyphens): '.' and '_'
// become '-'. An id that still is not a slug (for example "a..b") fails to
// compile with a rate.id problem naming it; two guest ids that collide fail
// as duplicates.
func GuestPolicyID(id string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '_' {
			return '-'
		}
		return r
	}, id)
}

// GuestPolicyRevision maps a guest policy revision (>= 1) to the host's
// revision slug.
func GuestPolicyRevision(rev uint32) string { return fmt.Sprintf("r%d", rev) }

// GuestPolicyDecls converts a rate-policy guest's declarations into host
// declarations for policy.CompileRatePolicies. The mapping, per algorithm:
//   - fixed-window, sliding-counter, gcra, sliding-log: limit per window_ms;
//   - token-bucket: capacity = burst (limit when burst is 0), refilled by
//     limit tokens per window_ms;
//   - concurrency: limit permits, window_ms is the permit TTL.
//
// maximum_cost becomes MaxCost, lowered to what the algorithm can admit
// (see costCeiling). Subject dimensions are the declared host dimensions (global when the
// guest declares none: one shared bucket per policy, the strictest choice);
// guest classification dimensions are dropped (see GuestSelector). Bounds,
// failure modes and duplicates are the compiler's job.
func GuestPolicyDecls(d *abi.Description) []policy.RatePolicyDecl {
	if d == nil {
		return nil
	}
	out := make([]policy.RatePolicyDecl, 0, len(d.RatePolicies))
	for _, p := range d.RatePolicies {
		decl := policy.RatePolicyDecl{
			ID:          GuestPolicyID(p.ID),
			Revision:    GuestPolicyRevision(p.Revision),
			Algorithm:   policy.RateAlgorithm(p.Algorithm),
			MaxCost:     int64(p.MaximumCost),
			FailureMode: policy.RateFailureMode(p.FailureMode),
			Shadow:      p.Shadow,
		}
		window := time.Duration(p.WindowMs) * time.Millisecond
		limit := clampInt64(p.Limit)
		switch decl.Algorithm {
		case policy.RateTokenBucket:
			decl.Parameters.Capacity = limit
			if p.Burst > 0 {
				decl.Parameters.Capacity = clampInt64(p.Burst)
			}
			decl.Parameters.RefillTokens = limit
			decl.Parameters.RefillPeriod = window
		case policy.RateConcurrency:
			decl.Parameters.Limit = limit
			decl.Parameters.PermitTTL = window
		default:
			decl.Parameters.Limit = limit
			decl.Parameters.Window = window
		}
		decl.MaxCost = min(decl.MaxCost, costCeiling(decl))
		for _, dim := range p.Dimensions {
			if rd := policy.RateDimension(dim); rd.Valid() && !slices.Contains(decl.Dimensions, rd) {
				decl.Dimensions = append(decl.Dimensions, rd)
			}
		}
		if len(decl.Dimensions) == 0 {
			decl.Dimensions = []policy.RateDimension{policy.DimGlobal}
		}
		out = append(out, decl)
	}
	return out
}

// costCeiling is the largest cost the host's algorithm can ever admit for
// decl: the bucket capacity, the window limit, 1 for sliding log and
// concurrency. A guest's maximum_cost above it is lowered to it (a larger
// cost could only ever be refused); a selection above it is then answered
// as unavailable, never allowed.
func costCeiling(d policy.RatePolicyDecl) int64 {
	switch d.Algorithm {
	case policy.RateTokenBucket:
		return max(d.Parameters.Capacity, 1)
	case policy.RateSlidingLog, policy.RateConcurrency:
		return 1
	}
	return max(d.Parameters.Limit, 1)
}

// clampInt64 keeps an out-of-range guest number out-of-range for the
// compiler (which then reports it) instead of wrapping negative.
func clampInt64(v uint64) int64 {
	if v > 1<<62 {
		return 1 << 62
	}
	return int64(v)
}

// CompileWithGuests compiles the configured policies together with the
// policies declared by rate-policy guests (module name → declarations):
// duplicate ids across config and guests fail. Guest problems are reported
// under guests.modules.<name>.rate-policies.
func (c Config) CompileWithGuests(guests map[string][]policy.RatePolicyDecl) (*policy.RatePolicySet, error) {
	var ps policy.Problems
	names := make([]string, 0, len(guests))
	for n := range guests {
		names = append(names, n)
	}
	slices.Sort(names)
	all := slices.Clone(c.Policies)
	owner := map[string]string{}
	for _, d := range c.Policies {
		owner[d.ID] = capPath + ".policies"
	}
	for _, n := range names {
		prefix := "guests.modules." + n + ".rate-policies"
		// Compile each module on its own first so a problem names the
		// module; the duplicate check needs them together.
		if _, err := policy.CompileRatePolicies(guests[n], c.compileOptions(prefix)); err != nil {
			var verr *policy.ValidationError
			if !errors.As(err, &verr) {
				return nil, err
			}
			ps = append(ps, verr.Problems...)
		}
		for _, d := range guests[n] {
			if prev, dup := owner[d.ID]; dup {
				ps.Add(prefix+"."+d.ID, policy.RuleRateDuplicate, "policy id already declared by %s", prev)
				continue
			}
			owner[d.ID] = "guests.modules." + n
			all = append(all, d)
		}
	}
	if err := ps.Err(); err != nil {
		return nil, err
	}
	return policy.CompileRatePolicies(all, c.compileOptions(capPath+".policies"))
}

// CheckSwap reports whether Swap would accept set now (revision reuse,
// local-emergency policies without a local limiter) without swapping. The
// host runs it on a hot-swap candidate's policies before the guest swap, so
// the policy swap that follows a successful guest swap cannot be refused.
func (l *Limiter) CheckSwap(set *policy.RatePolicySet) error {
	if set == nil {
		return fmt.Errorf("%w: nil policy set", ErrConfig)
	}
	return l.check(set)
}
