package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/owner"
)

// The sidecar API's ServeMux patterns (the keys of Sidecar.Routes).
const (
	PatternAcquire = "POST /v1/lease/acquire"
	PatternInspect = "POST /v1/lease/inspect"
	PatternRenew   = "POST /v1/lease/renew"
	PatternRelease = "POST /v1/lease/release"
)

// SidecarPatterns lists the sidecar API's ServeMux patterns.
func SidecarPatterns() []string {
	return []string{PatternAcquire, PatternInspect, PatternRenew, PatternRelease}
}

// MaxBodyBytes bounds a POST /v1/lease/* body: a resource of at most
// MaxResourceBytes (escaped, up to six bytes each), an operation id, a
// purpose, an owner token and two numbers.
const MaxBodyBytes = 16 << 10

// Error codes only the lease sidecar answers (the generic ones are
// httpjson's). Stable: clients switch on them.
const (
	// CodeUnknownPurpose: the purpose is not on the configured allowlist.
	CodeUnknownPurpose httpjson.Code = "unknown-purpose"
	// CodeCorrupt: the lease key holds something that is not a lease.
	CodeCorrupt httpjson.Code = "lease-corrupt"
)

// Op is a sidecar operation.
type Op uint8

// Sidecar operations.
const (
	OpAcquire Op = iota + 1
	OpInspect
	OpRenew
	OpRelease
)

var opNames = [...]string{OpAcquire: "acquire", OpInspect: "inspect", OpRenew: "renew", OpRelease: "release"}

func (o Op) String() string { return enumName(opNames[:], int(o)) }

// SidecarRequest is the body of POST /v1/lease/{acquire,inspect,renew,
// release}. Every operation takes purpose, resource and operation-id;
// acquire takes ttl-ms, optionally wait-ms and owner-token (to repeat an
// attempt whose reply was lost); inspect and release take owner-token;
// renew takes owner-token and ttl-ms.
type SidecarRequest struct {
	// Purpose is the lease's purpose slug (on the allowlist when one is
	// configured).
	Purpose string `json:"purpose"`
	// Resource names the resource (1..MaxResourceBytes bytes of UTF-8;
	// only ever digested, never echoed).
	Resource string `json:"resource"`
	// TTLMs (acquire, renew) is the lease's TTL in milliseconds: above
	// the drift budget, at most max-ttl.
	TTLMs int64 `json:"ttl-ms,omitempty"`
	// WaitMs (acquire) bounds the wait for a contended lease (0..max-wait;
	// default 0: one try).
	WaitMs int64 `json:"wait-ms,omitempty"`
	// OperationID names the caller's operation (1..128 bytes of UTF-8).
	OperationID string `json:"operation-id"`
	// OwnerToken is the token an acquire answered: required by inspect,
	// renew and release; on acquire, repeats that attempt.
	OwnerToken string `json:"owner-token,omitempty"`
}

// Limits are the bounds DecodeRequest checks, a Client's.
type Limits struct {
	DriftBudget, MaxTTL, MaxWait time.Duration
}

// Limits returns the client's request bounds.
func (c *Client) Limits() Limits {
	return Limits{DriftBudget: c.drift, MaxTTL: c.maxTTL, MaxWait: c.maxWait}
}

// DecodeRequest decodes and validates a sidecar body for op strictly
// (httpjson.Decode: one object; unknown, duplicate or case-variant
// members, null, trailing data, invalid UTF-8 and lone surrogates fail),
// bounds every field and refuses the fields op does not take. Failures are
// a *httpjson.Error carrying a stable Code; no message echoes a value.
func DecodeRequest(op Op, body []byte, lim Limits) (SidecarRequest, error) {
	req, e := decodeRequest(op, body, lim)
	if e != nil {
		return SidecarRequest{}, e
	}
	return req, nil
}

