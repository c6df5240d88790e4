package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/caphost/caphost/policy"
)

// Query is one request to rate-limit as a front end (the sidecar API, the
// middleware, an embedder) sees it: the attributes a selector chooses
// policies from, the raw identity the subjects are built from, and
// optionally an explicit policy instead of a selection.
type Query struct {
	// Attributes are the request classes the selector sees.
	Attributes Attributes
	// Identity holds the raw identifying values (only ever digested).
	Identity Identity
	// Route and ResourceClass, when set, fill the route and resource-class
	// subject dimensions instead of the attributes of the same name (the
	// selector still sees Attributes): a client may know an exact value
	// where the selector is shown a class.
	Route, ResourceClass string
	// Policy, when set, evaluates exactly that policy at Cost (0: 1) and no
	// selector is asked. Without it the selector chooses the policies and
	// their costs, and Cost must be 0.
	Policy string
	Cost   int64
	// Hits, without an explicit Policy, multiplies the cost the selector
	// sets for each policy it selects (0: 1): how much of the request
	// there is, such as Envoy's hits_addend or a batch's item count, where
	// the selector says what one unit costs. A product over a policy's
	// max cost makes that policy Unavailable (invalid request), never an
	// allow. With an explicit Policy, Cost is the whole cost and Hits must
	// be 0.
	Hits int64
	// EvaluationID (at most MaxEvaluationIDBytes) identifies the
	// evaluation for dedup. For a hierarchy of n > 1 policies policy i is
	// evaluated with the derived id "<id>/<i>", so that a retry of the same
	// query dedups on every level.
	EvaluationID string
	// Deadline bounds selection and evaluation together (zero: ctx only).
	Deadline time.Time
}

// String redacts the query: it carries raw identity values.
func (Query) String() string { return "ratelimit.Query(***)" }

// Errors of Decide. Each means the query was not evaluated: nothing was
// consumed and the request must not be allowed.
var (
	// ErrNoSelector: the query names no policy and no selector was given.
	ErrNoSelector = errors.New("ratelimit: no selector is configured: the query must name a policy")
	// ErrUnknownPolicy: the query's explicit policy is not in the active
	// set (the caller's error).
	ErrUnknownPolicy = errors.New("ratelimit: no active policy has that id")
	// ErrSelector: the selector failed (a guest trap, deadline or
	// malformed answer). A deployment or availability problem: front ends
	// answer 503.
	ErrSelector = errors.New("ratelimit: policy selection failed")
	// ErrSelectionRefused: the selector refused the request itself as
	// invalid (a rate-policy guest answered invalid-request, for example
	// for an unknown method). The caller's error, which no retry can fix:
	// front ends answer 400.
	ErrSelectionRefused = errors.New("ratelimit: the selector refused the request as invalid")
	// ErrBadSelection: the selection does not fit the active policy set (a
	// policy it lacks, more than MaxSelections, a dimension mapped to no
	// known source). A deployment problem: front ends answer 503.
	ErrBadSelection = errors.New("ratelimit: the selection does not fit the active policy set")
	// ErrInvalidQuery matches every *QueryError.
	ErrInvalidQuery = errors.New("ratelimit: invalid query")
)

// QueryError is a query field out of its bounds (the caller's error). Field
// names it as the sidecar API does (cost, evaluation-id, subject.<dim>);
// Reason never contains a value.
type QueryError struct{ Field, Reason string }

func (e *QueryError) Error() string { return "ratelimit: invalid query: " + e.Field + ": " + e.Reason }

// Is reports whether target is ErrInvalidQuery.
func (e *QueryError) Is(target error) bool { return target == ErrInvalidQuery }

