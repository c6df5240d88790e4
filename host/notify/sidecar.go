package notify

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/runtime/certainty"
)

// The sidecar API's ServeMux patterns (the keys of Sidecar.Routes).
const (
	PatternSubmit = "POST /v1/notify"
	PatternGet    = "GET /v1/notify/{id}"
)

// SidecarPatterns lists the sidecar API's ServeMux patterns.
func SidecarPatterns() []string { return []string{PatternSubmit, PatternGet} }

// MaxBodyBytes bounds a POST /v1/notify body.
const MaxBodyBytes = 64 << 10

// MaxParams bounds the parameters of one request.
const MaxParams = 64

// Error codes only the notify sidecar answers (the generic ones are
// httpjson's). Stable: clients switch on them.
const (
	// CodeKeyReused: the idempotency key was used for another request;
	// the body's id is the first intent's, which stands.
	CodeKeyReused httpjson.Code = "idempotency-key-reused"
	// CodeIndeterminate: the submit's reply was lost; the body's id is
	// the intent's: repeat with the same key to resolve it.
	CodeIndeterminate httpjson.Code = "indeterminate"
	// CodeUnknownRoute: the channel has no such route in this host.
	CodeUnknownRoute httpjson.Code = "unknown-route"
	// CodeBestEffortRefused: the route is durable only.
	CodeBestEffortRefused httpjson.Code = "best-effort-refused"
	// CodeRenderFailed: the request could not be rendered (unknown
	// template, version, locale or channel, bad parameters, a failing
	// renderer); the message names the rule, never a value.
	CodeRenderFailed httpjson.Code = "render-failed"
)

// Delivery modes of a request.
const (
	ModeDurable    = "durable"
	ModeBestEffort = "best-effort"
)

// SubmitBody is the body of POST /v1/notify.
type SubmitBody struct {
	// IdempotencyKey (durable: required) names the intent, 1..256 bytes.
	IdempotencyKey string `json:"idempotency-key,omitempty"`
	Channel        string `json:"channel"`
	// Route is the channel's route (default "default").
	Route     string `json:"route,omitempty"`
	Recipient string `json:"recipient"`
	Template  string `json:"template"`
	Version   uint32 `json:"version"`
	Locale    string `json:"locale"`
	// Params are the template's typed parameters as text, by name.
	Params map[string]string `json:"params,omitempty"`
	// Mode is durable (default) or best-effort (where the route allows).
	Mode string `json:"mode,omitempty"`
}

// SubmitResponse answers a durable submit: 202 for a new intent, 200 for
// a repeat (duplicate), 409 for the key reused with another request, 503
// when the reply was lost (certainty INDETERMINATE: repeat with the same
// key). It never contains the recipient or content.
type SubmitResponse struct {
	Mode      string `json:"mode"`
	ID        string `json:"id,omitempty"`
	Duplicate bool   `json:"duplicate"`
	State     string `json:"state,omitempty"`
	Locale    string `json:"locale,omitempty"`
	Certainty string `json:"certainty"`
	// Code and Message are set on 409 and 503, as in an error body.
	Code    httpjson.Code `json:"code,omitempty"`
	Message string        `json:"message,omitempty"`
}

// BestEffortResponse answers a best-effort send: always 200 once it was
// rendered — a transport failure is an outcome, not an error (fail-open).
type BestEffortResponse struct {
	Mode      string `json:"mode"`
	Outcome   string `json:"outcome"`
	Transport string `json:"transport"`
	Code      string `json:"code,omitempty"`
	Attempts  int    `json:"attempts"`
	Locale    string `json:"locale"`
}

// StatusResponse answers GET /v1/notify/{id}.
type StatusResponse struct {
	ID          string        `json:"id"`
	State       string        `json:"state"`
	Attempts    int           `json:"attempts"`
	Receipts    []ReceiptJSON `json:"receipts"`
	RetentionMs int64         `json:"retention-ms"`
}

// ReceiptJSON is one stored receipt (no content, no address).
type ReceiptJSON struct {
	Attempt     int       `json:"attempt"`
	Transport   string    `json:"transport"`
	Outcome     string    `json:"outcome"`
	Code        string    `json:"code,omitempty"`
	ProviderRef string    `json:"provider-ref,omitempty"`
	At          time.Time `json:"at"`
}

