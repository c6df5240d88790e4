package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/caphost/caphost/policy"
)

// Attributes are the request attributes a Selector sees. They are classes,
// not identities: a rate-policy guest never sees a raw principal, tenant,
// API key or IP address.
type Attributes struct {
	Route         string // normalised route or operation id
	Method        string
	PrincipalTier string
	APIKeyPlan    string
	ClientIPClass string
	ResourceClass string
}

// Selection is one policy a request is subject to.
type Selection struct {
	Policy string
	// Dimensions maps a subject dimension to the source that fills it (see
	// Sources); nil means every policy dimension is filled from the source
	// of the same name.
	Dimensions map[string]string
	// Cost is the request's cost (>= 1).
	Cost int64
}

// Selector chooses the policies for a request. A rate-policy guest
// implements it; StaticSelector does it from configuration. The Dimensions
// maps of returned Selections may be shared between calls (GuestSelector
// memoizes a generation's answers): callers read them and never modify them.
type Selector interface {
	Select(ctx context.Context, attrs Attributes) ([]Selection, error)
}

// Sources lists the names a Selection may use to fill a dimension: the
// identity fields the host extracts plus the attribute classes.
func Sources() []string {
	return []string{"global", "tenant", "principal", "api-key", "client-ip", "route", "resource-class",
		"method", "principal-tier", "api-key-plan", "client-ip-class"}
}

func validSource(s string) bool {
	for _, v := range Sources() {
		if v == s {
			return true
		}
	}
	return false
}

// StaticSelector selects policies by route and method from configuration
// (the `routes` list), first match wins. It needs no guest.
type StaticSelector struct {
	rules []RouteRule
}

// NewStaticSelector copies rules.
func NewStaticSelector(rules []RouteRule) *StaticSelector {
	out := make([]RouteRule, len(rules))
	for i, r := range rules {
		r.Selections = append([]Selection(nil), r.Selections...)
		out[i] = r
	}
	return &StaticSelector{rules: out}
}

// Select implements Selector. A request matching no rule is subject to no policy.
func (s *StaticSelector) Select(_ context.Context, a Attributes) ([]Selection, error) {
	for _, r := range s.rules {
		if r.Route == a.Route && (r.Method == "" || strings.EqualFold(r.Method, a.Method)) {
			return append([]Selection(nil), r.Selections...), nil
		}
	}
	return nil, nil
}

// Identity holds the raw identifying values of a request. They are only
// ever digested by the host; never logged, stored or shown to a selector.
type Identity struct {
	Tenant    string
	Principal string
	APIKey    string
	ClientIP  string
}

// String redacts the identity so it cannot reach a log by accident.
func (Identity) String() string { return "ratelimit.Identity(***)" }

// ErrNoSource means a selection needs a dimension whose source is empty for
// this request (for example principal on an anonymous request).
var ErrNoSource = errors.New("ratelimit: subject source is empty")

// SourceError names a policy dimension whose source has no value for this
// request. It matches ErrNoSource.
type SourceError struct{ Dimension string }

func (e *SourceError) Error() string {
	return "ratelimit: no value for subject dimension " + e.Dimension
}

// Is reports whether target is ErrNoSource.
func (e *SourceError) Is(target error) bool { return target == ErrNoSource }

// SubjectFor fills pol's dimensions for one selection: a dimension takes the
// source the selection maps it to (see Sources), else the source of the same
// name — identity fields from id, classes from a. Every front end (the
// middleware, the sidecar API) builds subjects through this one function so
// the same request always lands in the same bucket. A missing value is a
// *SourceError; a value over MaxSubjectValueBytes is a *QueryError naming
// the dimension; a mapping to no known source matches ErrBadSelection.
func SubjectFor(pol policy.RatePolicy, sel Selection, a Attributes, id Identity) (Subject, error) {
	sub := make(Subject, len(pol.Dimensions))
	for _, dim := range pol.Dimensions {
		src := string(dim)
		if s, ok := sel.Dimensions[string(dim)]; ok {
			src = s
		}
		var v string
		switch src {
		case "global":
			sub[dim] = nil
			continue
		case "tenant":
			v = id.Tenant
		case "principal":
			v = id.Principal
		case "api-key":
			v = id.APIKey
		case "client-ip":
			v = id.ClientIP
		case "route":
			v = a.Route
		case "resource-class":
			v = a.ResourceClass
		case "method":
			v = a.Method
		case "principal-tier":
			v = a.PrincipalTier
		case "api-key-plan":
			v = a.APIKeyPlan
		case "client-ip-class":
			v = a.ClientIPClass
		default:
			return nil, fmt.Errorf("%w: unknown subject source for dimension %s", ErrBadSelection, dim)
		}
		if v == "" {
			return nil, &SourceError{Dimension: string(dim)}
		}
		if len(v) > MaxSubjectValueBytes {
			return nil, &QueryError{Field: "subject." + string(dim), Reason: fmt.Sprintf("longer than %d bytes", MaxSubjectValueBytes)}
		}
		sub[dim] = []byte(v)
	}
	return sub, nil
}
