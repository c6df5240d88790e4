package ratelimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/policy"
)

// The sidecar API's ServeMux patterns (the keys of Sidecar.Routes).
const (
	PatternEvaluate = "POST /v1/ratelimit/evaluate"
	PatternAcquire  = "POST /v1/concurrency/acquire"
	PatternRenew    = "POST /v1/concurrency/renew"
	PatternRelease  = "POST /v1/concurrency/release"
)

// Bounds of the sidecar API.
const (
	// MaxEvaluateBodyBytes bounds a POST /v1/ratelimit/evaluate body.
	MaxEvaluateBodyBytes = 64 << 10
	// MaxAttributeBytes bounds each attribute (route, method, classes).
	MaxAttributeBytes = 512
	// MaxSubjectEntries bounds a subject object (one per dimension).
	MaxSubjectEntries = 8
	// MaxPolicyIDBytes bounds an explicit policy id.
	MaxPolicyIDBytes = 128
	// DefaultSidecarBudget bounds a call without deadline-ms.
	DefaultSidecarBudget = 250 * time.Millisecond
	// MaxSidecarDeadline bounds deadline-ms.
	MaxSidecarDeadline = 10 * time.Second
)

// Error codes only the rate-limit sidecar answers (the generic ones are
// httpjson's). Stable: clients switch on them.
const (
	// CodeUnknownPolicy: the explicit policy is not in the active set.
	CodeUnknownPolicy httpjson.Code = "unknown-policy"
	// CodeMissingSubject: a dimension the policy needs has no value.
	CodeMissingSubject httpjson.Code = "missing-subject"
	// CodeInvalidRequest: the limiter rejected the request as invalid (cost
	// above the policy's maximum, dimensions that do not fit).
	CodeInvalidRequest httpjson.Code = "invalid-request"
	// CodeSelectorUnavailable: policy selection failed; nothing was
	// evaluated and the request must not be allowed.
	CodeSelectorUnavailable httpjson.Code = "selector-unavailable"
	// CodeRequestRefused: the policy selector (a rate-policy guest) refused
	// the request as invalid, for example an unknown method. Nothing was
	// evaluated; repeating the same request cannot succeed.
	CodeRequestRefused httpjson.Code = "request-refused"
)

// EvaluateRequest is the body of POST /v1/ratelimit/evaluate.
type EvaluateRequest struct {
	// Attributes are the request classes a selector sees (never identities).
	Attributes EvaluateAttributes `json:"attributes"`
	// Subject maps a subject dimension (tenant, principal, api-key,
	// client-ip, route, resource-class) to its raw value. Values are only
	// ever digested by the host; they are never echoed back. Explicit route
	// and resource-class values fill those dimensions instead of the
	// attributes.
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

// DecodeEvaluateRequest decodes and validates an evaluate body strictly
// (httpjson.Decode: one object; unknown, duplicate or case-variant
// members, null, trailing data, invalid UTF-8 and lone surrogates fail)
// and bounds every field; failures are a *httpjson.Error carrying a stable
// Code. Distinct subject bytes therefore always stay distinct: nothing is
// folded to U+FFFD. Bodies over MaxEvaluateBodyBytes fail too-large.
func DecodeEvaluateRequest(body []byte) (EvaluateRequest, error) {
	req, e := decodeEvaluate(body)
	if e != nil {
		return EvaluateRequest{}, e
	}
	return req, nil
}

func decodeEvaluate(body []byte) (EvaluateRequest, *httpjson.Error) {
	var req EvaluateRequest
	if e := httpjson.Decode(body, MaxEvaluateBodyBytes, &req); e != nil {
		return EvaluateRequest{}, e
	}
	if e := req.validate(); e != nil {
		return EvaluateRequest{}, e
	}
	return req, nil
}

func (r *EvaluateRequest) validate() *httpjson.Error {
	attrs := []struct {
		name, v string
	}{
		{"attributes.route", r.Attributes.Route}, {"attributes.method", r.Attributes.Method},
		{"attributes.principal-tier", r.Attributes.PrincipalTier}, {"attributes.api-key-plan", r.Attributes.APIKeyPlan},
		{"attributes.client-ip-class", r.Attributes.ClientIPClass}, {"attributes.resource-class", r.Attributes.ResourceClass},
	}
	for _, a := range attrs {
		if len(a.v) > MaxAttributeBytes || !utf8.ValidString(a.v) {
			return httpjson.FieldError(a.name, fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxAttributeBytes))
		}
	}
	if e := validSubject(r.Subject); e != nil {
		return e
	}
	if len(r.Policy) > MaxPolicyIDBytes || (r.Policy != "" && !utf8.ValidString(r.Policy)) {
		return httpjson.FieldError("policy", fmt.Sprintf("at most %d bytes of UTF-8", MaxPolicyIDBytes))
	}
	if r.Cost < 0 {
		return httpjson.FieldError("cost", "must be >= 1")
	}
	if r.Cost > 0 && r.Policy == "" {
		return httpjson.FieldError("cost", "only with an explicit policy (the selector sets the cost)")
	}
	if len(r.EvaluationID) > MaxEvaluationIDBytes || !utf8.ValidString(r.EvaluationID) {
		return httpjson.FieldError("evaluation-id", fmt.Sprintf("at most %d bytes of UTF-8", MaxEvaluationIDBytes))
	}
	return validDeadline(r.DeadlineMs)
}

