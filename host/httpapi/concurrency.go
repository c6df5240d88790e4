package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/policy"
)

// MaxConcurrencyBodyBytes bounds a POST /v1/concurrency/* body: a policy
// id, at most MaxSubjectEntries subject values of at most
// ratelimit.MaxSubjectValueBytes each, an owner token and two numbers.
const MaxConcurrencyBodyBytes = 16 << 10

// ConcurrencyRequest is the body of POST /v1/concurrency/acquire, /renew
// and /release. Acquire takes policy, subject, ttl-ms and deadline-ms;
// renew adds owner and revision; release takes them without ttl-ms.
type ConcurrencyRequest struct {
	// Policy is the id of a concurrency policy (required; there is no
	// selector for permits).
	Policy string `json:"policy"`
	// Revision (renew, release) is the revision the acquire answered;
	// empty means the active one. A permit stays in its revision's set
	// after a policy swap.
	Revision string `json:"revision,omitempty"`
	// Subject maps each of the policy's dimensions to its raw value, as
	// for evaluate; only ever digested, never echoed.
	Subject map[string]string `json:"subject,omitempty"`
	// Owner (renew, release) is the owner token the acquire returned.
	Owner string `json:"owner,omitempty"`
	// TTLMs (acquire, renew) is the permit's life: 0 takes the policy's
	// permit-ttl; otherwise within policy.RateMinPermitTTL and permit-ttl.
	TTLMs int64 `json:"ttl-ms,omitempty"`
	// DeadlineMs bounds the call (1..10000; default 250).
	DeadlineMs int64 `json:"deadline-ms,omitempty"`
}

// ConcurrencyResponse is the outcome of a concurrency call (always HTTP
// 200 once the request was valid). It never contains a subject value; it
// contains the owner token only in the answer to the acquire that minted
// it.
type ConcurrencyResponse struct {
	// Operation is acquire, renew or release.
	Operation string `json:"operation"`
	// Kind is evaluated, unavailable or indeterminate (never degraded: a
	// concurrency limiter fails closed).
	Kind string `json:"kind"`
	// OK is the only field a client needs: true iff the permit was
	// acquired, renewed or released. An acquire that is not OK must not
	// start its work.
	OK bool `json:"ok"`
	// Status (evaluated only) is acquired, contended, renewed, released or
	// not-held (renew/release: no live permit for this owner — expired,
	// already released, or not this owner's).
	Status   string `json:"status,omitempty"`
	Policy   string `json:"policy,omitempty"`
	Revision string `json:"revision,omitempty"`
	// Owner is the permit's owner token (acquire, when acquired or
	// indeterminate): keep it secret, send it back to renew and release.
	// After an indeterminate acquire, release with it.
	Owner string `json:"owner,omitempty"`
	// TTLMs is the permit's life per acquire or renew (acquired, renewed).
	TTLMs int64 `json:"ttl-ms,omitempty"`
	// ExpiresAt is the permit's expiry in Redis server time (RFC 3339,
	// UTC; acquired, renewed). Renew well before it.
	ExpiresAt string `json:"expires-at,omitempty"`
	// Limit is the policy's maximum permits; InUse the live permits after
	// the call (evaluated).
	Limit *int64 `json:"limit,omitempty"`
	InUse *int64 `json:"in-use,omitempty"`
	// RetryAfterMs is the suggested wait (contended, unavailable,
	// indeterminate).
	RetryAfterMs int64 `json:"retry-after-ms"`
	// Category says why there is no answer (unavailable, indeterminate).
	Category string `json:"category,omitempty"`
	// Certainty is the execution certainty of the Redis call (APPLIED,
	// NOT_APPLIED, CONFLICT, REJECTED, UNAVAILABLE_BEFORE_SEND,
	// OVERLOADED_BEFORE_SEND, INDETERMINATE).
	Certainty string `json:"certainty"`
	// Reconciled marks an answer from the single repeat after a timeout.
	Reconciled bool `json:"reconciled,omitempty"`
}

// DecodeConcurrencyRequest decodes and validates a concurrency body for op
// ("acquire", "renew" or "release") strictly: unknown fields, fields the
// operation does not take, trailing data, invalid UTF-8 and out-of-bounds
// values fail with an error carrying a stable Code.
func DecodeConcurrencyRequest(op string, body []byte) (ConcurrencyRequest, error) {
	req, e := decodeConcurrency(op, body)
	if e != nil {
		return ConcurrencyRequest{}, e
	}
	return req, nil
}

func decodeConcurrency(op string, body []byte) (ConcurrencyRequest, *Error) {
	var req ConcurrencyRequest
	if e := decodeStrict(body, MaxConcurrencyBodyBytes, &req); e != nil {
		return ConcurrencyRequest{}, e
	}
	if e := req.validate(op); e != nil {
		return ConcurrencyRequest{}, e
	}
	return req, nil
}

