package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/trust"
	"github.com/caphost/caphost/policy"
)

// GuestView is the JSON form of a guest slot's status.
type GuestView struct {
	Name       string `json:"name"`
	Generation uint64 `json:"generation"`
	SHA256     string `json:"sha256"`
	// Flavour is "native" or "extism".
	Flavour  string   `json:"flavour,omitempty"`
	Kinds    []string `json:"kinds"`
	Declared []string `json:"declared"`
	// PreviousGeneration is what POST .../rollback restores (absent: none),
	// PreviousSHA256 its module's digest.
	PreviousGeneration uint64 `json:"previous-generation,omitempty"`
	PreviousSHA256     string `json:"previous-sha256,omitempty"`
	// LastSwapAt is RFC 3339 (UTC); absent before the first swap.
	LastSwapAt    string `json:"last-swap-at,omitempty"`
	LastSwapOK    bool   `json:"last-swap-ok"`
	LastSwapError string `json:"last-swap-error,omitempty"`
}

// CapabilityList is the body of GET /admin/capabilities: the shape
// `caphost capabilities --json` prints.
type CapabilityList struct {
	Capabilities []capability.Status `json:"capabilities"`
	GuestKinds   []host.GuestKind    `json:"guest-kinds"`
}

// GuestList is the body of GET /admin/guests.
type GuestList struct {
	Guests []GuestView `json:"guests"`
}

