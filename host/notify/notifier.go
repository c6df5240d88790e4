package notify

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/caphost/caphost/host/notify/dispatch"
	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/runtime/certainty"
)

var (
	// ErrUnknownRoute is matched when a request names a channel or route
	// the configuration does not define.
	ErrUnknownRoute = errors.New("notify: unknown route")
	// ErrBestEffortRefused is matched when a best-effort send names a
	// route that is durable only (route.best-effort is false).
	ErrBestEffortRefused = errors.New("notify: route does not allow best-effort sends")
	// ErrInvalidRequest is matched by a request refused before anything
	// was rendered or sent: a bad idempotency key or recipient.
	ErrInvalidRequest = errors.New("notify: invalid request")
)

// Request is one notification a service asks for: the typed intent of the
// reference design (channel, logical template id and version, locale,
// recipient, typed parameters, delivery mode's key), never a rendered
// body or a provider id.
//
// A Request holds a recipient and parameter values: never log it.
type Request struct {
	// IdempotencyKey (durable submits: required, 1..256 bytes) names the
	// caller's intent: a repeat returns the first intent. It is HMAC'd
	// before it reaches Redis.
	IdempotencyKey string
	Channel        render.Channel
	// Route selects the channel's route ("" is DefaultRoute).
	Route     string
	Recipient string
	Template  string
	Version   uint32
	Locale    string
	Params    []render.Param
}

// LogValue describes r without its recipient or parameter values.
func (r Request) LogValue() slog.Value {
	return slog.GroupValue(slog.String("channel", string(r.Channel)), slog.String("route", r.route()),
		slog.String("template", r.Template), slog.Uint64("version", uint64(r.Version)), slog.Int("params", len(r.Params)))
}

func (r Request) route() string {
	if r.Route == "" {
		return DefaultRoute
	}
	return r.Route
}

// Submitted is the outcome of a durable submit.
type Submitted struct {
	intent.Submission
	// Locale is the locale this call rendered the message in (the
	// request's, or a fallback the host chose); empty for a repeat that
	// was found after its render failed (see Notifier.Submit).
	Locale string
}

// BestEffortResult is what a best-effort send learned. It is never an
// error: a failed send is observed (metrics, a WARN line) and reported
// here, and the caller's work goes on — the fail-open mode the route
// opted into.
type BestEffortResult struct {
	// Outcome is the submission certainty of the last transport call:
	// Accepted, RejectedDefinite (every transport refused definitely) or
	// Indeterminate (the send may have happened; nothing else was tried).
	Outcome transport.Outcome
	// Transport names the transport of the last call, Code its bounded
	// machine code.
	Transport, Code string
	// Attempts counts transport calls (one per transport at most).
	Attempts int
	Locale   string
}

// Notifier is the notify capability: it renders a request once with the
// renderer guests, then either stores it as a durable intent that the
// dispatcher delivers at least once, or sends it best-effort, once,
// without a trace in Redis. It is safe for concurrent use.
type Notifier struct {
	cfg        Config
	renderer   *render.Renderer
	store      *intent.Store
	transports map[string]transport.Transport
	metrics    *metrics
	log        *slog.Logger
	now        func() time.Time
}

// Submit renders req and stores it durably under its idempotency key. A
// repeat of the same request returns the first intent (Duplicate); the
// same key with another request returns the first intent's id with
// OtherPlan and certainty CONFLICT — the first one stands. A repeat is
// recognised by its request, never by its rendering, so it returns the
// first intent even when the renderer changed since (a hot swap that
// dropped the template or locale, or tightened the parameters): a render
// failure is answered from the stored intent when the key names one.
//
// Errors: ErrInvalidRequest, ErrUnknownRoute, the render stage's errors
// (render.ErrTemplateNotFound, ...; nothing was stored) and the store's,
// whose Submission.Certainty tells whether anything may have been stored
// (INDETERMINATE: repeat with the same key, which resolves it).
func (n *Notifier) Submit(ctx context.Context, req Request) (Submitted, error) {
	if len(req.IdempotencyKey) == 0 || len(req.IdempotencyKey) > intent.MaxIdempotencyKeyBytes {
		n.metrics.intents.WithLabelValues(SubmitInvalid).Inc()
		return Submitted{Submission: intent.Submission{Certainty: certainty.Rejected}},
			fmt.Errorf("%w: idempotency key must be 1..%d bytes", ErrInvalidRequest, intent.MaxIdempotencyKeyBytes)
	}
	route, err := n.routeOf(req)
	if err != nil {
		n.metrics.intents.WithLabelValues(SubmitInvalid).Inc()
		return Submitted{Submission: intent.Submission{Certainty: certainty.Rejected}}, err
	}
	fp := fingerprint(req)
	plan, err := n.freeze(ctx, req, route)
	if err != nil {
		if sub, ok := n.existing(ctx, req, fp, err); ok {
			n.countSubmit(sub, nil)
			return Submitted{Submission: sub}, nil
		}
		n.metrics.intents.WithLabelValues(submitFailure(err)).Inc()
		return Submitted{Submission: intent.Submission{Certainty: certainty.Rejected}}, err
	}
	sub, err := n.store.SubmitRequest(ctx, []byte(req.IdempotencyKey), plan, fp)
	n.countSubmit(sub, err)
	return Submitted{Submission: sub, Locale: plan.Message.Locale}, err
}

