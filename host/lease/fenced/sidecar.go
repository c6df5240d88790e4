package fenced

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/runtime/certainty"
)

// The sidecar API's ServeMux patterns (the keys of Sidecar.Routes).
const (
	PatternAcquire = "POST /v1/fenced-lease/acquire"
	PatternInspect = "POST /v1/fenced-lease/inspect"
	PatternRenew   = "POST /v1/fenced-lease/renew"
	PatternRelease = "POST /v1/fenced-lease/release"
)

// SidecarPatterns lists the sidecar API's ServeMux patterns.
func SidecarPatterns() []string {
	return []string{PatternAcquire, PatternInspect, PatternRenew, PatternRelease}
}

// MaxBodyBytes bounds a POST /v1/fenced-lease/* body: a resource id of at
// most fence.MaxResourceLen bytes (escaped, up to six bytes each), a
// digest, an operation id, a purpose, an owner token and four numbers.
const MaxBodyBytes = 8 << 10

// MaxJSONInteger is the largest epoch, counter, TTL or wait the sidecar
// takes or answers: 2^53−1, exact in every JSON implementation.
const MaxJSONInteger int64 = 1<<53 - 1

// Error codes only the fenced-lease sidecar answers (the generic ones are
// httpjson's). Stable: clients switch on them.
const (
	// CodeUnknownPurpose: the purpose is not on the configured allowlist.
	CodeUnknownPurpose httpjson.Code = "unknown-purpose"
	// CodeCorrupt: the lease or counter key holds something that is not a
	// fenced lease or a fence counter.
	CodeCorrupt httpjson.Code = "fenced-lease-corrupt"
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

func (o Op) String() string {
	if int(o) <= 0 || int(o) >= len(opNames) {
		return "invalid"
	}
	return opNames[o]
}

// SidecarRequest is the body of POST /v1/fenced-lease/{acquire,inspect,
// renew,release}. Every operation takes purpose, resource, resource-epoch,
// registration-digest (the resource's ACTIVE registration, read from the
// protected store) and operation-id; acquire takes ttl-ms, optionally
// wait-ms and owner-token (to repeat an attempt whose reply was lost);
// inspect takes owner-token; renew takes owner-token, counter and ttl-ms;
// release takes owner-token and counter. The token a holder got is
// (resource-epoch, counter).
type SidecarRequest struct {
	// Purpose is the lease's purpose slug.
	Purpose string `json:"purpose"`
	// Resource is the protected resource's id (1..fence.MaxResourceLen
	// bytes of UTF-8; only ever digested, never echoed).
	Resource string `json:"resource"`
	// ResourceEpoch is the registration's epoch (1..2^53−1).
	ResourceEpoch int64 `json:"resource-epoch"`
	// RegistrationDigest is the registration digest: 64 lower-case hex
	// digits.
	RegistrationDigest string `json:"registration-digest"`
	// TTLMs (acquire, renew): above the drift budget, at most max-ttl.
	TTLMs int64 `json:"ttl-ms,omitempty"`
	// WaitMs (acquire) bounds the wait for a contended lease (0..max-wait).
	WaitMs int64 `json:"wait-ms,omitempty"`
	// OperationID names the caller's operation (1..128 bytes of UTF-8).
	OperationID string `json:"operation-id"`
	// OwnerToken is the token an acquire answered: required by inspect,
	// renew and release; on acquire, repeats that attempt.
	OwnerToken string `json:"owner-token,omitempty"`
	// Counter (renew, release) is the fencing token's counter the acquire
	// answered (1..2^53−1).
	Counter int64 `json:"counter,omitempty"`
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
	case !lease.ValidPurpose(r.Purpose):
		return httpjson.FieldError("purpose", "required: a slug of 1..64 lower-case letters, digits and '-'")
	case len(r.Resource) == 0 || len(r.Resource) > fence.MaxResourceLen || !utf8.ValidString(r.Resource):
		return httpjson.FieldError("resource", fmt.Sprintf("required: 1..%d bytes of UTF-8", fence.MaxResourceLen))
	case r.ResourceEpoch < 1 || r.ResourceEpoch > MaxJSONInteger:
		return httpjson.FieldError("resource-epoch", fmt.Sprintf("required: 1..%d", MaxJSONInteger))
	case !validDigest(r.RegistrationDigest):
		return httpjson.FieldError("registration-digest", "required: 64 lower-case hex digits")
	case len(r.OperationID) == 0 || len(r.OperationID) > lease.MaxOperationIDBytes || !utf8.ValidString(r.OperationID):
		return httpjson.FieldError("operation-id", fmt.Sprintf("required: 1..%d bytes of UTF-8", lease.MaxOperationIDBytes))
	}
	takesTTL, takesWait, needsOwner, needsCounter := false, false, true, false
	switch op {
	case OpAcquire:
		takesTTL, takesWait, needsOwner = true, true, false
	case OpRenew:
		takesTTL, needsCounter = true, true
	case OpRelease:
		needsCounter = true
	case OpInspect:
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
	case !needsCounter && r.Counter != 0:
		return httpjson.FieldError("counter", "not taken by "+op.String())
	case needsCounter && (r.Counter < 1 || r.Counter > fence.MaxCounter):
		return httpjson.FieldError("counter", fmt.Sprintf("required: 1..%d, the counter the acquire answered", fence.MaxCounter))
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

func validDigest(s string) bool {
	_, err := fence.ParseDigest(s)
	return err == nil
}

// registration is the request's registration, validated by decodeRequest.
func (r *SidecarRequest) registration() fence.Registration {
	d, _ := fence.ParseDigest(r.RegistrationDigest)
	return fence.Registration{Resource: r.Resource, Epoch: uint64(r.ResourceEpoch), Digest: d, State: fence.Active}
}

// SidecarResponse is the outcome of a sidecar call: HTTP 200 for every
// outcome the fenced-lease protocol reached, the fence refusals and
// INDETERMINATE included (UNAVAILABLE is a 503 error body instead). It
// never contains the resource; it contains the owner token only in
// acquire's answer.
type SidecarResponse struct {
	// Operation is acquire, inspect, renew or release.
	Operation string `json:"operation"`
	// Kind is the outcome: acquire and inspect ACQUIRED,
	// REPLAYED_SAME_OPERATION (the attempt holds it), CONTENDED,
	// OWNER_OPERATION_CONFLICT, ABSENT (inspect), FENCE_COUNTER_MISSING,
	// EPOCH_MISMATCH, REGISTRATION_CONFLICT, FENCE_REGRESSION,
	// FENCE_EXHAUSTED, INDETERMINATE, NOT_REPLICATED (acquire with a
	// replication profile: granted, acknowledged by too few replicas,
	// released; no token); renew RENEWED, LOST, INDETERMINATE; release
	// RELEASED, ALREADY_ABSENT, NOT_OWNER, INDETERMINATE.
	Kind string `json:"kind"`
	// Held is the only field a client needs before it works: true iff the
	// attempt holds the lease with validity left. Never true on a guess.
	Held bool `json:"held"`
	// OwnerToken (acquire only) is the attempt's owner token: keep it
	// secret, send it back to inspect, renew, release, or to repeat the
	// acquire after a lost reply.
	OwnerToken string `json:"owner-token,omitempty"`
	// ResourceEpoch and Counter (held) are the fencing token: send both
	// with every write to the protected resource, which rejects them once
	// a newer token has written; send Counter back to renew and release.
	ResourceEpoch int64 `json:"resource-epoch,omitempty"`
	Counter       int64 `json:"counter,omitempty"`
	// ValidityMs (held) is the validity left when the host answered, minus
	// the drift budget. Subtract your own request latency.
	ValidityMs int64 `json:"validity-ms"`
	// RetryAfterMs (CONTENDED, OWNER_OPERATION_CONFLICT on acquire) is the
	// holder's remaining TTL.
	RetryAfterMs int64 `json:"retry-after-ms"`
	// Certainty is the execution certainty of the last Redis call.
	Certainty string `json:"certainty"`
	// Attempts (acquire) is how many acquire calls were sent.
	Attempts int `json:"attempts,omitempty"`
	// Replicas (acquire, with capabilities.fenced-lease.replication) is
	// how many replicas acknowledged the grant: at least the configured
	// acks when held, fewer on NOT_REPLICATED.
	Replicas int `json:"replicas,omitempty"`
}

// Sidecar serves the fenced-lease HTTP API for services outside the
// process. It keeps no per-lease state between calls: renew, inspect and
// release rebuild the attempt and token from the request.
//
// There is deliberately no endpoint that checks a token for the protected
// resource: a check answered here and a write made there later is a
// check-then-act race (a newer holder can write in between). The protected
// resource admits tokens itself, atomically with its write — host/fence
// for Go, or the one conditional UPDATE of host/fence's Store for any
// language.
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
		return SidecarResponse{}, httpjson.NewError(http.StatusBadRequest, CodeUnknownPurpose, "the purpose is not on capabilities.fenced-lease.purposes")
	}
	var (
		a   lease.Attempt
		err error
	)
	if req.OwnerToken == "" {
		a, err = lease.NewAttempt(req.OperationID)
	} else {
		tok, _ := owner.Parse(req.OwnerToken) // validated by decodeRequest
		a, err = lease.ResumeAttempt(tok, req.OperationID)
	}
	if err != nil {
		return SidecarResponse{}, s.errorOf(err)
	}
	ctx := r.Context()
	lr := Request{Purpose: req.Purpose, Registration: req.registration(), TTL: time.Duration(req.TTLMs) * time.Millisecond,
		Wait: time.Duration(req.WaitMs) * time.Millisecond, Attempt: a}
	out := SidecarResponse{Operation: op.String()}
	switch op {
	case OpAcquire, OpInspect:
		var acq Acquisition
		if op == OpAcquire {
			acq, err = s.c.Acquire(ctx, lr)
			out.OwnerToken, out.Attempts, out.Replicas = a.Owner().Reveal(), acq.Attempts, acq.Replicas
		} else {
			lr.TTL = s.c.maxTTL // shapes only renewals of a handle, which the sidecar never makes
			acq, err = s.c.Inspect(ctx, lr)
		}
		if err != nil {
			return SidecarResponse{}, s.errorOf(err)
		}
		if acq.Kind == Unavailable {
			return SidecarResponse{}, unavailable(acq.Certainty == certainty.OverloadedBeforeSend)
		}
		out.Kind, out.Certainty, out.RetryAfterMs = acq.Kind.String(), acq.Certainty.String(), acq.RetryAfter.Milliseconds()
		if acq.Handle != nil {
			if v := acq.Handle.Remaining(); v > 0 {
				tok := acq.Handle.Token()
				out.Held, out.ValidityMs = true, v.Milliseconds()
				out.ResourceEpoch, out.Counter = int64(tok.Epoch), tok.Counter
			}
		}
	case OpRenew:
		tok := fence.Token{Epoch: uint64(req.ResourceEpoch), Counter: req.Counter}
		res, err := s.c.Renew(ctx, lr, tok)
		if err != nil {
			return SidecarResponse{}, s.errorOf(err)
		}
		if res.Kind == lease.RenewUnavailable {
			return SidecarResponse{}, unavailable(res.Overloaded)
		}
		out.Kind, out.Certainty = res.Kind.String(), res.Certainty.String()
		if res.Kind == lease.Renewed && res.Validity > 0 {
			out.Held, out.ValidityMs = true, res.Validity.Milliseconds()
			out.ResourceEpoch, out.Counter = req.ResourceEpoch, req.Counter
		}
	case OpRelease:
		tok := fence.Token{Epoch: uint64(req.ResourceEpoch), Counter: req.Counter}
		res, err := s.c.Release(ctx, lr, tok)
		if err != nil {
			return SidecarResponse{}, s.errorOf(err)
		}
		if res.Kind == lease.ReleaseUnavailable {
			return SidecarResponse{}, unavailable(res.Overloaded)
		}
		out.Kind, out.Certainty = res.Kind.String(), res.Certainty.String()
	}
	return out, nil
}

