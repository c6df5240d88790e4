package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// SubjectExtractor extracts the request attributes (classes, shown to the
// selector) and the raw identity (only ever digested) of an HTTP request.
type SubjectExtractor interface {
	Extract(r *http.Request) (Attributes, Identity, error)
}

// ExtractorFunc adapts a function to SubjectExtractor.
type ExtractorFunc func(r *http.Request) (Attributes, Identity, error)

// Extract implements SubjectExtractor.
func (f ExtractorFunc) Extract(r *http.Request) (Attributes, Identity, error) { return f(r) }

// ErrExtract marks an extraction failure (the middleware answers 400).
var ErrExtract = errors.New("ratelimit: cannot extract request subject")

// maxHeaderValue bounds every identity header and the route.
const maxHeaderValue = MaxSubjectValueBytes

// HeaderExtractor is the configurable default extractor. The client IP is
// the TCP peer unless the peer is a trusted proxy, in which case the
// ClientIPHeaders (X-Forwarded-For style lists) are read right to left and
// the first address that is not a trusted proxy is the client. Spoofed
// headers from untrusted peers are therefore ignored.
type HeaderExtractor struct {
	TrustedProxies  []netip.Prefix
	ClientIPHeaders []string
	// Header names for identity and class attributes ("" = not extracted).
	TenantHeader, PrincipalHeader, APIKeyHeader           string
	PrincipalTierHeader, APIKeyPlanHeader, ResourceHeader string
	// Route returns the normalised route (default: r.Pattern, else the URL path).
	Route func(r *http.Request) string
	// Identity, when set, overrides the header-based principal/tenant/API key
	// (for example from an authenticated context); ClientIP is still filled.
	Identity func(r *http.Request) (Identity, error)
}

// Extract implements SubjectExtractor.
func (h *HeaderExtractor) Extract(r *http.Request) (Attributes, Identity, error) {
	var id Identity
	var a Attributes
	ip, err := h.clientIP(r)
	if err != nil {
		return a, id, err
	}
	id.ClientIP = ip.String()
	a.ClientIPClass = ipClass(ip)
	a.Method = r.Method
	switch {
	case h.Route != nil:
		a.Route = h.Route(r)
	case r.Pattern != "":
		a.Route = r.Pattern
	default:
		a.Route = r.URL.Path
	}
	hdr := func(name string) string {
		if name == "" {
			return ""
		}
		return strings.TrimSpace(r.Header.Get(name))
	}
	if h.Identity != nil {
		got, err := h.Identity(r)
		if err != nil {
			return a, id, errors.Join(ErrExtract, err)
		}
		got.ClientIP = id.ClientIP
		id = got
	} else {
		id.Tenant, id.Principal, id.APIKey = hdr(h.TenantHeader), hdr(h.PrincipalHeader), hdr(h.APIKeyHeader)
	}
	a.PrincipalTier, a.APIKeyPlan, a.ResourceClass = hdr(h.PrincipalTierHeader), hdr(h.APIKeyPlanHeader), hdr(h.ResourceHeader)
	for _, v := range []string{id.Tenant, id.Principal, id.APIKey, a.Route, a.PrincipalTier, a.APIKeyPlan, a.ResourceClass} {
		if len(v) > maxHeaderValue {
			return a, id, ErrExtract
		}
	}
	return a, id, nil
}

func (h *HeaderExtractor) clientIP(r *http.Request) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, ErrExtract
	}
	peer = peer.Unmap()
	if !h.trusted(peer) {
		return peer, nil
	}
	for _, name := range h.ClientIPHeaders {
		vals := r.Header.Values(name)
		var hops []string
		for _, v := range vals {
			hops = append(hops, strings.Split(v, ",")...)
		}
		if len(hops) > 64 {
			return netip.Addr{}, ErrExtract
		}
		for i := len(hops) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				return netip.Addr{}, ErrExtract
			}
			a = a.Unmap()
			if !h.trusted(a) {
				return a, nil
			}
		}
	}
	return peer, nil
}

func (h *HeaderExtractor) trusted(a netip.Addr) bool {
	for _, p := range h.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ipClass is a coarse, non-identifying class of an address.
func ipClass(a netip.Addr) string {
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.Is4():
		return "public-v4"
	}
	return "public-v6"
}

