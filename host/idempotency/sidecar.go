package idempotency

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/runtime/programs"
)

// The sidecar API's ServeMux patterns (the keys of Sidecar.Routes).
const (
	PatternClaim    = "POST /v1/idempotency/claim"
	PatternInspect  = "POST /v1/idempotency/inspect"
	PatternStart    = "POST /v1/idempotency/start"
	PatternRenew    = "POST /v1/idempotency/renew"
	PatternComplete = "POST /v1/idempotency/complete"
	PatternFail     = "POST /v1/idempotency/fail"
	PatternRelease  = "POST /v1/idempotency/release"
)

// SidecarPatterns lists the sidecar API's ServeMux patterns.
func SidecarPatterns() []string {
	return []string{PatternClaim, PatternInspect, PatternStart, PatternRenew, PatternComplete, PatternFail, PatternRelease}
}

// Sidecar body bounds.
const (
	// MaxPrincipalBytes bounds principal.
	MaxPrincipalBytes = 1024
	// MaxOperationIDBytes bounds operation-id.
	MaxOperationIDBytes = 128
	// MaxCodecIDBytes bounds codec-id.
	MaxCodecIDBytes = 64
	// FingerprintHexLen is the length of fingerprint: a lower-hex SHA-256.
	FingerprintHexLen = 64
	// SidecarCodec is the codec id of responses stored through the sidecar
	// when the request names none: opaque bytes.
	SidecarCodec = "sidecar-bytes-v1"
	// baseBodyBytes bounds every body but the response of a complete:
	// route, principal (escaped, up to six bytes each), key, fingerprint,
	// owner token, operation id, codec id and numbers.
	baseBodyBytes = 16 << 10
)

// MaxBodyBytes is the body bound of the sidecar over an executor whose
// responses are at most maxResponse bytes: 16 KiB plus the base64 form of
// the largest response.
func MaxBodyBytes(maxResponse int) int {
	return baseBodyBytes + base64.StdEncoding.EncodedLen(maxResponse)
}

// Error codes only the idempotency sidecar answers (the generic ones are
// httpjson's). Stable: clients switch on them.
const (
	// CodeUnknownRoute: the route is not on the configured allowlist.
	CodeUnknownRoute httpjson.Code = "unknown-route"
	// CodeResponseTooLarge: the response of a complete is over
	// max-response-bytes; nothing was sent (mark the attempt failed).
	CodeResponseTooLarge httpjson.Code = "response-too-large"
	// CodeCorrupt: the record key holds something that is not an
	// idempotency record.
	CodeCorrupt httpjson.Code = "idempotency-corrupt"
)

// SidecarRequest is the body of POST /v1/idempotency/<step>. Every step
// takes route, principal, key, operation-id; claim and inspect take
// fingerprint and optionally codec-id; every step but claim needs
// owner-token (claim takes it to repeat an attempt whose reply was lost);
// start, renew, complete, fail and release take attempt; complete takes
// response; fail takes disposition.
type SidecarRequest struct {
	// Route is the operation's slug (on the allowlist when one is
	// configured).
	Route string `json:"route"`
	// Principal says whom the request acts for (1..1024 bytes of UTF-8;
	// only ever digested, never echoed).
	Principal string `json:"principal"`
	// Key is the client's idempotency key (1..255 bytes of UTF-8; only
	// ever digested, never echoed).
	Key string `json:"key"`
	// Fingerprint (claim, inspect) is the lower-hex SHA-256 of what makes
	// the request this request (its method, target and body digest, by the
	// caller's fixed definition): the same key with another fingerprint is
	// FINGERPRINT_MISMATCH.
	Fingerprint string `json:"fingerprint,omitempty"`
	// CodecID (claim, inspect) names the response encoding; default
	// sidecar-bytes-v1. A response is replayed only to the same codec.
	CodecID string `json:"codec-id,omitempty"`
	// OperationID names the caller's claim operation (1..128 bytes).
	OperationID string `json:"operation-id"`
	// OwnerToken is the token a claim answered.
	OwnerToken string `json:"owner-token,omitempty"`
	// Attempt is the record's attempt number the claim answered.
	Attempt int64 `json:"attempt,omitempty"`
	// Response (complete) is the response to store, base64 (standard
	// encoding, padded), at most max-response-bytes once decoded.
	Response string `json:"response,omitempty"`
	// Disposition (fail) is "retryable" (the action provably had no
	// effect) or "abandon" (its effect is unknown).
	Disposition string `json:"disposition,omitempty"`
}