func decodeRequest(op Op, body []byte, lim Limits) (SidecarRequest, *httpjson.Error) {
	var req SidecarRequest
	if e := httpjson.Decode(body, MaxBodyBytes, &req); e != nil {
		return SidecarRequest{}, e
	}
	if e := req.validate(op, lim); e != nil {
		return SidecarRequest{}, e
	}
	return req, nil
}

func (r *SidecarRequest) validate(op Op, lim Limits) *httpjson.Error {
	switch {
	case !ValidPurpose(r.Purpose):
		return httpjson.FieldError("purpose", "required: a slug of 1..64 lower-case letters, digits and '-'")
	case len(r.Resource) == 0 || len(r.Resource) > MaxResourceBytes || !utf8.ValidString(r.Resource):
		return httpjson.FieldError("resource", fmt.Sprintf("required: 1..%d bytes of UTF-8", MaxResourceBytes))
	case len(r.OperationID) == 0 || len(r.OperationID) > MaxOperationIDBytes || !utf8.ValidString(r.OperationID):
		return httpjson.FieldError("operation-id", fmt.Sprintf("required: 1..%d bytes of UTF-8", MaxOperationIDBytes))
	}
	takesTTL, takesWait, needsOwner := false, false, true
	switch op {
	case OpAcquire:
		takesTTL, takesWait, needsOwner = true, true, false
	case OpRenew:
		takesTTL = true
	case OpInspect, OpRelease:
	default:
		return httpjson.NewError(http.StatusNotFound, httpjson.CodeNotFound, "no such operation")
	}
	if r.OwnerToken != "" || needsOwner {
		if _, err := owner.Parse(r.OwnerToken); err != nil {
			// Never echoed: a near-miss token is still a secret.
			return httpjson.FieldError("owner-token", "must be the owner token an acquire answered")
		}
	}
	switch {
	case !takesTTL && r.TTLMs != 0:
		return httpjson.FieldError("ttl-ms", "not taken by "+op.String())
	case takesTTL && (r.TTLMs <= lim.DriftBudget.Milliseconds() || r.TTLMs > lim.MaxTTL.Milliseconds()):
		return httpjson.FieldError("ttl-ms", fmt.Sprintf("required: %d..%d (above the drift budget, at most max-ttl)",
			lim.DriftBudget.Milliseconds()+1, lim.MaxTTL.Milliseconds()))
	case !takesWait && r.WaitMs != 0:
		return httpjson.FieldError("wait-ms", "not taken by "+op.String())
	case r.WaitMs < 0 || r.WaitMs > lim.MaxWait.Milliseconds():
		return httpjson.FieldError("wait-ms", fmt.Sprintf("must be within 0..%d (max-wait)", lim.MaxWait.Milliseconds()))
	}
	return nil
}

// SidecarResponse is the outcome of a sidecar call: HTTP 200 for every
// outcome the lease protocol reached, INDETERMINATE included (UNAVAILABLE
// is a 503 error body instead). It never contains the resource; it contains
// the owner token only in acquire's answer.
type SidecarResponse struct {
	// Operation is acquire, inspect, renew or release.
	Operation string `json:"operation"`
	// Kind is the outcome: acquire and inspect ACQUIRED,
	// REPLAYED_SAME_OPERATION (the attempt holds it), CONTENDED,
	// OWNER_OPERATION_CONFLICT, ABSENT (inspect), INDETERMINATE; renew
	// RENEWED, LOST, INDETERMINATE; release RELEASED, ALREADY_ABSENT,
	// NOT_OWNER, INDETERMINATE.
	Kind string `json:"kind"`
	// Held is the only field a client needs before it works: true iff the
	// attempt holds the lease with validity left. Never true on a guess.
	Held bool `json:"held"`
	// OwnerToken (acquire only) is the attempt's owner token, minted by the
	// host unless the request repeated one: keep it secret, send it back to
	// inspect, renew, release, or to repeat the acquire after a lost reply.
	OwnerToken string `json:"owner-token,omitempty"`
	// ValidityMs (held) is the validity left when the host answered: the
	// TTL from just before its send (or the server's remaining TTL on a
	// replay), minus the drift budget. Subtract your own request latency.
	ValidityMs int64 `json:"validity-ms"`
	// RetryAfterMs (CONTENDED, OWNER_OPERATION_CONFLICT) is the holder's
	// remaining TTL.
	RetryAfterMs int64 `json:"retry-after-ms"`
	// Certainty is the execution certainty of the last Redis call
	// (APPLIED, NOT_APPLIED, ..., INDETERMINATE).
	Certainty string `json:"certainty"`
	// Attempts (acquire) is how many acquire calls were sent.
	Attempts int `json:"attempts,omitempty"`
}