// validSubject checks a subject object of any sidecar body: subject
// dimensions only (never global), each value 1..MaxSubjectValueBytes.
func validSubject(sub map[string]string) *httpjson.Error {
	if len(sub) > MaxSubjectEntries {
		return httpjson.FieldError("subject", fmt.Sprintf("at most %d dimensions", MaxSubjectEntries))
	}
	for k, v := range sub {
		d := policy.RateDimension(k)
		if !d.Valid() || d == policy.DimGlobal {
			return httpjson.FieldError("subject", "keys must be subject dimensions: tenant, principal, api-key, client-ip, route, resource-class")
		}
		if v == "" || len(v) > MaxSubjectValueBytes {
			// The field is named by its dimension, the value never.
			return httpjson.FieldError("subject."+k, fmt.Sprintf("must be 1..%d bytes", MaxSubjectValueBytes))
		}
	}
	return nil
}

func validDeadline(ms int64) *httpjson.Error {
	if ms < 0 || ms > MaxSidecarDeadline.Milliseconds() {
		return httpjson.FieldError("deadline-ms", fmt.Sprintf("must be within 1..%d", MaxSidecarDeadline.Milliseconds()))
	}
	return nil
}

// subjectQuery is the part of a Query a sidecar subject object fills: the
// identity dimensions, and exact route and resource-class values.
func subjectQuery(sub map[string]string) Query {
	return Query{
		Identity: Identity{Tenant: sub["tenant"], Principal: sub["principal"], APIKey: sub["api-key"], ClientIP: sub["client-ip"]},
		Route:    sub["route"], ResourceClass: sub["resource-class"],
	}
}

// SidecarOptions configures NewSidecar.
type SidecarOptions struct {
	// Log receives bounded diagnostics (never a subject, a token or a
	// guest's message). Default slog.Default().
	Log *slog.Logger
	// Budget bounds a call without deadline-ms (default DefaultSidecarBudget).
	Budget time.Duration
	// Headers selects the RateLimit fields an evaluate answer with a
	// decision carries next to its JSON body (zero: the limiter's
	// Config.Headers, whose default is legacy; see WriteHeaders).
	Headers HeaderMode
}

// Sidecar serves the rate-limit capability over HTTP: POST
// /v1/ratelimit/evaluate (Limiter.Decide) and POST
// /v1/concurrency/{acquire,renew,release} (the ConcurrencyLimiter).
//
// Every body is read through httpjson (size-bounded, strict) and every
// field is bounded; every error is a JSON body with a stable code. Every
// valid call is answered HTTP 200 with the outcome in the body, so a deny
// never looks like a transport failure. Raw subject values are handed to
// the limiter and never echoed, logged or put in an error; a permit's
// owner token is returned once, in the acquire's answer. The API has no
// authentication of its own: serve it on loopback or a private network.
type Sidecar struct {
	lim     *Limiter // nil: the capability is disabled
	sel     Selector
	conc    *ConcurrencyLimiter
	log     *slog.Logger
	budget  time.Duration
	headers HeaderMode
}

// NewSidecar serves lim with sel (nil: every evaluation must name its
// policy) and conc (nil: the concurrency calls answer 503 unavailable). A
// nil lim is the sidecar of a disabled capability: bodies are still
// validated, and every valid call answers 503 capability-disabled.
func NewSidecar(lim *Limiter, sel Selector, conc *ConcurrencyLimiter, opts SidecarOptions) *Sidecar {
	s := &Sidecar{lim: lim, sel: sel, conc: conc, log: opts.Log, budget: opts.Budget, headers: opts.Headers.resolve(lim)}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.budget <= 0 {
		s.budget = DefaultSidecarBudget
	}
	return s
}

