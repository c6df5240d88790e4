package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/runtime/keys"
)

// Error codes of the middleware's answers (application/json bodies with
// the host's error shape).
const (
	CodeKeyMissing          httpjson.Code = "idempotency-key-missing"
	CodeKeyMalformed        httpjson.Code = "idempotency-key-malformed"
	CodeInProgress          httpjson.Code = "idempotency-in-progress"
	CodeFingerprintMismatch httpjson.Code = "idempotency-key-reused"
	CodeRecoveryRequired    httpjson.Code = "idempotency-recovery-required"
	CodePolicyMismatch      httpjson.Code = "idempotency-policy-mismatch"
	CodeStoreUnavailable    httpjson.Code = "idempotency-store-unavailable"
	CodeStoredCorrupt       httpjson.Code = "idempotency-stored-response-corrupt"
)

// HeaderReplayed marks a replayed response.
const HeaderReplayed = "Caphost-Idempotent-Replayed"

// DefaultMaxBodyBytes bounds the request body the middleware reads for
// the fingerprint (and hands on to the handler).
const DefaultMaxBodyBytes = 1 << 20

// MiddlewareConfig configures one route's middleware.
type MiddlewareConfig struct {
	// Route names the operation: a key region slug ("create-payment").
	Route string
	// Optional lets requests without an Idempotency-Key through without
	// idempotency; by default a missing key is 400.
	Optional bool
	// Principal says whom the request acts for (the authenticated caller);
	// an error is answered 403 and nothing runs. Without it every caller
	// shares one key space — only for single-tenant services.
	Principal func(*http.Request) ([]byte, error)
	// MaxBodyBytes bounds the request body (default DefaultMaxBodyBytes);
	// over it the answer is 413.
	MaxBodyBytes int64
	// ReplayHeaders are the response headers stored and replayed (default
	// DefaultReplayHeaders; Set-Cookie is never one of them).
	ReplayHeaders []string
}

// noEffectKey carries a handler's "no effect" mark.
type noEffectKey struct{}

// MarkNoEffect tells the middleware that the handler's request had no
// effect (it was refused before any change, or its transaction rolled
// back): the record becomes FAILED_RETRYABLE and a retry with the same
// key runs the handler again instead of replaying this response.
func MarkNoEffect(ctx context.Context) {
	if f, ok := ctx.Value(noEffectKey{}).(*atomic.Bool); ok {
		f.Store(true)
	}
}

// Middleware makes next idempotent per the IETF Idempotency-Key draft: a
// request with a key runs next at most once per (principal, route, key);
// a retry of a completed request gets the stored status, allowlisted
// headers and body back (with HeaderReplayed); 400 when a required key is
// missing or malformed, 409 while the original is in progress (with
// Retry-After) or its effect is unknown, 422 when the key is reused with
// another request, 503 when the store cannot be reached. next's response
// reaches the client as it writes it; a response larger than the
// executor's bound is delivered but not stored, and the record fails
// closed (ABANDONED: retries get 409 until reconciled). A panic in next
// fails closed the same way and is re-raised.
func (e *Executor) Middleware(cfg MiddlewareConfig, next http.Handler) (http.Handler, error) {
	if next == nil {
		return nil, fmt.Errorf("%w: Middleware needs a handler", ErrInvalidRequest)
	}
	if _, err := e.keys.Build(keys.Spec{Capability: keys.CapIdem, Region: cfg.Route, KeyVersion: keyVersion, Kind: "record",
		Parts: [][]byte{[]byte("check")}}); err != nil {
		return nil, fmt.Errorf("%w: route must be a slug of 1..64 lower-case letters, digits and '-'", ErrInvalidRequest)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("%w: negative body bound", ErrInvalidRequest)
	}
	if cfg.ReplayHeaders == nil {
		cfg.ReplayHeaders = DefaultReplayHeaders()
	}
	if cfg.Principal == nil {
		cfg.Principal = func(*http.Request) ([]byte, error) { return []byte("*"), nil }
	}
	return &middleware{e: e, cfg: cfg, next: next}, nil
}