// Sidecar serves the lease HTTP API for services outside the process. It
// keeps no per-lease state between calls: renew, inspect and release
// rebuild the attempt from the request (ResumeAttempt).
type Sidecar struct {
	c *Client
}

// NewSidecar serves c.
func NewSidecar(c *Client) *Sidecar { return &Sidecar{c: c} }

// Routes returns the sidecar's handlers keyed by SidecarPatterns.
func (s *Sidecar) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		PatternAcquire: s.handler(OpAcquire),
		PatternInspect: s.handler(OpInspect),
		PatternRenew:   s.handler(OpRenew),
		PatternRelease: s.handler(OpRelease),
	}
}

func (s *Sidecar) handler(op Op) http.Handler {
	return httpjson.Handler(func(w http.ResponseWriter, r *http.Request) (SidecarResponse, *httpjson.Error) {
		return s.serve(w, r, op)
	})
}

func (s *Sidecar) serve(w http.ResponseWriter, r *http.Request, op Op) (SidecarResponse, *httpjson.Error) {
	body, e := httpjson.ReadBody(w, r, MaxBodyBytes)
	if e != nil {
		return SidecarResponse{}, e
	}
	req, e := decodeRequest(op, body, s.c.Limits())
	if e != nil {
		return SidecarResponse{}, e
	}
	if s.c.purposes != nil && !s.c.purposes[req.Purpose] {
		return SidecarResponse{}, httpjson.NewError(http.StatusBadRequest, CodeUnknownPurpose, "the purpose is not on capabilities.lease.purposes")
	}
	var a Attempt
	var err error
	if req.OwnerToken == "" {
		a, err = NewAttempt(req.OperationID)
	} else {
		tok, _ := owner.Parse(req.OwnerToken) // validated by decodeRequest
		a, err = ResumeAttempt(tok, req.OperationID)
	}
	if err != nil {
		return SidecarResponse{}, s.errorOf(err)
	}
	ctx := r.Context()
	resource, ttl := []byte(req.Resource), time.Duration(req.TTLMs)*time.Millisecond
	out := SidecarResponse{Operation: op.String()}
	switch op {
	case OpAcquire, OpInspect:
		var acq Acquisition
		if op == OpAcquire {
			acq, err = s.c.Acquire(ctx, Request{Purpose: req.Purpose, Resource: resource, TTL: ttl,
				Wait: time.Duration(req.WaitMs) * time.Millisecond, Attempt: a})
			out.OwnerToken, out.Attempts = a.Owner().Reveal(), acq.Attempts
		} else {
			// The TTL only shapes renewals of the handle, which the
			// stateless sidecar never makes.
			acq, err = s.c.Inspect(ctx, req.Purpose, resource, a, s.c.maxTTL)
		}
		if err != nil {
			return SidecarResponse{}, s.errorOf(err)
		}
		if acq.Kind == Unavailable {
			return SidecarResponse{}, unavailable(acq.Overloaded)
		}
		out.Kind, out.Certainty, out.RetryAfterMs = acq.Kind.String(), acq.Certainty.String(), acq.RetryAfter.Milliseconds()
		if acq.Handle != nil {
			if v := acq.Handle.Remaining(); v > 0 {
				out.Held, out.ValidityMs = true, v.Milliseconds()
			}
		}
	case OpRenew:
		res, err := s.c.Renew(ctx, Request{Purpose: req.Purpose, Resource: resource, TTL: ttl, Attempt: a})
		if err != nil {
			return SidecarResponse{}, s.errorOf(err)
		}
		if res.Kind == RenewUnavailable {
			return SidecarResponse{}, unavailable(res.Overloaded)
		}
		out.Kind, out.Certainty = res.Kind.String(), res.Certainty.String()
		if res.Kind == Renewed && res.Validity > 0 {
			out.Held, out.ValidityMs = true, res.Validity.Milliseconds()
		}
	case OpRelease:
		res, err := s.c.Release(ctx, req.Purpose, resource, a)
		if err != nil {
			return SidecarResponse{}, s.errorOf(err)
		}
		if res.Kind == ReleaseUnavailable {
			return SidecarResponse{}, unavailable(res.Overloaded)
		}
		out.Kind, out.Certainty = res.Kind.String(), res.Certainty.String()
	}
	return out, nil
}

