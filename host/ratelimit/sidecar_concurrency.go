package ratelimit

import (
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/policy"
)

// MaxPermitBodyBytes bounds a POST /v1/concurrency/* body: a policy id, at
// most MaxSubjectEntries subject values of at most MaxSubjectValueBytes
// each, an owner token and two numbers.
const MaxPermitBodyBytes = 16 << 10

// PermitRequest is the body of POST /v1/concurrency/acquire, /renew and
// /release. Acquire takes policy, subject, ttl-ms and deadline-ms; renew
// adds owner and revision; release takes them without ttl-ms.
type PermitRequest struct {
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

// PermitResponse is the outcome of a concurrency call (always HTTP 200
// once the request was valid). It never contains a subject value; it
// contains the owner token only in the answer to the acquire that minted
// it.
type PermitResponse struct {
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

// DecodePermitRequest decodes and validates a concurrency body for op
// strictly, as DecodeEvaluateRequest does (httpjson.Decode), and refuses
// the fields the operation does not take; failures are a *httpjson.Error
// carrying a stable Code.
func DecodePermitRequest(op ConcurrencyOp, body []byte) (PermitRequest, error) {
	req, e := decodePermit(op, body)
	if e != nil {
		return PermitRequest{}, e
	}
	return req, nil
}

func decodePermit(op ConcurrencyOp, body []byte) (PermitRequest, *httpjson.Error) {
	var req PermitRequest
	if e := httpjson.Decode(body, MaxPermitBodyBytes, &req); e != nil {
		return PermitRequest{}, e
	}
	if e := req.validate(op); e != nil {
		return PermitRequest{}, e
	}
	return req, nil
}

func (r *PermitRequest) validate(op ConcurrencyOp) *httpjson.Error {
	if r.Policy == "" || len(r.Policy) > MaxPolicyIDBytes || !utf8.ValidString(r.Policy) {
		return httpjson.FieldError("policy", fmt.Sprintf("required, at most %d bytes of UTF-8", MaxPolicyIDBytes))
	}
	if e := validSubject(r.Subject); e != nil {
		return e
	}
	switch op {
	case OpAcquire:
		if r.Owner != "" {
			return httpjson.FieldError("owner", "not taken by acquire: the host mints the owner token")
		}
		if r.Revision != "" {
			return httpjson.FieldError("revision", "not taken by acquire: permits are acquired under the active revision")
		}
	case OpRenew, OpRelease:
		if _, err := ParseOwnerToken(r.Owner); err != nil {
			// Never echoed: a near-miss token is still a secret.
			return httpjson.FieldError("owner", "must be the owner token the acquire returned")
		}
		if len(r.Revision) > policy.RateMaxRevisionBytes || !utf8.ValidString(r.Revision) {
			return httpjson.FieldError("revision", fmt.Sprintf("at most %d bytes", policy.RateMaxRevisionBytes))
		}
		if op == OpRelease && r.TTLMs != 0 {
			return httpjson.FieldError("ttl-ms", "not taken by release")
		}
	default:
		return httpjson.NewError(http.StatusNotFound, httpjson.CodeNotFound, "no such operation")
	}
	if r.TTLMs < 0 || r.TTLMs > policy.RateMaxPermitTTL.Milliseconds() {
		return httpjson.FieldError("ttl-ms", fmt.Sprintf("must be within %d..%d (0: the policy's permit-ttl)",
			policy.RateMinPermitTTL.Milliseconds(), policy.RateMaxPermitTTL.Milliseconds()))
	}
	return validDeadline(r.DeadlineMs)
}

// permit serves POST /v1/concurrency/{op}. The owner token is minted by
// the host on acquire, returned once in the body and never logged; renew
// and release are answered for whoever presents it.
func (s *Sidecar) permit(op ConcurrencyOp) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, e := httpjson.ReadBody(w, r, MaxPermitBodyBytes)
		if e != nil {
			httpjson.WriteError(w, e)
			return
		}
		req, e := decodePermit(op, body)
		if e != nil {
			httpjson.WriteError(w, e)
			return
		}
		switch {
		case s.lim == nil:
			httpjson.WriteError(w, errDisabled())
			return
		case s.conc == nil:
			httpjson.WriteError(w, httpjson.NewError(http.StatusServiceUnavailable, httpjson.CodeUnavailable, "the concurrency limiter is unavailable"))
			return
		}
		pol, ok := s.conc.Policies().Policy(req.Policy)
		if !ok {
			httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, CodeUnknownPolicy, "no active policy has that id"))
			return
		}
		if pol.Algorithm != policy.RateConcurrency {
			httpjson.WriteError(w, httpjson.FieldError("policy", "not a concurrency policy (evaluate rate policies at /v1/ratelimit/evaluate)"))
			return
		}
		// The subject is built exactly as for evaluate (SubjectFor); with no
		// mapping it can only lack a value or carry one too long.
		q := subjectQuery(req.Subject)
		sub, err := SubjectFor(pol, Selection{Policy: pol.ID}, Attributes{Route: q.Route, ResourceClass: q.ResourceClass}, q.Identity)
		if err != nil {
			httpjson.WriteError(w, s.decideError(err))
			return
		}
		deadline := s.deadline(req.DeadlineMs)
		ttl := time.Duration(req.TTLMs) * time.Millisecond
		var o ConcurrencyOutcome
		switch op {
		case OpAcquire:
			o = s.conc.Acquire(r.Context(), ConcurrencyRequest{Policy: pol.ID, Subject: sub, TTL: ttl, Deadline: deadline})
		default:
			owner, _ := ParseOwnerToken(req.Owner) // validated by decodePermit
			ref := PermitRef{Policy: pol.ID, Revision: req.Revision, Subject: sub, Owner: owner, TTL: ttl, Deadline: deadline}
			if op == OpRenew {
				o = s.conc.Renew(r.Context(), ref)
			} else {
				o = s.conc.Release(r.Context(), ref)
			}
		}
		if o.Kind() == Unavailable && o.Category() == CategoryInvalidRequest {
			httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, CodeInvalidRequest, "the policy rejected the request (ttl-ms, revision or dimensions)"))
			return
		}
		httpjson.WriteJSON(w, http.StatusOK, permitResponseOf(o))
	})
}

// permitResponseOf maps an outcome to its JSON form.
func permitResponseOf(o ConcurrencyOutcome) PermitResponse {
	r := PermitResponse{
		Operation: o.Op().String(), Kind: o.Kind().String(), OK: o.Err() == nil,
		Policy: o.Policy(), Revision: o.Revision(), RetryAfterMs: o.RetryAfter().Milliseconds(),
		Category: string(o.Category()), Certainty: o.Certainty().String(), Reconciled: o.Reconciled(),
	}
	if st, ok := o.Status(); ok {
		limit, inUse := o.Limit(), o.InUse()
		r.Status, r.Limit, r.InUse = st.String(), &limit, &inUse
		if st == PermitAcquired || st == PermitRenewed {
			r.ExpiresAt = o.ExpiresAt().UTC().Format(time.RFC3339Nano)
		}
	}
	r.TTLMs = o.TTL().Milliseconds()
	if l := o.Lease(); l != nil {
		r.Owner = l.Owner().Reveal()
	}
	return r
}