type middleware struct {
	e    *Executor
	cfg  MiddlewareConfig
	next http.Handler
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, err := ParseKey(r.Header)
	switch {
	case errors.Is(err, ErrMissingKey) && m.cfg.Optional:
		m.next.ServeHTTP(w, r)
		return
	case errors.Is(err, ErrMissingKey):
		httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, CodeKeyMissing, "this endpoint requires an Idempotency-Key header"))
		return
	case err != nil:
		httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, CodeKeyMalformed,
			"Idempotency-Key must be one quoted Structured Field string of 1..255 characters"))
		return
	}
	principal, err := m.cfg.Principal(r)
	if err != nil || len(principal) == 0 {
		httpjson.WriteError(w, httpjson.NewError(http.StatusForbidden, "forbidden", "the request names no principal"))
		return
	}
	if r.ContentLength > m.cfg.MaxBodyBytes {
		httpjson.WriteError(w, httpjson.NewError(http.StatusRequestEntityTooLarge, httpjson.CodeTooLarge, "the body is too large"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.cfg.MaxBodyBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			httpjson.WriteError(w, httpjson.NewError(http.StatusRequestEntityTooLarge, httpjson.CodeTooLarge, "the body is too large"))
			return
		}
		httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, httpjson.CodeBadRequest, "the body could not be read"))
		return
	}
	attempt, err := owner.NewAttempt("http")
	if err != nil {
		httpjson.WriteError(w, httpjson.NewError(http.StatusInternalServerError, "internal", "no attempt"))
		return
	}
	req := Request{Scope: Scope{Route: m.cfg.Route, Principal: principal, Key: key}, Attempt: attempt,
		Fingerprint: FingerprintOf(r.Method, r.URL.EscapedPath(), r.URL.RawQuery, body)}
	var (
		rec      *recorder
		panicked any
	)
	ex, err := m.e.Execute(r.Context(), req, func(ctx context.Context) Result {
		var noEffect atomic.Bool
		rr := r.Clone(context.WithValue(ctx, noEffectKey{}, &noEffect))
		rr.Body = io.NopCloser(bytes.NewReader(body))
		rr.ContentLength = int64(len(body))
		rec = newRecorder(w, m.cfg.ReplayHeaders, m.e.cfg.MaxResponseBytes)
		defer func() {
			if p := recover(); p != nil {
				panicked = p
				panic(p) // the executor records an unknown effect
			}
		}()
		m.next.ServeHTTP(rec, rr)
		if noEffect.Load() {
			return RetryableNoEffect(nil)
		}
		resp, ok := rec.response()
		if !ok {
			return EffectUnknown(errors.New("idempotency: the response is larger than the storable bound"))
		}
		enc, err := resp.Encode()
		if err != nil {
			return EffectUnknown(err)
		}
		return Committed(enc)
	})
	if panicked != nil {
		panic(panicked)
	}
	if err != nil {
		switch {
		case rec != nil:
		case errors.Is(err, ErrCorruptResponse):
			httpjson.WriteError(w, httpjson.NewError(http.StatusInternalServerError, CodeStoredCorrupt, "the stored response failed its checks"))
		default:
			httpjson.WriteError(w, httpjson.NewError(http.StatusServiceUnavailable, CodeStoreUnavailable, "the idempotency store refused the request"))
		}
		return
	}
	m.answer(w, ex, rec != nil && rec.status != 0)
}

// answer writes what the execution came to, unless the handler already
// wrote its own response.
func (m *middleware) answer(w http.ResponseWriter, ex Execution, written bool) {
	retry := func(d time.Duration) time.Duration { return max(d, time.Second) }
	switch ex.Kind {
	case Executed, FailedRetryable:
		return // the handler's response went out as it wrote it
	case Abandoned:
		if !written {
			httpjson.WriteError(w, httpjson.NewError(http.StatusInternalServerError, CodeRecoveryRequired,
				"the request's outcome is unknown; it will not be run again"))
		}
	case Replayed:
		resp, err := DecodeResponse(ex.Response, m.e.cfg.MaxResponseBytes)
		if err != nil {
			httpjson.WriteError(w, httpjson.NewError(http.StatusInternalServerError, CodeStoredCorrupt, "the stored response failed its checks"))
			return
		}
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.Header().Set(HeaderReplayed, "true")
		w.Header().Set("Content-Length", strconv.Itoa(len(resp.Body)))
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
	case InProgress:
		e := httpjson.NewError(http.StatusConflict, CodeInProgress, "a request with this key is in progress")
		e.RetryAfter = retry(ex.RetryAfter)
		httpjson.WriteError(w, e)
	case FingerprintMismatch:
		httpjson.WriteError(w, httpjson.NewError(http.StatusUnprocessableEntity, CodeFingerprintMismatch,
			"this Idempotency-Key was used for a different request"))
	case RecoveryRequired:
		httpjson.WriteError(w, httpjson.NewError(http.StatusConflict, CodeRecoveryRequired,
			"an earlier request with this key has an unknown outcome; it needs reconciliation"))
	case PolicyMismatch:
		httpjson.WriteError(w, httpjson.NewError(http.StatusConflict, CodePolicyMismatch,
			"the stored response belongs to another policy revision"))
	case Unavailable, Indeterminate:
		e := httpjson.NewError(http.StatusServiceUnavailable, CodeStoreUnavailable, "the idempotency store cannot be reached; retry with the same key")
		e.RetryAfter = time.Second
		httpjson.WriteError(w, e)
	default: // Conflict: an attempt minted here cannot conflict with itself
		httpjson.WriteError(w, httpjson.NewError(http.StatusInternalServerError, "internal", "idempotency conflict"))
	}
}