// existing looks up the intent a repeated submit names after its render
// failed with renderErr: the renderer may have changed since the first
// submit (a hot swap removed the template or locale, or its parameter
// schema), and a repeat must still return the first intent rather than
// fail. Only render-stage errors are looked up; on any failure of the
// lookup itself the render error stands.
func (n *Notifier) existing(ctx context.Context, req Request, fp [sha256.Size]byte, renderErr error) (intent.Submission, bool) {
	if !isRenderError(renderErr) {
		return intent.Submission{}, false
	}
	sub, found, err := n.store.Existing(ctx, []byte(req.IdempotencyKey), fp)
	if err != nil || !found {
		return intent.Submission{}, false
	}
	return sub, true
}

// countSubmit counts one submit's outcome in intents_total.
func (n *Notifier) countSubmit(sub intent.Submission, err error) {
	switch {
	case err != nil && sub.Certainty == certainty.Indeterminate:
		n.metrics.intents.WithLabelValues(SubmitIndeterminate).Inc()
	case err != nil:
		n.metrics.intents.WithLabelValues(submitFailure(err)).Inc()
	case sub.OtherPlan:
		n.metrics.intents.WithLabelValues(SubmitConflict).Inc()
	case sub.Duplicate:
		n.metrics.intents.WithLabelValues(SubmitDuplicate).Inc()
	default:
		n.metrics.intents.WithLabelValues(SubmitNew).Inc()
	}
}

// submitFailure is the intents_total outcome of an error before or at the
// store.
func submitFailure(err error) string {
	switch {
	case errors.Is(err, ErrInvalidRequest), errors.Is(err, ErrUnknownRoute), errors.Is(err, intent.ErrInvalidRequest),
		errors.Is(err, intent.ErrInvalidPlan), errors.Is(err, render.ErrInvalidRequest), errors.Is(err, render.ErrInvalidParams):
		return SubmitInvalid
	case isRenderError(err):
		return SubmitRenderFailed
	}
	return SubmitUnavailable
}