func viewOf(s host.GuestStatus) GuestView {
	v := GuestView{
		Name: s.Name, Generation: s.Generation, SHA256: s.SHA256, Flavour: s.Flavour,
		Kinds: nonNil(s.Kinds), Declared: nonNil(s.Declared),
		PreviousGeneration: s.PreviousGeneration, PreviousSHA256: s.PreviousSHA256,
		LastSwapOK: s.LastSwapOK, LastSwapError: httpjson.Sanitize(s.LastSwapError, 512),
	}
	if !s.LastSwapAt.IsZero() {
		v.LastSwapAt = s.LastSwapAt.UTC().Format(time.RFC3339Nano)
	}
	return v
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Upload bounds of PUT /admin/guests/{name}.
const (
	// DefaultUploadTimeout bounds reading one module body (Options.UploadTimeout):
	// 64 MiB at about 0.5 MiB/s.
	DefaultUploadTimeout = 2 * time.Minute
	// MaxConcurrentUploads bounds the bodies being read at once (each up to
	// MaxGuestBytes of memory); a further upload is answered 409 swap-busy.
	MaxConcurrentUploads = 4
)

// CodeUploadTimeout: the module body was not received within the upload
// timeout (408); CodeNoPrevious: a rollback with no previous generation
// kept (409).
const (
	CodeUploadTimeout httpjson.Code = "upload-timeout"
	CodeNoPrevious    httpjson.Code = "no-previous-generation"
)

type admin struct {
	b     Backend
	log   *slog.Logger
	token [sha256.Size]byte
	// uploads bounds the bodies being read; reading never holds swapping,
	// so a slow upload delays only itself.
	uploads       chan struct{}
	uploadTimeout time.Duration
	// swapping admits one swap or rollback at a time, once its body is
	// read: compiling and checking a module is expensive, so concurrent
	// swaps are refused, not queued.
	swapping chan struct{}
}

func newAdmin(b Backend, opts Options, log *slog.Logger) *admin {
	timeout := opts.UploadTimeout
	if timeout <= 0 {
		timeout = DefaultUploadTimeout
	}
	// Only the digest is kept: comparing fixed-size digests in constant
	// time hides the token's length as well as its content.
	return &admin{b: b, log: log, token: sha256.Sum256(opts.AdminToken.Reveal()),
		uploads: make(chan struct{}, MaxConcurrentUploads), uploadTimeout: timeout, swapping: make(chan struct{}, 1)}
}

// auth requires `Authorization: Bearer <token>`.
func (a *admin) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], a.token[:]) != 1 {
			httpjson.WriteError(w, httpjson.NewError(http.StatusUnauthorized, CodeUnauthorized, "a valid admin bearer token is required"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// capabilities answers GET /admin/capabilities: every capability's actual
// state (one readiness check, bounded by the request's context).
func (a *admin) capabilities(w http.ResponseWriter, r *http.Request) {
	httpjson.WriteJSON(w, http.StatusOK, CapabilityList{Capabilities: a.b.Capabilities(r.Context()), GuestKinds: a.b.GuestKinds()})
}

func (a *admin) list(w http.ResponseWriter, _ *http.Request) {
	gs := a.b.Guests()
	out := GuestList{Guests: make([]GuestView, 0, len(gs))}
	for _, g := range gs {
		out.Guests = append(out.Guests, viewOf(g))
	}
	httpjson.WriteJSON(w, http.StatusOK, out)
}

// guestName validates the {name} of a guest path and that it is
// configured.
func (a *admin) guestName(r *http.Request) (string, *httpjson.Error) {
	name := r.PathValue("name")
	if !policy.ValidSlug(name) {
		return "", httpjson.FieldError("name", "a guest name is a slug")
	}
	for _, g := range a.b.Guests() {
		if g.Name == name {
			return name, nil
		}
	}
	return "", httpjson.NewError(http.StatusNotFound, CodeUnknownGuest, "no configured guest has that name")
}

// takeSlot admits one swap or rollback at a time; release must be called.
func (a *admin) takeSlot() (release func(), e *httpjson.Error) {
	select {
	case a.swapping <- struct{}{}:
		return func() { <-a.swapping }, nil
	default:
		e := httpjson.NewError(http.StatusConflict, CodeSwapBusy, "another swap is in progress")
		e.RetryAfter = time.Second
		return nil, e
	}
}

// readModule reads and bounds a module body under its own deadline
// (uploadTimeout from now, set on the connection: the server's read
// timeout, if any, is sized for every request, and an embedder's server
// may have none). On a ResponseWriter that is no connection (tests) the
// deadline cannot be set and the server's own bounds apply.
func (a *admin) readModule(w http.ResponseWriter, r *http.Request) ([]byte, *httpjson.Error) {
	tooLarge := httpjson.NewError(http.StatusRequestEntityTooLarge, httpjson.CodeTooLarge, fmt.Sprintf("module exceeds %d MiB", MaxGuestBytes>>20))
	if r.ContentLength > MaxGuestBytes {
		return nil, tooLarge
	}
	select {
	case a.uploads <- struct{}{}:
		defer func() { <-a.uploads }()
	default:
		e := httpjson.NewError(http.StatusConflict, CodeSwapBusy, fmt.Sprintf("%d uploads are in progress", MaxConcurrentUploads))
		e.RetryAfter = time.Second
		return nil, e
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(a.uploadTimeout)) == nil {
		// The body is consumed below; later requests on the connection get
		// the server's own deadlines again.
		defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(min(r.ContentLength, MaxGuestBytes), 0)))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxGuestBytes))
	if err != nil {
		var mb *http.MaxBytesError
		switch {
		case errors.As(err, &mb):
			return nil, tooLarge
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, httpjson.NewError(http.StatusRequestTimeout, CodeUploadTimeout,
				fmt.Sprintf("the module was not received within %s", a.uploadTimeout))
		}
		return nil, httpjson.NewError(http.StatusBadRequest, httpjson.CodeBadRequest, "the body could not be read")
	}
	if buf.Len() == 0 {
		return nil, httpjson.FieldError("body", "the body must be a wasm module")
	}
	return buf.Bytes(), nil
}

// swap answers PUT /admin/guests/{name}: the body is read and bounded
// first, and only then is the swap slot taken, so a slow upload holds no
// slot while it trickles in.
func (a *admin) swap(w http.ResponseWriter, r *http.Request) {
	name, e := a.guestName(r)
	if e != nil {
		httpjson.WriteError(w, e)
		return
	}
	sig, e := signatureOf(r.Header.Values(SignatureHeader))
	if e != nil {
		httpjson.WriteError(w, e)
		return
	}
	wasm, e := a.readModule(w, r)
	if e != nil {
		httpjson.WriteError(w, e)
		return
	}
	release, e := a.takeSlot()
	if e != nil {
		httpjson.WriteError(w, e)
		return
	}
	defer release()
	st, err := a.b.SwapGuest(r.Context(), name, wasm, sig)
	if err != nil {
		e := swapError(err)
		a.log.Warn("guest swap refused", "guest", name, "code", string(e.Body.Code), "detail", e.Body.Detail)
		httpjson.WriteError(w, e)
		return
	}
	a.log.Info("guest swapped", "guest", name, "generation", st.Generation, "sha256", st.SHA256, "flavour", st.Flavour)
	httpjson.WriteJSON(w, http.StatusOK, viewOf(st))
}

