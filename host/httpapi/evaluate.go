package httpapi

import (
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
	q := ratelimit.Query{
		Attributes: ratelimit.Attributes{
			Route: req.Attributes.Route, Method: req.Attributes.Method, PrincipalTier: req.Attributes.PrincipalTier,
			APIKeyPlan: req.Attributes.APIKeyPlan, ClientIPClass: req.Attributes.ClientIPClass, ResourceClass: req.Attributes.ResourceClass,
		},
		Identity: identityOf(req.Subject), Route: req.Subject["route"], ResourceClass: req.Subject["resource-class"],
		Policy: req.Policy, Cost: req.Cost, EvaluationID: req.EvaluationID, Deadline: time.Now().Add(budget),
	}
	o, err := lim.Decide(r.Context(), sel, q)
	if err != nil {
		writeError(w, a.decideError(err))
		return
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

// identityOf takes the identity dimensions of a subject object.
func identityOf(sub map[string]string) ratelimit.Identity {
	return ratelimit.Identity{Tenant: sub["tenant"], Principal: sub["principal"], APIKey: sub["api-key"], ClientIP: sub["client-ip"]}
}

// decideError maps a Limiter.Decide error to its answer. Selector failures
// are logged as a bounded kind only: the error may carry a guest's message.
func (a *api) decideError(err error) *Error {
	var src *ratelimit.SourceError
	var qe *ratelimit.QueryError
	switch {
	case errors.As(err, &src):
		e := newError(http.StatusBadRequest, CodeMissingSubject, "no value for subject dimension "+src.Dimension)
		e.Body.Field = "subject." + src.Dimension
		return e
	case errors.As(err, &qe):
		return fieldError(qe.Field, qe.Reason)
	case errors.Is(err, ratelimit.ErrUnknownPolicy):
		return newError(http.StatusBadRequest, CodeUnknownPolicy, "no active policy has that id")
	case errors.Is(err, ratelimit.ErrNoSelector):
		return newError(http.StatusBadRequest, CodeInvalidField, "no selector is configured: name a policy")
	case errors.Is(err, ratelimit.ErrBadSelection):
		a.log.Warn("rate policy selection does not fit the policy set", "error_kind", "selection")
		e := newError(http.StatusServiceUnavailable, CodeSelectorUnavailable, "policy selection is invalid; the request must not proceed")
		e.retryAfter = time.Second
		return e
	}
	a.log.Warn("rate policy selection failed", "error_kind", "selector")
	e := newError(http.StatusServiceUnavailable, CodeSelectorUnavailable, "policy selection failed; the request must not proceed")
	e.retryAfter = time.Second
	return e
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