// DecodeRequest decodes and validates a sidecar body for step strictly
// (httpjson.Decode: one object; unknown, duplicate or case-variant
// members, null, trailing data, invalid UTF-8 and lone surrogates fail),
// bounds every field and refuses the fields step does not take. Failures
// are a *httpjson.Error carrying a stable Code; no message echoes a value.
func DecodeRequest(step Step, body []byte, lim Limits) (SidecarRequest, error) {
	req, _, e := decodeRequest(step, body, lim)
	if e != nil {
		return SidecarRequest{}, e
	}
	return req, nil
}

func decodeRequest(step Step, body []byte, lim Limits) (SidecarRequest, []byte, *httpjson.Error) {
	var req SidecarRequest
	if e := httpjson.Decode(body, MaxBodyBytes(lim.MaxResponseBytes), &req); e != nil {
		return SidecarRequest{}, nil, e
	}
	resp, e := req.validate(step, lim)
	if e != nil {
		return SidecarRequest{}, nil, e
	}
	return req, resp, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func (r *SidecarRequest) validate(step Step, lim Limits) ([]byte, *httpjson.Error) {
	switch {
	case !ValidRoute(r.Route):
		return nil, httpjson.FieldError("route", "required: a slug of 1..64 lower-case letters, digits and '-'")
	case len(r.Principal) == 0 || len(r.Principal) > MaxPrincipalBytes || !utf8.ValidString(r.Principal):
		return nil, httpjson.FieldError("principal", fmt.Sprintf("required: 1..%d bytes of UTF-8", MaxPrincipalBytes))
	case len(r.Key) == 0 || len(r.Key) > MaxKeyBytes || !utf8.ValidString(r.Key):
		return nil, httpjson.FieldError("key", fmt.Sprintf("required: 1..%d bytes of UTF-8", MaxKeyBytes))
	case len(r.OperationID) == 0 || len(r.OperationID) > MaxOperationIDBytes || !utf8.ValidString(r.OperationID):
		return nil, httpjson.FieldError("operation-id", fmt.Sprintf("required: 1..%d bytes of UTF-8", MaxOperationIDBytes))
	}
	takesFP, takesAttempt, needsOwner := false, true, true
	switch step {
	case StepClaim:
		takesFP, takesAttempt, needsOwner = true, false, false
	case StepInspect:
		takesFP, takesAttempt = true, false
	case StepStart, StepRenew, StepComplete, StepFail, StepRelease:
	default:
		return nil, httpjson.NewError(http.StatusNotFound, httpjson.CodeNotFound, "no such operation")
	}
	if r.OwnerToken != "" || needsOwner {
		if _, err := owner.Parse(r.OwnerToken); err != nil {
			// Never echoed: a near-miss token is still a secret.
			return nil, httpjson.FieldError("owner-token", "must be the owner token a claim answered")
		}
	}
	switch {
	case takesFP && (len(r.Fingerprint) != FingerprintHexLen || !isLowerHex(r.Fingerprint)):
		return nil, httpjson.FieldError("fingerprint", "required: the lower-hex SHA-256 (64 characters) of the request")
	case !takesFP && r.Fingerprint != "":
		return nil, httpjson.FieldError("fingerprint", "not taken by "+step.String())
	case !takesFP && r.CodecID != "":
		return nil, httpjson.FieldError("codec-id", "not taken by "+step.String())
	case len(r.CodecID) > MaxCodecIDBytes || !utf8.ValidString(r.CodecID):
		return nil, httpjson.FieldError("codec-id", fmt.Sprintf("must be 1..%d bytes of UTF-8", MaxCodecIDBytes))
	case takesAttempt && (r.Attempt < 1 || r.Attempt > 1<<53-1):
		return nil, httpjson.FieldError("attempt", "required: the attempt number the claim answered (1..2^53-1)")
	case !takesAttempt && r.Attempt != 0:
		return nil, httpjson.FieldError("attempt", "not taken by "+step.String())
	case step != StepFail && r.Disposition != "":
		return nil, httpjson.FieldError("disposition", "not taken by "+step.String())
	case step == StepFail && r.Disposition != "retryable" && r.Disposition != "abandon":
		return nil, httpjson.FieldError("disposition", `required: "retryable" or "abandon"`)
	case step != StepComplete && r.Response != "":
		return nil, httpjson.FieldError("response", "not taken by "+step.String())
	}
	if step != StepComplete {
		return nil, nil
	}
	resp, err := base64.StdEncoding.Strict().DecodeString(r.Response)
	if err != nil {
		return nil, httpjson.FieldError("response", "must be standard, padded base64")
	}
	if len(resp) > lim.MaxResponseBytes {
		return nil, httpjson.NewError(http.StatusRequestEntityTooLarge, CodeResponseTooLarge,
			fmt.Sprintf("the response is over max-response-bytes (%d); nothing was stored: mark the attempt failed", lim.MaxResponseBytes))
	}
	return resp, nil
}

// SidecarResponse is the outcome of a sidecar call: HTTP 200 for every
// outcome the protocol reached, conflicts and INDETERMINATE included
// (UNAVAILABLE is a 503 error body instead). It never contains the
// principal or the key; it contains the owner token only in claim's
// answer.
type SidecarResponse struct {
	// Operation is the step: claim, inspect, start, renew, complete, fail
	// or release.
	Operation string `json:"operation"`
	// Kind is the step's status: the program's (see docs/idempotency.md)
	// or INDETERMINATE.
	Kind string `json:"kind"`
	// Owned (claim, inspect): the attempt owns the record. After a claim:
	// start, then run the action only if start answers STARTED or
	// ALREADY_STARTED_SAME_OPERATION. Never true on a guess.
	Owned bool `json:"owned"`
	// State is the record's state when disclosed.
	State string `json:"state,omitempty"`
	// OwnerToken (claim only) is the attempt's owner token, minted by the
	// host unless the request repeated one: keep it secret, send it with
	// every later step, or to repeat the claim after a lost reply.
	OwnerToken string `json:"owner-token,omitempty"`
	// Attempt is the record's attempt number, when disclosed.
	Attempt int64 `json:"attempt,omitempty"`
	// RetryAfterMs is the holder's remaining processing lease (IN_PROGRESS)
	// or the owner's.
	RetryAfterMs int64 `json:"retry-after-ms"`
	// ValidForMs (start answering STARTED or
	// ALREADY_STARTED_SAME_OPERATION, renew answering RENEWED) is how long
	// from this answer the action may still run unless a later renew
	// extends it: the owner's lease from just before the send, less a
	// tenth of the configured lease for drift. Stop or renew before it
	// ends; count it from when the request was sent, not from when the
	// answer arrived, to stay on the safe side.
	ValidForMs *int64 `json:"valid-for-ms,omitempty"`
	// Response (COMPLETED_REPLAY) is the stored response, base64.
	Response string `json:"response,omitempty"`
	// Certainty is the execution certainty of the last Redis call.
	Certainty string `json:"certainty"`
}

// Sidecar serves the idempotency HTTP API for services outside the
// process. It keeps no state between calls: every step rebuilds the
// attempt from the owner token and operation id in the request.
type Sidecar struct {
	e *Executor
}

// NewSidecar serves e.
func NewSidecar(e *Executor) *Sidecar { return &Sidecar{e: e} }

// Routes returns the sidecar's handlers keyed by SidecarPatterns.
func (s *Sidecar) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		PatternClaim:    s.handler(StepClaim),
		PatternInspect:  s.handler(StepInspect),
		PatternStart:    s.handler(StepStart),
		PatternRenew:    s.handler(StepRenew),
		PatternComplete: s.handler(StepComplete),
		PatternFail:     s.handler(StepFail),
		PatternRelease:  s.handler(StepRelease),
	}
}