// rollback answers POST /admin/guests/{name}/rollback: the previous
// verified generation serves again (no body).
func (a *admin) rollback(w http.ResponseWriter, r *http.Request) {
	name, e := a.guestName(r)
	if e != nil {
		httpjson.WriteError(w, e)
		return
	}
	release, e := a.takeSlot()
	if e != nil {
		httpjson.WriteError(w, e)
		return
	}
	defer release()
	st, err := a.b.RollbackGuest(r.Context(), name)
	if err != nil {
		e := swapError(err)
		if errors.Is(err, plugins.ErrNoPrevious) {
			e = httpjson.NewError(http.StatusConflict, CodeNoPrevious, "no previous generation is kept for this guest")
		}
		a.log.Warn("guest rollback refused", "guest", name, "code", string(e.Body.Code), "detail", e.Body.Detail)
		httpjson.WriteError(w, e)
		return
	}
	a.log.Info("guest rolled back", "guest", name, "generation", st.Generation, "sha256", st.SHA256, "flavour", st.Flavour)
	httpjson.WriteJSON(w, http.StatusOK, viewOf(st))
}

// signatureOf decodes the optional signature header: base64 of the .sig
// JSON, at most trust.MaxSignatureFileBytes once decoded. The document
// itself is parsed and verified by the host.
func signatureOf(vals []string) ([]byte, *httpjson.Error) {
	switch len(vals) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, httpjson.FieldError(SignatureHeader, "at most one signature")
	}
	v := strings.TrimSpace(vals[0])
	if base64.StdEncoding.DecodedLen(len(v)) > trust.MaxSignatureFileBytes+3 {
		return nil, httpjson.FieldError(SignatureHeader, fmt.Sprintf("the signature document exceeds %d bytes", trust.MaxSignatureFileBytes))
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(v); err == nil {
			if len(b) == 0 || len(b) > trust.MaxSignatureFileBytes {
				break
			}
			return b, nil
		}
	}
	return nil, httpjson.FieldError(SignatureHeader, "must be the base64 of the .sig document")
}

// swapError classifies a swap failure. The detail is the error text,
// bounded and sanitised: swap errors name stages, classes and policy ids,
// never secrets (the module bytes are the operator's own).
func swapError(err error) *httpjson.Error {
	untrusted := "the module's signature was rejected; the previous generation keeps serving"
	rejected := "the module was rejected; the previous generation keeps serving"
	var e *httpjson.Error
	var te *trust.Error
	var ge *plugins.GuestError
	switch {
	case errors.Is(err, plugins.ErrUnknownModule), errors.Is(err, host.ErrNoGuests):
		return httpjson.NewError(http.StatusNotFound, CodeUnknownGuest, "no configured guest has that name")
	case errors.Is(err, plugins.ErrManagerClosed):
		return httpjson.NewError(http.StatusServiceUnavailable, httpjson.CodeUnavailable, "the host is shutting down")
	case errors.Is(err, host.ErrSwapUnauthorized), errors.As(err, &te):
		e = httpjson.NewError(http.StatusUnprocessableEntity, CodeGuestUntrusted, untrusted)
	case errors.Is(err, host.ErrGuestPolicies), errors.Is(err, host.ErrGuestKindChange),
		errors.Is(err, plugins.ErrSelfTest), errors.Is(err, plugins.ErrConformance),
		errors.Is(err, plugins.ErrDuplicateID), errors.As(err, &ge):
		e = httpjson.NewError(http.StatusUnprocessableEntity, CodeGuestInvalid, rejected)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return httpjson.NewError(http.StatusServiceUnavailable, httpjson.CodeUnavailable, "the swap was interrupted; the previous generation keeps serving")
	default:
		e = httpjson.NewError(http.StatusUnprocessableEntity, CodeSwapFailed, rejected)
	}
	e.Body.Detail = httpjson.Sanitize(err.Error(), 512)
	return e
}