// Routes returns the sidecar's handlers keyed by ServeMux pattern
// (PatternEvaluate, PatternAcquire, PatternRenew, PatternRelease). Mount
// them with httpjson.Mount, which answers other methods with the JSON 405.
func (s *Sidecar) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		PatternEvaluate: http.HandlerFunc(s.evaluate),
		PatternAcquire:  s.permit(OpAcquire),
		PatternRenew:    s.permit(OpRenew),
		PatternRelease:  s.permit(OpRelease),
	}
}

// errDisabled answers calls to a disabled capability.
func errDisabled() *httpjson.Error {
	return httpjson.NewError(http.StatusServiceUnavailable, httpjson.CodeCapabilityDisabled, "the rate-limit capability is not enabled")
}

// deadline is when a call with deadline-ms ms must be answered.
func (s *Sidecar) deadline(ms int64) time.Time {
	budget := s.budget
	if ms > 0 {
		budget = time.Duration(ms) * time.Millisecond
	}
	return time.Now().Add(budget)
}

func (s *Sidecar) evaluate(w http.ResponseWriter, r *http.Request) {
	body, e := httpjson.ReadBody(w, r, MaxEvaluateBodyBytes)
	if e != nil {
		httpjson.WriteError(w, e)
		return
	}
	req, e := decodeEvaluate(body)
	if e != nil {
		httpjson.WriteError(w, e)
		return
	}
	if s.lim == nil {
		httpjson.WriteError(w, errDisabled())
		return
	}
	q := subjectQuery(req.Subject)
	q.Attributes = Attributes{
		Route: req.Attributes.Route, Method: req.Attributes.Method, PrincipalTier: req.Attributes.PrincipalTier,
		APIKeyPlan: req.Attributes.APIKeyPlan, ClientIPClass: req.Attributes.ClientIPClass, ResourceClass: req.Attributes.ResourceClass,
	}
	q.Policy, q.Cost, q.EvaluationID, q.Deadline = req.Policy, req.Cost, req.EvaluationID, s.deadline(req.DeadlineMs)
	o, err := s.lim.Decide(r.Context(), s.sel, q)
	if err != nil {
		httpjson.WriteError(w, s.decideError(err))
		return
	}
	if o.Kind() == Unavailable && o.Category() == CategoryInvalidRequest {
		if req.Policy == "" {
			// The selector chose something its policies cannot take: a
			// deployment problem, not the client's; never an allow.
			s.log.Warn("selected rate policy rejected the request", "policy", o.Policy())
		} else {
			httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, CodeInvalidRequest, "the policy rejected the request (cost or dimensions)"))
			return
		}
	}
	WriteHeaders(w.Header(), s.headers, o, time.Now())
	httpjson.WriteJSON(w, http.StatusOK, responseOf(o))
}

// decideError maps a Decide (or SubjectFor) error to its answer. Selector
// failures are logged as a bounded kind only: the error may carry a
// guest's message.
func (s *Sidecar) decideError(err error) *httpjson.Error {
	var src *SourceError
	var qe *QueryError
	switch {
	case errors.As(err, &src):
		e := httpjson.NewError(http.StatusBadRequest, CodeMissingSubject, "no value for subject dimension "+src.Dimension)
		e.Body.Field = "subject." + src.Dimension
		return e
	case errors.As(err, &qe):
		return httpjson.FieldError(qe.Field, qe.Reason)
	case errors.Is(err, ErrSelectionRefused):
		// The guest's detail is not repeated: it may echo attributes.
		return httpjson.NewError(http.StatusBadRequest, CodeRequestRefused, "the rate-policy selector refused the request as invalid; repeating it cannot succeed")
	case errors.Is(err, ErrUnknownPolicy):
		return httpjson.NewError(http.StatusBadRequest, CodeUnknownPolicy, "no active policy has that id")
	case errors.Is(err, ErrNoSelector):
		return httpjson.NewError(http.StatusBadRequest, httpjson.CodeInvalidField, "no selector is configured: name a policy")
	case errors.Is(err, ErrBadSelection):
		s.log.Warn("rate policy selection does not fit the policy set", "error_kind", "selection")
		e := httpjson.NewError(http.StatusServiceUnavailable, CodeSelectorUnavailable, "policy selection is invalid; the request must not proceed")
		e.RetryAfter = unavailableRetryAfter
		return e
	}
	s.log.Warn("rate policy selection failed", "error_kind", "selector")
	e := httpjson.NewError(http.StatusServiceUnavailable, CodeSelectorUnavailable, "policy selection failed; the request must not proceed")
	e.RetryAfter = unavailableRetryAfter
	return e
}

// responseOf maps an outcome to its JSON form.
func responseOf(o Outcome) EvaluateResponse {
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