// unavailable is the answer when Redis refused or could not be reached
// before the program ran: nothing changed, repeating is safe.
func unavailable(overloaded bool) *httpjson.Error {
	msg := "Redis could not be reached before the lease program ran; nothing changed"
	if overloaded {
		msg = "the host or Redis refused the call for load before the lease program ran; nothing changed"
	}
	return &httpjson.Error{Status: http.StatusServiceUnavailable, RetryAfter: time.Second,
		Body: httpjson.ErrorBody{Code: httpjson.CodeUnavailable, Message: msg}}
}

// errorOf maps an error of the client to its answer.
func (s *Sidecar) errorOf(err error) *httpjson.Error {
	switch {
	case errors.Is(err, ErrInvalidRequest):
		return httpjson.NewError(http.StatusBadRequest, httpjson.CodeBadRequest, "the lease request is out of bounds")
	case errors.Is(err, ErrCorrupt):
		s.c.log.Warn("lease: a lease key holds no lease")
		return httpjson.NewError(http.StatusInternalServerError, CodeCorrupt, "the lease key holds something that is not a lease")
	case errors.Is(err, ErrClosed):
		return httpjson.NewError(http.StatusServiceUnavailable, httpjson.CodeUnavailable, "the host is shutting down")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return httpjson.NewError(http.StatusServiceUnavailable, httpjson.CodeUnavailable, "the request ended before the lease answered")
	}
	s.c.log.Error("lease: sidecar call failed", "error", err)
	return httpjson.NewError(http.StatusInternalServerError, "internal", "the lease call failed")
}

// redacted stands for an owner token in printed requests and answers.
func redacted(tok string) string {
	if tok == "" {
		return `""`
	}
	return "***"
}

// Format prints r (every verb) without its owner token and with only the
// resource's length, so a request that reaches a log or an error carries
// neither the secret nor the caller's data.
func (r SidecarRequest) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprintf(f, "lease.SidecarRequest{Purpose:%q, Resource:(%d bytes), TTLMs:%d, WaitMs:%d, OperationID:%q, OwnerToken:%s}",
		r.Purpose, len(r.Resource), r.TTLMs, r.WaitMs, r.OperationID, redacted(r.OwnerToken))
}

// LogValue logs r as Format prints it (slog's JSON handler would otherwise
// marshal the token).
func (r SidecarRequest) LogValue() slog.Value { return slog.StringValue(fmt.Sprint(r)) }

// Format prints r (every verb) without its owner token; only the JSON
// answer to acquire carries it.
func (r SidecarResponse) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprintf(f, "lease.SidecarResponse{Operation:%s, Kind:%s, Held:%t, OwnerToken:%s, ValidityMs:%d, RetryAfterMs:%d, Certainty:%s, Attempts:%d}",
		r.Operation, r.Kind, r.Held, redacted(r.OwnerToken), r.ValidityMs, r.RetryAfterMs, r.Certainty, r.Attempts)
}

// LogValue logs r as Format prints it.
func (r SidecarResponse) LogValue() slog.Value { return slog.StringValue(fmt.Sprint(r)) }