func (s *Sidecar) handler(step Step) http.Handler {
	return httpjson.Handler(func(w http.ResponseWriter, r *http.Request) (SidecarResponse, *httpjson.Error) {
		return s.serve(w, r, step)
	})
}

func (s *Sidecar) serve(w http.ResponseWriter, r *http.Request, step Step) (SidecarResponse, *httpjson.Error) {
	lim := s.e.Limits()
	body, e := httpjson.ReadBody(w, r, int64(MaxBodyBytes(lim.MaxResponseBytes)))
	if e != nil {
		return SidecarResponse{}, e
	}
	req, payload, e := decodeRequest(step, body, lim)
	if e != nil {
		return SidecarResponse{}, e
	}
	if s.e.routes != nil && !s.e.routes[req.Route] {
		return SidecarResponse{}, httpjson.NewError(http.StatusBadRequest, CodeUnknownRoute, "the route is not on capabilities.idempotency.routes")
	}
	var (
		a   owner.Attempt
		err error
	)
	if req.OwnerToken == "" {
		a, err = owner.NewAttempt(req.OperationID)
	} else {
		tok, _ := owner.Parse(req.OwnerToken) // validated by decodeRequest
		a, err = owner.ResumeAttempt(tok, req.OperationID)
	}
	if err != nil {
		return SidecarResponse{}, s.errorOf(err)
	}
	ctx := r.Context()
	scope := Scope{Route: req.Route, Principal: []byte(req.Principal), Key: req.Key}
	var res StepResult
	switch step {
	case StepClaim, StepInspect:
		var fp Fingerprint
		_, _ = hex.Decode(fp[:], []byte(req.Fingerprint)) // validated by decodeRequest
		codec := req.CodecID
		if codec == "" {
			codec = SidecarCodec
		}
		rq := Request{Scope: scope, Fingerprint: fp, Attempt: a, CodecID: codec}
		if step == StepClaim {
			res, err = s.e.Claim(ctx, rq)
		} else {
			res, err = s.e.Inspect(ctx, rq)
		}
	case StepStart:
		res, err = s.e.Start(ctx, scope, a, req.Attempt)
	case StepRenew:
		res, err = s.e.Renew(ctx, scope, a, req.Attempt)
	case StepComplete:
		res, err = s.e.Complete(ctx, scope, a, req.Attempt, payload)
	case StepFail:
		res, err = s.e.Fail(ctx, scope, a, req.Attempt, req.Disposition == "retryable")
	case StepRelease:
		res, err = s.e.Release(ctx, scope, a, req.Attempt)
	}
	if err != nil {
		return SidecarResponse{}, s.errorOf(err)
	}
	if res.Status == StatusUnavailable {
		return SidecarResponse{}, unavailable(res.Overloaded)
	}
	out := SidecarResponse{Operation: step.String(), Kind: res.Status, Owned: res.Owned, State: res.State,
		Attempt: res.Attempt, RetryAfterMs: res.RetryAfter.Milliseconds(), Certainty: res.Certainty.String()}
	if !res.ValidUntil.IsZero() {
		ms := max(res.ValidUntil.Sub(s.e.now()), 0).Milliseconds()
		out.ValidForMs = &ms
	}
	if step == StepClaim {
		out.OwnerToken = a.Owner().Reveal()
	}
	if res.Response != nil {
		out.Response = base64.StdEncoding.EncodeToString(res.Response)
	}
	return out, nil
}