// Sidecar serves the notify HTTP API for services outside the process.
type Sidecar struct {
	n   *Notifier
	log *slog.Logger
}

// NewSidecar serves n.
func NewSidecar(n *Notifier, log *slog.Logger) *Sidecar {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sidecar{n: n, log: log}
}

// Routes returns the sidecar's handlers keyed by SidecarPatterns.
func (s *Sidecar) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		PatternSubmit: http.HandlerFunc(s.submit),
		PatternGet:    httpjson.Handler(s.get),
	}
}

// DecodeSubmit decodes and validates a POST /v1/notify body strictly
// (httpjson.Decode: unknown, duplicate or case-variant members, null,
// trailing data, invalid UTF-8 fail) and bounds every field. Failures are
// a *httpjson.Error; no message echoes a value.
func DecodeSubmit(body []byte) (Request, string, error) {
	r, mode, e := decodeSubmit(body)
	if e != nil {
		return Request{}, "", e
	}
	return r, mode, nil
}

func decodeSubmit(body []byte) (Request, string, *httpjson.Error) {
	var b SubmitBody
	if e := httpjson.Decode(body, MaxBodyBytes, &b); e != nil {
		return Request{}, "", e
	}
	mode := b.Mode
	switch mode {
	case "":
		mode = ModeDurable
	case ModeDurable, ModeBestEffort:
	default:
		return Request{}, "", httpjson.FieldError("mode", "must be durable or best-effort")
	}
	switch {
	case mode == ModeDurable && (len(b.IdempotencyKey) == 0 || len(b.IdempotencyKey) > intent.MaxIdempotencyKeyBytes):
		return Request{}, "", httpjson.FieldError("idempotency-key", "required for a durable notification: 1..256 bytes")
	case mode == ModeBestEffort && b.IdempotencyKey != "":
		return Request{}, "", httpjson.FieldError("idempotency-key", "not taken by a best-effort send (nothing is stored)")
	case !render.Channel(b.Channel).Valid():
		return Request{}, "", httpjson.FieldError("channel", "required: email, text, slack or csv")
	case b.Route != "" && !validRouteName(b.Route):
		return Request{}, "", httpjson.FieldError("route", "a route name is 1..64 bytes of [a-z0-9-]")
	case b.Recipient == "" || len(b.Recipient) > transport.MaxRecipientBytes:
		return Request{}, "", httpjson.FieldError("recipient", "required: 1..512 bytes")
	case b.Template == "" || len(b.Template) > 64:
		return Request{}, "", httpjson.FieldError("template", "required: a template id")
	case b.Version == 0:
		return Request{}, "", httpjson.FieldError("version", "required: the template version (1 or more)")
	case !render.ValidLocale(b.Locale):
		return Request{}, "", httpjson.FieldError("locale", "required: a language tag (en, de-AT)")
	case len(b.Params) > MaxParams:
		return Request{}, "", httpjson.FieldError("params", "at most 64 parameters")
	}
	req := Request{IdempotencyKey: b.IdempotencyKey, Channel: render.Channel(b.Channel), Route: b.Route,
		Recipient: b.Recipient, Template: b.Template, Version: b.Version, Locale: b.Locale}
	for name, v := range b.Params {
		req.Params = append(req.Params, render.Param{Name: name, Value: v})
	}
	slices.SortFunc(req.Params, func(a, b render.Param) int { return strings.Compare(a.Name, b.Name) })
	return req, mode, nil
}