// MiddlewareOptions configures Middleware.
type MiddlewareOptions struct {
	// Budget bounds one evaluation (default 250ms).
	Budget time.Duration
	// Log receives bounded diagnostics (policy ids only). Default slog.Default().
	Log *slog.Logger
	// Now is the clock for the reset fields (default time.Now).
	Now func() time.Time
	// Headers selects the RateLimit fields (legacy, draft or both; zero:
	// the limiter's Config.Headers, whose default is legacy). See
	// WriteHeaders for which policy's numbers are shown.
	Headers HeaderMode
}

// Response bodies: fixed, short, never a subject.
const (
	bodyDenied      = "rate limit exceeded\n"
	bodyUnavailable = "rate limiter unavailable\n"
	bodyBadRequest  = "request subject could not be determined\n"
	bodyRefused     = "request refused by the rate-limit policy\n"
)

// Middleware enforces rate policies on an http.Handler: the extractor gives
// attributes and identity, and Limiter.Decide selects the policies and
// evaluates them as a hierarchy. Allowed → next handler with the RateLimit
// fields of MiddlewareOptions.Headers; denied → 429 with Retry-After (seconds,
// rounded up, at least 1); Unavailable or Indeterminate → 503 with
// Retry-After; Degraded → per its decision. A request the caller got
// wrong (the extractor failed, a needed subject value is missing, the
// selector refused it as invalid) is a 400 without Retry-After: repeating
// it cannot succeed. A selector failure or a selection that does not fit
// the policy set is a 503 and never allows. A request no policy selects
// passes through.
func Middleware(l *Limiter, sel Selector, extract SubjectExtractor, opts MiddlewareOptions) func(http.Handler) http.Handler {
	if opts.Budget <= 0 {
		opts.Budget = 250 * time.Millisecond
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Headers = opts.Headers.resolve(l)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			attrs, id, err := extract.Extract(r)
			if err != nil {
				writeStatus(w, http.StatusBadRequest, 0, bodyBadRequest)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), opts.Budget)
			defer cancel()
			o, err := l.Decide(ctx, sel, Query{Attributes: attrs, Identity: id})
			switch {
			case err == nil:
			case errors.Is(err, ErrSelectionRefused):
				writeStatus(w, http.StatusBadRequest, 0, bodyRefused)
				return
			case errors.Is(err, ErrNoSource), errors.Is(err, ErrInvalidQuery):
				writeStatus(w, http.StatusBadRequest, 0, bodyBadRequest)
				return
			default:
				opts.Log.Warn("rate policy selection failed", "error_kind", errorKind(err))
				writeStatus(w, http.StatusServiceUnavailable, unavailableRetryAfter, bodyUnavailable)
				return
			}
			if o.kind == NotLimited {
				next.ServeHTTP(w, r)
				return
			}
			if o.kind == Unavailable && o.category == CategoryInvalidRequest {
				opts.Log.Warn("rate policy selection does not fit its policies", "policy", o.policy)
			}
			writeOutcome(w, r, next, o, opts.Now(), opts.Headers)
		})
	}
}

// errorKind is the bounded log word for a Decide error (the error text may
// carry a guest's message).
func errorKind(err error) string {
	switch {
	case errors.Is(err, ErrBadSelection):
		return "selection"
	case errors.Is(err, ErrNoSelector):
		return "no-selector"
	}
	return "selector"
}

// writeOutcome maps an outcome to the HTTP response.
func writeOutcome(w http.ResponseWriter, r *http.Request, next http.Handler, o Outcome, now time.Time, mode HeaderMode) {
	d, ok := o.Decision()
	if !ok {
		writeStatus(w, http.StatusServiceUnavailable, o.RetryAfter(), bodyUnavailable)
		return
	}
	WriteHeaders(w.Header(), mode, o, now)
	if d.Allowed {
		next.ServeHTTP(w, r)
		return
	}
	writeStatus(w, http.StatusTooManyRequests, d.RetryAfter, bodyDenied)
}

func writeStatus(w http.ResponseWriter, code int, retryAfter time.Duration, body string) {
	if code != http.StatusBadRequest {
		w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(retryAfter, 1), 10))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// ceilSeconds rounds d up to whole seconds, at least floor.
func ceilSeconds(d time.Duration, floor int64) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, floor)
}