// unavailable is the answer when Redis refused or could not be reached
// before the program ran: nothing changed, repeating is safe.
func unavailable(overloaded bool) *httpjson.Error {
	msg := "Redis could not be reached before the idempotency program ran; nothing changed"
	if overloaded {
		msg = "the host or Redis refused the call for load before the idempotency program ran; nothing changed"
	}
	return &httpjson.Error{Status: http.StatusServiceUnavailable, RetryAfter: time.Second,
		Body: httpjson.ErrorBody{Code: httpjson.CodeUnavailable, Message: msg}}
}

// errorOf maps an error of the executor to its answer.
func (s *Sidecar) errorOf(err error) *httpjson.Error {
	switch {
	case errors.Is(err, ErrUnknownRoute):
		return httpjson.NewError(http.StatusBadRequest, CodeUnknownRoute, "the route is not on capabilities.idempotency.routes")
	case errors.Is(err, ErrInvalidRequest):
		return httpjson.NewError(http.StatusBadRequest, httpjson.CodeBadRequest, "the idempotency request is out of bounds")
	case errors.Is(err, programs.ErrResponseTooLarge):
		return httpjson.NewError(http.StatusRequestEntityTooLarge, CodeResponseTooLarge, "the response is over max-response-bytes; nothing was stored")
	case errors.Is(err, ErrCorruptResponse):
		return httpjson.NewError(http.StatusInternalServerError, CodeStoredCorrupt, "the stored response does not match its digest; it is not replayed")
	case errors.Is(err, ErrCorrupt):
		s.e.log.Warn("idempotency: a record key holds no idempotency record")
		return httpjson.NewError(http.StatusInternalServerError, CodeCorrupt, "the record key holds something that is not an idempotency record")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return httpjson.NewError(http.StatusServiceUnavailable, httpjson.CodeUnavailable, "the request ended before the idempotency store answered")
	}
	s.e.log.Error("idempotency: sidecar call failed", "error", err)
	return httpjson.NewError(http.StatusInternalServerError, "internal", "the idempotency call failed")
}

