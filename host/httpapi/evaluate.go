package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/policy"
)

// Field bounds of an evaluate request.
const (
	// MaxAttributeBytes bounds each attribute (route, method, classes).
	MaxAttributeBytes = 512
	// MaxSubjectEntries bounds the subject object (one per dimension).
	MaxSubjectEntries = 8
	// MaxPolicyIDBytes bounds the explicit policy id.
	MaxPolicyIDBytes = 128
)

// EvaluateRequest is the body of POST /v1/ratelimit/evaluate.
type EvaluateRequest struct {
	// Attributes are the request classes a selector sees (never identities).
	Attributes EvaluateAttributes `json:"attributes"`
	// Subject maps a subject dimension (tenant, principal, api-key,
	// client-ip, route, resource-class) to its raw value. Values are only
	// ever digested by the host; they are never echoed back.
	Subject map[string]string `json:"subject,omitempty"`
	// Policy, when set, evaluates exactly that policy; otherwise the host's
	// selector chooses the policies from Attributes.
	Policy string `json:"policy,omitempty"`
	// Cost is the cost of an explicit-policy evaluation (default 1); the
	// selector sets the cost of selected policies.
	Cost int64 `json:"cost,omitempty"`
	// EvaluationID (at most 128 bytes) identifies the evaluation for dedup.
	EvaluationID string `json:"evaluation-id,omitempty"`
	// DeadlineMs bounds the evaluation (1..10000; default 250).
	DeadlineMs int64 `json:"deadline-ms,omitempty"`
}

// EvaluateAttributes are the selector attributes of a request.
type EvaluateAttributes struct {
	Route         string `json:"route,omitempty"`
	Method        string `json:"method,omitempty"`
	PrincipalTier string `json:"principal-tier,omitempty"`
	APIKeyPlan    string `json:"api-key-plan,omitempty"`
	ClientIPClass string `json:"client-ip-class,omitempty"`
	ResourceClass string `json:"resource-class,omitempty"`
}

// Outcome kinds of an EvaluateResponse beyond ratelimit.Kind's names.
const (
	// KindNotLimited: the selector chose no policy; the request is allowed.
	KindNotLimited = "not-limited"
)

// EvaluateResponse is the outcome of an evaluation (always HTTP 200). It
// never contains a subject value.
type EvaluateResponse struct {
	// Kind is evaluated, degraded, unavailable, indeterminate or not-limited.
	Kind string `json:"kind"`
	// Allowed is the only field a client needs to enforce: false for a
	// denial and for every outcome without a decision.
	Allowed bool `json:"allowed"`
	// Limit, Remaining, Reset, Source and Certainty are present only with
	// a decision (evaluated, degraded).
	Limit     *int64 `json:"limit,omitempty"`
	Remaining *int64 `json:"remaining,omitempty"`
	// RetryAfterMs is the suggested wait (0 when allowed).
	RetryAfterMs int64 `json:"retry-after-ms"`
	// Reset is when the limit resets (RFC 3339, UTC).
	Reset     string `json:"reset,omitempty"`
	Policy    string `json:"policy,omitempty"`
	Revision  string `json:"revision,omitempty"`
	Source    string `json:"source,omitempty"`
	Certainty string `json:"certainty,omitempty"`
	// EvaluationID is the dedup id used (an indeterminate outcome is
	// reconciled by evaluating again with it).
	EvaluationID string `json:"evaluation-id,omitempty"`
	// Category says why there is no global decision (failure category).
	Category string `json:"category,omitempty"`
	// Reason says why a degraded outcome was degraded.
	Reason string `json:"reason,omitempty"`
	// Replayed marks a dedup replay of an earlier evaluation.
	Replayed bool `json:"replayed,omitempty"`
}

// DecodeEvaluateRequest decodes and validates an evaluate body strictly:
// unknown fields, trailing data, invalid UTF-8 and out-of-bounds values
// fail with an error carrying a stable Code. The caller bounds the size.
func DecodeEvaluateRequest(body []byte) (EvaluateRequest, error) {
	req, e := decodeEvaluate(body)
	if e != nil {
		return EvaluateRequest{}, e
	}
	return req, nil
}

func decodeEvaluate(body []byte) (EvaluateRequest, *Error) {
	var req EvaluateRequest
	if e := decodeStrict(body, MaxEvaluateBodyBytes, &req); e != nil {
		return EvaluateRequest{}, e
	}
	if e := req.validate(); e != nil {
		return EvaluateRequest{}, e
	}
	return req, nil
}

// jsonProblem describes a decoding error without echoing request data
// (json errors quote offending values; a value may be a subject).
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %s must be %s", sanitize(te.Field, 64), te.Type.String())
		}
		return "the body must be a JSON object"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the body is empty or truncated"
	}
	// DisallowUnknownFields: `json: unknown field "x"`; the name is the
	// client's own key, bounded and sanitised.
	return sanitize(err.Error(), 128)
}