func (s *Sidecar) submit(w http.ResponseWriter, r *http.Request) {
	body, e := httpjson.ReadBody(w, r, MaxBodyBytes)
	if e != nil {
		httpjson.WriteError(w, e)
		return
	}
	req, mode, e := decodeSubmit(body)
	if e != nil {
		httpjson.WriteError(w, e)
		return
	}
	if mode == ModeBestEffort {
		res, err := s.n.SendBestEffort(r.Context(), req)
		if err != nil {
			httpjson.WriteError(w, s.errorOf(err))
			return
		}
		httpjson.WriteJSON(w, http.StatusOK, BestEffortResponse{Mode: ModeBestEffort, Outcome: res.Outcome.String(),
			Transport: res.Transport, Code: res.Code, Attempts: res.Attempts, Locale: res.Locale})
		return
	}
	sub, err := s.n.Submit(r.Context(), req)
	out := SubmitResponse{Mode: ModeDurable, ID: string(sub.ID), Duplicate: sub.Duplicate, Locale: sub.Locale,
		Certainty: sub.Certainty.String()}
	if sub.State != 0 {
		out.State = sub.State.String()
	}
	switch {
	case err != nil && sub.Certainty == certainty.Indeterminate && sub.ID != "":
		out.Code, out.Message = CodeIndeterminate, "the submit's reply was lost: repeat it with the same idempotency key"
		w.Header().Set("Retry-After", "1")
		httpjson.WriteJSON(w, http.StatusServiceUnavailable, out)
	case err != nil:
		httpjson.WriteError(w, s.errorOf(err))
	case sub.OtherPlan:
		out.Code, out.Message = CodeKeyReused, "the idempotency key was used for another request; the first intent stands"
		httpjson.WriteJSON(w, http.StatusConflict, out)
	case sub.Duplicate:
		httpjson.WriteJSON(w, http.StatusOK, out)
	default:
		httpjson.WriteJSON(w, http.StatusAccepted, out)
	}
}

func (s *Sidecar) get(_ http.ResponseWriter, r *http.Request) (StatusResponse, *httpjson.Error) {
	id, err := intent.ParseID(r.PathValue("id"))
	if err != nil {
		return StatusResponse{}, httpjson.NewError(http.StatusBadRequest, httpjson.CodeInvalidField, "id must be 64 lower-case hex digits")
	}
	st, err := s.n.Get(r.Context(), id)
	if err != nil {
		return StatusResponse{}, s.errorOf(err)
	}
	out := StatusResponse{ID: string(st.ID), State: st.State.String(), Attempts: st.Attempts,
		Receipts: make([]ReceiptJSON, 0, len(st.Receipts)), RetentionMs: st.Retention.Milliseconds()}
	for _, rc := range st.Receipts {
		out.Receipts = append(out.Receipts, ReceiptJSON{Attempt: rc.Attempt, Transport: rc.Transport,
			Outcome: rc.Outcome.String(), Code: rc.Code, ProviderRef: rc.ProviderRef, At: rc.At.UTC()})
	}
	return out, nil
}

// errorOf maps an error of the notifier to its answer. Render errors are
// safe to show (they carry ids and rule names only); store errors are
// not shown beyond their class.
func (s *Sidecar) errorOf(err error) *httpjson.Error {
	var pe *render.ParamError
	switch {
	case errors.As(err, &pe) && pe.Param != "":
		return &httpjson.Error{Status: http.StatusUnprocessableEntity, Body: httpjson.ErrorBody{Code: CodeRenderFailed,
			Message: httpjson.Sanitize(err.Error(), 200), Field: "params/" + pe.Param}}
	case isRenderError(err):
		return httpjson.NewError(http.StatusUnprocessableEntity, CodeRenderFailed, httpjson.Sanitize(err.Error(), 200))
	case errors.Is(err, ErrUnknownRoute):
		return httpjson.NewError(http.StatusUnprocessableEntity, CodeUnknownRoute, "the channel has no such route in this host")
	case errors.Is(err, ErrBestEffortRefused):
		return httpjson.NewError(http.StatusUnprocessableEntity, CodeBestEffortRefused,
			"the route is durable only: submit it without mode best-effort")
	case errors.Is(err, ErrInvalidRequest), errors.Is(err, intent.ErrInvalidRequest), errors.Is(err, intent.ErrInvalidPlan):
		return httpjson.NewError(http.StatusBadRequest, httpjson.CodeInvalidField, httpjson.Sanitize(err.Error(), 200))
	case errors.Is(err, intent.ErrNotFound):
		return httpjson.NewError(http.StatusNotFound, httpjson.CodeNotFound, "no such intent (never submitted, or its retention is over)")
	case errors.Is(err, intent.ErrCorruptReceipts):
		s.log.Error("notify: corrupt intent record", "error", err)
		return httpjson.NewError(http.StatusInternalServerError, "notify-corrupt", "the intent's record does not decode")
	}
	s.log.Warn("notify: Redis could not serve the request", "error", err)
	return &httpjson.Error{Status: http.StatusServiceUnavailable, RetryAfter: time.Second,
		Body: httpjson.ErrorBody{Code: httpjson.CodeUnavailable, Message: "the intent store could not serve the request; nothing changed"}}
}