// Decide is the limiter's entry point for front ends: it selects the
// query's policies (or takes its explicit one), builds each policy's
// subject through SubjectFor and evaluates them as a hierarchy (see
// EvaluateAll for the order and the conservative consumption).
//
// The active policy set is loaded once, after selection, and that one
// snapshot serves every lookup and evaluation of the query: a concurrent
// Swap, even one the selector itself triggers, never splits a query
// across two sets. A selection naming a policy the snapshot lacks is
// ErrBadSelection, never an allow.
//
// Every subject is built before anything is evaluated, so a query that
// fails with an error consumed no quota. A query no policy selects is the
// NotLimited outcome. Each evaluated policy's outcome is counted once in
// the limiter's metrics; a selection that does not fit the set is counted
// once as unavailable/misconfigured under policy "unknown"; caller errors
// (ErrUnknownPolicy, *SourceError, *QueryError, ErrSelectionRefused) are
// not counted.
func (l *Limiter) Decide(ctx context.Context, sel Selector, q Query) (Outcome, error) {
	explicit := q.Policy != ""
	switch {
	case q.Cost < 0:
		return Outcome{}, &QueryError{Field: "cost", Reason: "must be >= 1"}
	case q.Cost > 0 && !explicit:
		return Outcome{}, &QueryError{Field: "cost", Reason: "only with an explicit policy (the selector sets the cost)"}
	case q.Hits < 0:
		return Outcome{}, &QueryError{Field: "hits", Reason: "must be >= 1"}
	case q.Hits > 0 && explicit:
		return Outcome{}, &QueryError{Field: "hits", Reason: "only without an explicit policy (set cost there)"}
	case len(q.EvaluationID) > MaxEvaluationIDBytes:
		return Outcome{}, &QueryError{Field: "evaluation-id", Reason: fmt.Sprintf("at most %d bytes", MaxEvaluationIDBytes)}
	}
	if !q.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, q.Deadline)
		defer cancel()
	}
	var sels []Selection
	if explicit {
		sels = []Selection{{Policy: q.Policy, Cost: max(q.Cost, 1)}}
	} else {
		if sel == nil {
			return Outcome{}, ErrNoSelector
		}
		var err error
		if sels, err = sel.Select(ctx, q.Attributes); err != nil {
			if errors.Is(err, ErrSelectionRefused) {
				return Outcome{}, err
			}
			return Outcome{}, fmt.Errorf("%w: %w", ErrSelector, err)
		}
		if len(sels) == 0 {
			return Outcome{kind: NotLimited}, nil
		}
	}
	g := l.gen.Load() // the query's one snapshot
	steps, err := l.plan(g, sels, q, explicit)
	if err != nil {
		if errors.Is(err, ErrBadSelection) {
			l.metrics.record(unavailable(policy.RatePolicy{}, CategoryMisconfigured))
		}
		return Outcome{}, err
	}
	return l.run(ctx, steps), nil
}

// plan resolves every selection on g and builds its request.
func (l *Limiter) plan(g *generation, sels []Selection, q Query, explicit bool) ([]step, error) {
	if len(sels) > MaxSelections {
		return nil, fmt.Errorf("%w: %d selections, at most %d", ErrBadSelection, len(sels), MaxSelections)
	}
	attrs := q.Attributes
	if q.Route != "" {
		attrs.Route = q.Route
	}
	if q.ResourceClass != "" {
		attrs.ResourceClass = q.ResourceClass
	}
	steps := make([]step, len(sels))
	for i, s := range sels {
		cp := g.byID[s.Policy]
		if cp == nil {
			if explicit {
				return nil, ErrUnknownPolicy
			}
			// The id is the selector's (possibly a guest's): not repeated.
			return nil, fmt.Errorf("%w: selection %d names no active policy", ErrBadSelection, i)
		}
		sub, err := SubjectFor(cp.pol, s, attrs, q.Identity)
		if err != nil {
			return nil, err
		}
		id := q.EvaluationID
		if id != "" && len(sels) > 1 {
			id += "/" + strconv.Itoa(i)
			if len(id) > MaxEvaluationIDBytes {
				return nil, &QueryError{Field: "evaluation-id", Reason: "too long for a hierarchy of policies"}
			}
		}
		steps[i] = step{cp: cp, req: Request{Policy: cp.pol.ID, Subject: sub, Cost: scaledCost(s.Cost, q.Hits), EvaluationID: id}}
	}
	return steps, nil
}

// scaledCost is cost × hits (hits 0: 1), saturating at math.MaxInt64 so an
// overflow is refused by the policy's max cost rather than wrapping.
func scaledCost(cost, hits int64) int64 {
	if hits <= 1 {
		return cost
	}
	if cost > math.MaxInt64/hits {
		return math.MaxInt64
	}
	return cost * hits
}