func (r *EvaluateRequest) validate() *Error {
	attrs := []struct {
		name, v string
	}{
		{"attributes.route", r.Attributes.Route}, {"attributes.method", r.Attributes.Method},
		{"attributes.principal-tier", r.Attributes.PrincipalTier}, {"attributes.api-key-plan", r.Attributes.APIKeyPlan},
		{"attributes.client-ip-class", r.Attributes.ClientIPClass}, {"attributes.resource-class", r.Attributes.ResourceClass},
	}
	for _, a := range attrs {
		if len(a.v) > MaxAttributeBytes || !utf8.ValidString(a.v) {
			return fieldError(a.name, fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxAttributeBytes))
		}
	}
	if len(r.Subject) > MaxSubjectEntries {
		return fieldError("subject", fmt.Sprintf("at most %d dimensions", MaxSubjectEntries))
	}
	for k, v := range r.Subject {
		d := policy.RateDimension(k)
		if !d.Valid() || d == policy.DimGlobal {
			return fieldError("subject", "keys must be subject dimensions: tenant, principal, api-key, client-ip, route, resource-class")
		}
		if v == "" || len(v) > ratelimit.MaxSubjectValueBytes {
			// The field is named by its dimension, the value never.
			return fieldError("subject."+k, fmt.Sprintf("must be 1..%d bytes", ratelimit.MaxSubjectValueBytes))
		}
	}
	if len(r.Policy) > MaxPolicyIDBytes || (r.Policy != "" && !utf8.ValidString(r.Policy)) {
		return fieldError("policy", fmt.Sprintf("at most %d bytes of UTF-8", MaxPolicyIDBytes))
	}
	if r.Cost < 0 {
		return fieldError("cost", "must be >= 1")
	}
	if r.Cost > 0 && r.Policy == "" {
		return fieldError("cost", "only with an explicit policy (the selector sets the cost)")
	}
	if len(r.EvaluationID) > ratelimit.MaxEvaluationIDBytes || !utf8.ValidString(r.EvaluationID) {
		return fieldError("evaluation-id", fmt.Sprintf("at most %d bytes of UTF-8", ratelimit.MaxEvaluationIDBytes))
	}
	if r.DeadlineMs < 0 || r.DeadlineMs > MaxDeadline.Milliseconds() {
		return fieldError("deadline-ms", fmt.Sprintf("must be within 1..%d", MaxDeadline.Milliseconds()))
	}
	return nil
}

func (a *api) evaluate(w http.ResponseWriter, r *http.Request) {
	body, e := readBody(w, r, MaxEvaluateBodyBytes)
	if e != nil {
		writeError(w, e)
		return
	}
	req, e := decodeEvaluate(body)
	if e != nil {
		writeError(w, e)
		return
	}
	lim, sel, err := a.b.RateLimit()
	if err != nil {
		if errors.Is(err, host.ErrCapabilityDisabled) {
			writeError(w, newError(http.StatusServiceUnavailable, CodeCapabilityDisabled, "the rate-limit capability is not enabled"))
			return
		}
		a.log.Warn("rate-limit capability unavailable", "error", err)
		writeError(w, newError(http.StatusServiceUnavailable, CodeUnavailable, "the rate-limit capability is unavailable"))
		return
	}
	budget := a.budget
	if req.DeadlineMs > 0 {
		budget = time.Duration(req.DeadlineMs) * time.Millisecond
	}
	deadline := time.Now().Add(budget)
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()

	reqs, e := a.requests(ctx, lim, sel, req, deadline)
	if e != nil {
		writeError(w, e)
		return
	}
	if len(reqs) == 0 {
		writeJSON(w, http.StatusOK, EvaluateResponse{Kind: KindNotLimited, Allowed: true})
		return
	}
	var o ratelimit.Outcome
	if len(reqs) == 1 {
		o = lim.Evaluate(ctx, reqs[0])
	} else {
		o = lim.EvaluateAll(ctx, reqs)
	}
	if o.Kind() == ratelimit.Unavailable && o.Category() == ratelimit.CategoryInvalidRequest {
		if req.Policy == "" {
			// The selector chose something its policies cannot take: a
			// deployment problem, not the client's; never an allow.
			a.log.Warn("selected rate policy rejected the request", "policy", o.Policy())
		} else {
			writeError(w, newError(http.StatusBadRequest, CodeInvalidRequest, "the policy rejected the request (cost or dimensions)"))
			return
		}
	}
	writeJSON(w, http.StatusOK, responseOf(o))
}

