package render

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

// Guests is the part of the host's guest surface the render stage uses;
// *plugins.Manager implements it.
type Guests interface {
	// Use pins the serving generation of module for fn.
	Use(ctx context.Context, module string, fn func(plugins.Guest) error) error
	// Status reports each module's serving generation and its sha256.
	Status() []plugins.ModuleStatus
}

// Options configure a Renderer.
type Options struct {
	// Guests serves the renderer modules (required).
	Guests Guests
	// Modules names the renderer modules, searched in this order for a
	// template (guest ids are unique across modules, so at most one
	// declares it).
	Modules []string
	// DefaultLocale is the last step of the locale fallback ("" for
	// none): a request whose locale and its prefixes are all undeclared
	// renders in it when the template declares it.
	DefaultLocale string
	// Limits bound parameters and output (zero fields take defaults).
	Limits Limits
	// Clock gives now for a Request without one; nil is time.Now.
	Clock func() time.Time
	// Logger receives one debug line per render and one warning per
	// refused answer — ids, rule and class only; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
}

// Renderer is the render stage: it validates a request against the
// template the guest declared, resolves the locale, calls the guest with
// the pinned generation, verifies the answer for the channel and freezes
// it into a Result that records the module's digest. It is safe for
// concurrent use.
type Renderer struct {
	guests  Guests
	modules []string
	defLoc  string
	lim     Limits
	clock   func() time.Time
	log     *slog.Logger
	metrics *metrics
}