// unavailable is the answer when Redis refused or could not be reached
// before the program ran: nothing changed, repeating is safe.
func unavailable(overloaded bool) *httpjson.Error {
	msg := "Redis could not be reached before the fenced-lease program ran; nothing changed"
	if overloaded {
		msg = "the host or Redis refused the call for load before the fenced-lease program ran; nothing changed"
	}
	return &httpjson.Error{Status: http.StatusServiceUnavailable, RetryAfter: time.Second,
		Body: httpjson.ErrorBody{Code: httpjson.CodeUnavailable, Message: msg}}
}

// errorOf maps an error of the client to its answer.
func (s *Sidecar) errorOf(err error) *httpjson.Error {
	switch {
	case errors.Is(err, lease.ErrInvalidRequest):
		return httpjson.NewError(http.StatusBadRequest, httpjson.CodeBadRequest, "the fenced-lease request is out of bounds")
	case errors.Is(err, lease.ErrCorrupt):
		s.c.log.Warn("fenced: a lease or counter key holds something else")
		return httpjson.NewError(http.StatusInternalServerError, CodeCorrupt, "the lease or counter key holds something that is not a fenced lease")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return httpjson.NewError(http.StatusServiceUnavailable, httpjson.CodeUnavailable, "the request ended before the fenced lease answered")
	}
	s.c.log.Error("fenced: sidecar call failed", "error", err)
	return httpjson.NewError(http.StatusInternalServerError, "internal", "the fenced-lease call failed")
}