// redacted stands for an owner token in printed requests and answers.
func redacted(tok string) string {
	if tok == "" {
		return `""`
	}
	return "***"
}

// Format prints r (every verb) without its owner token and with only the
// lengths of the principal, the key and the response, so a request that
// reaches a log or an error carries neither the secret nor caller data.
func (r SidecarRequest) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprintf(f, "idempotency.SidecarRequest{Route:%q, Principal:(%d bytes), Key:(%d bytes), Fingerprint:%q, CodecID:%q, OperationID:%q, OwnerToken:%s, Attempt:%d, Response:(%d bytes), Disposition:%q}",
		r.Route, len(r.Principal), len(r.Key), r.Fingerprint, r.CodecID, r.OperationID, redacted(r.OwnerToken), r.Attempt, len(r.Response), r.Disposition)
}

// LogValue logs r as Format prints it (slog's JSON handler would otherwise
// marshal the token).
func (r SidecarRequest) LogValue() slog.Value { return slog.StringValue(fmt.Sprint(r)) }

// Format prints r (every verb) without its owner token and with only the
// response's length; only the JSON answer to claim carries the token.
func (r SidecarResponse) Format(f fmt.State, _ rune) {
	valid := "-"
	if r.ValidForMs != nil {
		valid = strconv.FormatInt(*r.ValidForMs, 10)
	}
	_, _ = fmt.Fprintf(f, "idempotency.SidecarResponse{Operation:%s, Kind:%s, Owned:%t, State:%s, OwnerToken:%s, Attempt:%d, RetryAfterMs:%d, ValidForMs:%s, Response:(%d bytes), Certainty:%s}",
		r.Operation, r.Kind, r.Owned, r.State, redacted(r.OwnerToken), r.Attempt, r.RetryAfterMs, valid, len(r.Response), r.Certainty)
}

// LogValue logs r as Format prints it.
func (r SidecarResponse) LogValue() slog.Value { return slog.StringValue(fmt.Sprint(r)) }