// New returns a Renderer.
func New(o Options) (*Renderer, error) {
	var errs []error
	if o.Guests == nil {
		errs = append(errs, fmt.Errorf("%w: no guests", ErrInvalidConfig))
	}
	if len(o.Modules) == 0 {
		errs = append(errs, fmt.Errorf("%w: no renderer modules", ErrInvalidConfig))
	}
	if o.DefaultLocale != "" && !ValidLocale(o.DefaultLocale) {
		errs = append(errs, fmt.Errorf("%w: default locale is not a language tag", ErrInvalidConfig))
	}
	if err := o.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Renderer{guests: o.Guests, modules: slices.Clone(o.Modules), defLoc: o.DefaultLocale,
		lim: o.Limits.withDefaults(), clock: o.Clock, log: o.Logger, metrics: m}
	if r.clock == nil {
		r.clock = time.Now
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

// maxSwapRetries bounds how often a render is repeated because its
// module was swapped while it ran (so its digest could not be pinned).
const maxSwapRetries = 3

// Render renders req once and returns the frozen Result.
//
// Locale fallback (host-decided, so the guest never picks silently): the
// requested tag, then the tag with trailing subtags dropped one at a time
// ("pt-BR-x" → "pt-BR" → "pt"), then Options.DefaultLocale; matching
// ignores ASCII case. The guest is asked for the locale chosen, and the
// Result records both the locale asked for and the one rendered.
//
// Errors: ErrInvalidRequest, ErrTemplateNotFound, ErrVersionNotFound,
// ErrLocaleNotFound, ErrChannelNotFound, ErrInvalidParams (*ParamError),
// ErrParamsRefused, ErrRenderFailed (*FailureError: trap, deadline,
// unavailable module, ...) and ErrInvalidOutput (*OutputError). Every
// failure means nothing was rendered; none of them carries content.
func (r *Renderer) Render(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	res, err := r.render(ctx, &req)
	r.metrics.observe(req.Channel, time.Since(start), res, err)
	switch {
	case err == nil:
		r.log.LogAttrs(ctx, slog.LevelDebug, "notification rendered", slog.String("module", res.Module),
			slog.String("template", res.Template), slog.Uint64("version", uint64(res.Version)),
			slog.String("locale", res.Locale), slog.String("channel", string(res.Channel)), slog.Int("bytes", res.Bytes()))
	case errors.Is(err, ErrInvalidOutput) || errors.Is(err, ErrRenderFailed):
		// err prints ids, rule and class only (see errors.go).
		r.log.LogAttrs(ctx, slog.LevelWarn, "notification render refused", slog.String("error", err.Error()))
	}
	return res, err
}

func (r *Renderer) render(ctx context.Context, req *Request) (*Result, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	now := req.Now
	if now.IsZero() {
		now = r.clock()
	}
	now = time.UnixMilli(now.UnixMilli()).UTC()
	for _, module := range r.modules {
		res, err := r.renderIn(ctx, module, req, now)
		for try := 1; errors.Is(err, errSwapped) && try < maxSwapRetries; try++ {
			res, err = r.renderIn(ctx, module, req, now)
		}
		switch {
		case errors.Is(err, errNotHere):
			continue
		case errors.Is(err, errSwapped):
			return nil, &FailureError{Module: module, Template: req.Template, Class: "swapping", Err: err}
		}
		return res, err
	}
	return nil, fmt.Errorf("%w: %s", ErrTemplateNotFound, req.Template)
}

var (
	// errNotHere: the module does not declare the template.
	errNotHere = errors.New("render: template not in module")
	// errSwapped: the module's generation changed during the call.
	errSwapped = errors.New("render: module swapped during render")
)

// serving returns module's serving generation and digest.
func (r *Renderer) serving(module string) (uint64, string) {
	for _, s := range r.guests.Status() {
		if s.Name == module {
			return s.Generation, s.SHA256
		}
	}
	return 0, ""
}

// renderIn renders req with module. The digest recorded is the serving
// generation's, read before and after the pinned call: generation
// numbers only grow, so an unchanged number means the call ran on that
// generation; a changed one is errSwapped and the render is repeated.
func (r *Renderer) renderIn(ctx context.Context, module string, req *Request, now time.Time) (*Result, error) {
	gen, sha := r.serving(module)
	var (
		res  *Result
		rerr error
	)
	err := r.guests.Use(ctx, module, func(g plugins.Guest) error {
		t := findTemplate(g.Description(), req.Template)
		if t == nil {
			return errNotHere
		}
		res, rerr = r.call(ctx, module, g, t, req, now)
		return nil
	})
	if errors.Is(err, errNotHere) {
		return nil, err
	}
	if err != nil {
		class := "unavailable"
		if errors.Is(err, plugins.ErrManagerClosed) {
			class = "closed"
		} else if errors.Is(err, context.Canceled) {
			class = "canceled"
		} else if errors.Is(err, context.DeadlineExceeded) {
			class = "deadline"
		}
		return nil, &FailureError{Module: module, Template: req.Template, Class: class, Err: err}
	}
	if rerr != nil {
		return nil, rerr
	}
	if gen2, _ := r.serving(module); gen == 0 || gen2 != gen {
		return nil, errSwapped
	}
	digest, err := hex.DecodeString(sha)
	if err != nil || len(digest) != len(res.ModuleSHA256) {
		return nil, &FailureError{Module: module, Template: req.Template, Class: "unavailable", Err: errors.New("module digest unknown")}
	}
	copy(res.ModuleSHA256[:], digest)
	return res, nil
}

func findTemplate(d *abi.Description, id string) *abi.TemplateDecl {
	for i := range d.Templates {
		if d.Templates[i].ID == id {
			return &d.Templates[i]
		}
	}
	return nil
}

// call validates req against t, calls the guest and verifies its answer.
func (r *Renderer) call(ctx context.Context, module string, g plugins.Guest, t *abi.TemplateDecl, req *Request, now time.Time) (*Result, error) {
	switch {
	case t.Version != req.Version:
		return nil, fmt.Errorf("%w: template %s declares version %d, not %d", ErrVersionNotFound, t.ID, t.Version, req.Version)
	case !slices.Contains(t.Channels, string(req.Channel)):
		return nil, fmt.Errorf("%w: template %s v%d: channel %s", ErrChannelNotFound, t.ID, t.Version, req.Channel)
	}
	locale, ok := resolveLocale(t.Locales, req.Locale, r.defLoc)
	if !ok {
		return nil, fmt.Errorf("%w: template %s v%d: %s", ErrLocaleNotFound, t.ID, t.Version, req.Locale)
	}
	attrs, err := checkParams(t, req.Params, r.lim)
	if err != nil {
		return nil, err
	}
	resp, err := plugins.Render(ctx, g, &abi.RenderRequest{Template: t.ID, Version: t.Version, Locale: locale,
		Channel: string(req.Channel), Params: attrs, NowUnixMilli: now.UnixMilli()})
	if err != nil {
		return nil, guestFailure(module, t.ID, err)
	}
	if err := Verify(req.Channel, attrs, resp.Parts, r.lim); err != nil {
		var oe *OutputError
		if errors.As(err, &oe) {
			oe.Module, oe.Template = module, t.ID
		}
		return nil, err
	}
	return &Result{Module: module, Template: t.ID, Version: t.Version, RequestedLocale: req.Locale, Locale: locale,
		Channel: req.Channel, Now: now, Parts: cloneParts(resp.Parts)}, nil
}

// guestFailure maps a guest call's error: invalid-request is the caller's
// values (ErrParamsRefused); everything else is ErrRenderFailed — never a
// message.
func guestFailure(module, template string, err error) error {
	var se *abi.StatusError
	if errors.As(err, &se) {
		if se.Code == abi.CodeInvalidRequest {
			return &refusedError{template: template, err: err}
		}
		return &FailureError{Module: module, Template: template, Class: se.Code.String(), Err: err}
	}
	var ge *plugins.GuestError
	if errors.As(err, &ge) {
		return &FailureError{Module: module, Template: template, Class: string(ge.Class), Err: err}
	}
	class := "other"
	if errors.Is(err, context.DeadlineExceeded) {
		class = "deadline"
	} else if errors.Is(err, context.Canceled) {
		class = "canceled"
	}
	return &FailureError{Module: module, Template: template, Class: class, Err: err}
}