func redacted(tok string) string {
	if tok == "" {
		return `""`
	}
	return "***"
}

// Format prints r (every verb) without its owner token and with only the
// resource's length.
func (r SidecarRequest) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprintf(f, "fenced.SidecarRequest{Purpose:%q, Resource:(%d bytes), ResourceEpoch:%d, RegistrationDigest:(%d bytes), TTLMs:%d, WaitMs:%d, OperationID:%q, OwnerToken:%s, Counter:%d}",
		r.Purpose, len(r.Resource), r.ResourceEpoch, len(r.RegistrationDigest), r.TTLMs, r.WaitMs, r.OperationID, redacted(r.OwnerToken), r.Counter)
}

// LogValue logs r as Format prints it.
func (r SidecarRequest) LogValue() slog.Value { return slog.StringValue(fmt.Sprint(r)) }

// Format prints r (every verb) without its owner token.
func (r SidecarResponse) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprintf(f, "fenced.SidecarResponse{Operation:%s, Kind:%s, Held:%t, OwnerToken:%s, ResourceEpoch:%d, Counter:%d, ValidityMs:%d, RetryAfterMs:%d, Certainty:%s, Attempts:%d, Replicas:%d}",
		r.Operation, r.Kind, r.Held, redacted(r.OwnerToken), r.ResourceEpoch, r.Counter, r.ValidityMs, r.RetryAfterMs, r.Certainty, r.Attempts, r.Replicas)
}

// LogValue logs r as Format prints it.
func (r SidecarResponse) LogValue() slog.Value { return slog.StringValue(fmt.Sprint(r)) }