// isRenderError reports whether err came from the render stage.
func isRenderError(err error) bool {
	for _, e := range []error{render.ErrInvalidRequest, render.ErrTemplateNotFound, render.ErrVersionNotFound,
		render.ErrLocaleNotFound, render.ErrChannelNotFound, render.ErrInvalidParams, render.ErrParamsRefused,
		render.ErrRenderFailed, render.ErrInvalidOutput} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Get reports the state of a durable intent (intent.ErrNotFound when it
// was never submitted or its retention is over).
func (n *Notifier) Get(ctx context.Context, id intent.ID) (intent.Status, error) {
	return n.store.Get(ctx, id)
}

// SendBestEffort renders req and sends it once, now, through the route's
// transports in order (a definite rejection moves to the next; an
// indeterminate outcome stops, since the message may have been sent),
// with no durable record, no retry and no dedup. It is fail-open by
// design: a transport failure is a result, never an error, so a
// notification that must not be lost belongs to Submit — a route allows
// this path only when it says best-effort: true.
//
// Errors are the caller's: ErrUnknownRoute, ErrBestEffortRefused,
// ErrInvalidRequest and the render stage's.
func (n *Notifier) SendBestEffort(ctx context.Context, req Request) (BestEffortResult, error) {
	route, err := n.routeOf(req)
	if err != nil {
		return BestEffortResult{}, err
	}
	if !route.BestEffort {
		return BestEffortResult{}, fmt.Errorf("%w: %s/%s", ErrBestEffortRefused, req.Channel, req.route())
	}
	plan, err := n.freeze(ctx, req, route)
	if err != nil {
		return BestEffortResult{}, err
	}
	var idb [16]byte
	_, _ = rand.Read(idb[:])
	msg := transport.Message{IntentID: "be-" + hex.EncodeToString(idb[:]), Attempt: 1, Channel: string(req.Channel),
		Recipient: plan.Recipient, Parts: plan.Parts()}
	res := BestEffortResult{Locale: plan.Message.Locale}
	for _, name := range route.Transports {
		r := n.transports[name].Deliver(ctx, msg)
		res.Outcome, res.Transport, res.Code = r.Outcome, name, r.Code
		res.Attempts++
		if r.Outcome != transport.RejectedDefinite {
			break
		}
	}
	n.metrics.bestEffort.WithLabelValues(res.Outcome.String()).Inc()
	if res.Outcome != transport.Accepted {
		n.log.Warn("best-effort notification not accepted (fail-open: the caller goes on)", "channel", string(req.Channel),
			"route", req.route(), "transport", res.Transport, "outcome", res.Outcome.String(), "code", res.Code)
	}
	return res, nil
}

// routeOf returns the configured route req names (ErrUnknownRoute).
func (n *Notifier) routeOf(req Request) (Route, error) {
	route, ok := n.cfg.route(req.Channel, req.route())
	if !ok {
		return Route{}, fmt.Errorf("%w: %s/%s", ErrUnknownRoute, safeName(string(req.Channel)), safeName(req.route()))
	}
	return route, nil
}

// freeze checks req's recipient and renders it into a plan for route.
func (n *Notifier) freeze(ctx context.Context, req Request, route Route) (intent.Plan, error) {
	rcpt, err := transport.NewRecipient(req.Recipient)
	if err != nil {
		// transport's error never quotes the address.
		return intent.Plan{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	res, err := n.renderer.Render(ctx, render.Request{Template: req.Template, Version: req.Version, Locale: req.Locale,
		Channel: req.Channel, Params: req.Params})
	if err != nil {
		return intent.Plan{}, err
	}
	return intent.Plan{Recipient: rcpt, Transports: slices.Clone(route.Transports), Message: *res,
		CreatedAt: n.now().Truncate(time.Millisecond)}, nil
}

// fingerprint is the SHA-256 of req's canonical form (every field but
// the idempotency key, parameters sorted by name, each field length-
// prefixed): the same request always has the same fingerprint, however
// often it is rendered.
func fingerprint(req Request) [sha256.Size]byte {
	h := sha256.New()
	put := func(s string) {
		var b [binary.MaxVarintLen64]byte
		h.Write(b[:binary.PutUvarint(b[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	put("caphost-notify-request-v1")
	put(string(req.Channel))
	put(req.route())
	put(req.Recipient)
	put(req.Template)
	var v [4]byte
	binary.BigEndian.PutUint32(v[:], req.Version)
	h.Write(v[:])
	put(req.Locale)
	ps := slices.Clone(req.Params)
	slices.SortFunc(ps, func(a, b render.Param) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range ps {
		put(p.Name)
		put(p.Value)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// safeName returns s when it is a short slug (a channel or route name a
// caller may have mistyped), else "(invalid)": errors never echo free text.
func safeName(s string) string {
	if validRouteName(s) {
		return s
	}
	return "(invalid)"
}

// Store returns the durable intent store (for operators' tools: backlog,
// receipts arriving out of band).
func (n *Notifier) Store() *intent.Store { return n.store }

// dispatcherConfig completes cfg's dispatch block for this process.
func dispatcherConfig(cfg dispatch.Config, ts map[string]transport.Transport, m *metrics, log *slog.Logger) dispatch.Config {
	cfg.Transports = ts
	cfg.Observer = dispatchObserver{m}
	cfg.Logger = log
	if cfg.Consumer == "" {
		cfg.Consumer = defaultConsumer()
	}
	return cfg
}