// requests builds the limiter requests: the explicit policy, or one per
// selection of the selector (evaluated as a hierarchy, in order).
func (a *api) requests(ctx context.Context, lim *ratelimit.Limiter, sel ratelimit.Selector, req EvaluateRequest, deadline time.Time) ([]ratelimit.Request, *Error) {
	set := lim.Policies()
	attrs := ratelimit.Attributes{
		Route: req.Attributes.Route, Method: req.Attributes.Method, PrincipalTier: req.Attributes.PrincipalTier,
		APIKeyPlan: req.Attributes.APIKeyPlan, ClientIPClass: req.Attributes.ClientIPClass, ResourceClass: req.Attributes.ResourceClass,
	}
	if req.Policy != "" {
		pol, ok := set.Policy(req.Policy)
		if !ok {
			return nil, newError(http.StatusBadRequest, CodeUnknownPolicy, "no active policy has that id")
		}
		cost := req.Cost
		if cost == 0 {
			cost = 1
		}
		sub, err := subjectFor(pol, nil, attrs, req.Subject)
		if err != nil {
			return nil, missing(err)
		}
		return []ratelimit.Request{{Policy: pol.ID, Subject: sub, Cost: cost, EvaluationID: req.EvaluationID, Deadline: deadline}}, nil
	}
	if sel == nil {
		return nil, newError(http.StatusBadRequest, CodeInvalidField, "no selector is configured: name a policy")
	}
	sels, err := sel.Select(ctx, attrs)
	if err != nil {
		// Bounded: only the fact, never attributes (they may be
		// client-supplied junk) or the guest's message.
		a.log.Warn("rate policy selection failed", "error_kind", "selector")
		e := newError(http.StatusServiceUnavailable, CodeSelectorUnavailable, "policy selection failed; the request must not proceed")
		e.retryAfter = time.Second
		return nil, e
	}
	if len(sels) > ratelimit.MaxSelections {
		a.log.Warn("rate policy selection too large", "selections", len(sels))
		e := newError(http.StatusServiceUnavailable, CodeSelectorUnavailable, "policy selection is invalid; the request must not proceed")
		e.retryAfter = time.Second
		return nil, e
	}
	out := make([]ratelimit.Request, 0, len(sels))
	for i, s := range sels {
		pol, ok := set.Policy(s.Policy)
		if !ok {
			a.log.Warn("selector chose an unknown rate policy", "policy", sanitize(s.Policy, MaxPolicyIDBytes))
			e := newError(http.StatusServiceUnavailable, CodeSelectorUnavailable, "policy selection is invalid; the request must not proceed")
			e.retryAfter = time.Second
			return nil, e
		}
		sub, err := subjectFor(pol, s.Dimensions, attrs, req.Subject)
		if err != nil {
			return nil, missing(err)
		}
		id := req.EvaluationID
		if id != "" && len(sels) > 1 {
			// One id per policy of the hierarchy, derived, so a retry of the
			// same evaluation dedups on every level.
			id = fmt.Sprintf("%s/%d", id, i)
			if len(id) > ratelimit.MaxEvaluationIDBytes {
				return nil, fieldError("evaluation-id", "too long for a hierarchy of policies")
			}
		}
		out = append(out, ratelimit.Request{Policy: pol.ID, Subject: sub, Cost: s.Cost, EvaluationID: id, Deadline: deadline})
	}
	return out, nil
}

func missing(err error) *Error {
	var m *ratelimit.SourceError
	if errors.As(err, &m) {
		e := newError(http.StatusBadRequest, CodeMissingSubject, "no value for subject dimension "+m.Dimension)
		e.Body.Field = "subject." + m.Dimension
		return e
	}
	return newError(http.StatusBadRequest, CodeInvalidRequest, "the selection does not fit the policy")
}

// subjectFor builds the subject of one selection through
// ratelimit.SubjectFor, the mapping the middleware uses too. The sidecar's
// subject object carries the identity dimensions; explicit route and
// resource-class values in it take precedence over the attributes.
func subjectFor(pol policy.RatePolicy, mapping map[string]string, a ratelimit.Attributes, sub map[string]string) (ratelimit.Subject, error) {
	id := ratelimit.Identity{Tenant: sub["tenant"], Principal: sub["principal"], APIKey: sub["api-key"], ClientIP: sub["client-ip"]}
	if v := sub["route"]; v != "" {
		a.Route = v
	}
	if v := sub["resource-class"]; v != "" {
		a.ResourceClass = v
	}
	return ratelimit.SubjectFor(pol, ratelimit.Selection{Policy: pol.ID, Dimensions: mapping}, a, id)
}

// responseOf maps an outcome to its JSON form.
func responseOf(o ratelimit.Outcome) EvaluateResponse {
	r := EvaluateResponse{
		Kind: o.Kind().String(), Allowed: o.Allowed(), RetryAfterMs: o.RetryAfter().Milliseconds(),
		Policy: o.Policy(), Revision: o.Revision(), EvaluationID: o.EvaluationID(),
		Category: string(o.Category()), Reason: string(o.Reason()), Replayed: o.Replayed(),
	}
	if d, ok := o.Decision(); ok {
		limit, remaining := d.Limit, max(d.Remaining, 0)
		r.Limit, r.Remaining = &limit, &remaining
		r.Source, r.Certainty = string(d.Source), string(d.Certainty)
		if !d.ResetAt.IsZero() {
			r.Reset = d.ResetAt.UTC().Format(time.RFC3339Nano)
		}
		if d.Policy != "" {
			r.Policy, r.Revision = d.Policy, d.Revision
		}
	}
	return r
}