func (r *ConcurrencyRequest) validate(op string) *Error {
	if r.Policy == "" || len(r.Policy) > MaxPolicyIDBytes || !utf8.ValidString(r.Policy) {
		return fieldError("policy", fmt.Sprintf("required, at most %d bytes of UTF-8", MaxPolicyIDBytes))
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
	switch op {
	case "acquire":
		if r.Owner != "" {
			return fieldError("owner", "not taken by acquire: the host mints the owner token")
		}
		if r.Revision != "" {
			return fieldError("revision", "not taken by acquire: permits are acquired under the active revision")
		}
	case "renew", "release":
		if _, err := ratelimit.ParseOwnerToken(r.Owner); err != nil {
			// Never echoed: a near-miss token is still a secret.
			return fieldError("owner", "must be the owner token the acquire returned")
		}
		if len(r.Revision) > policy.RateMaxRevisionBytes || !utf8.ValidString(r.Revision) {
			return fieldError("revision", fmt.Sprintf("at most %d bytes", policy.RateMaxRevisionBytes))
		}
		if op == "release" && r.TTLMs != 0 {
			return fieldError("ttl-ms", "not taken by release")
		}
	}
	if r.TTLMs < 0 || r.TTLMs > policy.RateMaxPermitTTL.Milliseconds() {
		return fieldError("ttl-ms", fmt.Sprintf("must be within %d..%d (0: the policy's permit-ttl)",
			policy.RateMinPermitTTL.Milliseconds(), policy.RateMaxPermitTTL.Milliseconds()))
	}
	if r.DeadlineMs < 0 || r.DeadlineMs > MaxDeadline.Milliseconds() {
		return fieldError("deadline-ms", fmt.Sprintf("must be within 1..%d", MaxDeadline.Milliseconds()))
	}
	return nil
}

// concurrency serves POST /v1/concurrency/{op}. The owner token is minted
// by the host on acquire, returned once in the body and never logged;
// renew and release are answered for whoever presents it (as with
// evaluate, the sidecar API has no authentication of its own: bind it to
// loopback or a private network).
func (a *api) concurrency(op string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, e := readBody(w, r, MaxConcurrencyBodyBytes)
		if e != nil {
			writeError(w, e)
			return
		}
		req, e := decodeConcurrency(op, body)
		if e != nil {
			writeError(w, e)
			return
		}
		conc, err := a.b.Concurrency()
		if err != nil {
			if errors.Is(err, host.ErrCapabilityDisabled) {
				writeError(w, newError(http.StatusServiceUnavailable, CodeCapabilityDisabled, "the rate-limit capability is not enabled"))
				return
			}
			a.log.Warn("concurrency limiter unavailable", "error", err)
			writeError(w, newError(http.StatusServiceUnavailable, CodeUnavailable, "the concurrency limiter is unavailable"))
			return
		}
		pol, ok := conc.Policies().Policy(req.Policy)
		if !ok {
			writeError(w, newError(http.StatusBadRequest, CodeUnknownPolicy, "no active policy has that id"))
			return
		}
		if pol.Algorithm != policy.RateConcurrency {
			writeError(w, fieldError("policy", "not a concurrency policy (evaluate rate policies at /v1/ratelimit/evaluate)"))
			return
		}
		// The subject is built exactly as for evaluate (SubjectFor); with no
		// mapping it can only lack a value or carry one too long.
		attrs := ratelimit.Attributes{Route: req.Subject["route"], ResourceClass: req.Subject["resource-class"]}
		sub, err := ratelimit.SubjectFor(pol, ratelimit.Selection{Policy: pol.ID}, attrs, identityOf(req.Subject))
		if err != nil {
			writeError(w, a.decideError(err))
			return
		}
		budget := a.budget
		if req.DeadlineMs > 0 {
			budget = time.Duration(req.DeadlineMs) * time.Millisecond
		}
		deadline := time.Now().Add(budget)
		ctx, cancel := context.WithDeadline(r.Context(), deadline)
		defer cancel()
		ttl := time.Duration(req.TTLMs) * time.Millisecond
		var o ratelimit.ConcurrencyOutcome
		switch op {
		case "acquire":
			o = conc.Acquire(ctx, ratelimit.ConcurrencyRequest{Policy: pol.ID, Subject: sub, TTL: ttl, Deadline: deadline})
		default:
			owner, _ := ratelimit.ParseOwnerToken(req.Owner) // validated by decodeConcurrency
			ref := ratelimit.PermitRef{Policy: pol.ID, Revision: req.Revision, Subject: sub, Owner: owner, TTL: ttl, Deadline: deadline}
			if op == "renew" {
				o = conc.Renew(ctx, ref)
			} else {
				o = conc.Release(ctx, ref)
			}
		}
		if o.Kind() == ratelimit.Unavailable && o.Category() == ratelimit.CategoryInvalidRequest {
			writeError(w, newError(http.StatusBadRequest, CodeInvalidRequest, "the policy rejected the request (ttl-ms, revision or dimensions)"))
			return
		}
		writeJSON(w, http.StatusOK, concurrencyResponseOf(o))
	})
}

// concurrencyResponseOf maps an outcome to its JSON form.
func concurrencyResponseOf(o ratelimit.ConcurrencyOutcome) ConcurrencyResponse {
	r := ConcurrencyResponse{
		Operation: o.Op().String(), Kind: o.Kind().String(), OK: o.Err() == nil,
		Policy: o.Policy(), Revision: o.Revision(), RetryAfterMs: o.RetryAfter().Milliseconds(),
		Category: string(o.Category()), Certainty: o.Certainty().String(), Reconciled: o.Reconciled(),
	}
	if st, ok := o.Status(); ok {
		limit, inUse := o.Limit(), o.InUse()
		r.Status, r.Limit, r.InUse = st.String(), &limit, &inUse
		if st == ratelimit.PermitAcquired || st == ratelimit.PermitRenewed {
			r.ExpiresAt = o.ExpiresAt().UTC().Format(time.RFC3339Nano)
		}
	}
	r.TTLMs = o.TTL().Milliseconds()
	if l := o.Lease(); l != nil {
		r.Owner = l.Owner().Reveal()
	}
	return r
}
