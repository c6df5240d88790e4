package ratelimit

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/dunglas/httpsfv"
)

// HeaderMode selects the RateLimit response header fields a front end
// (the middleware, the sidecar's evaluate answers) sends with a decision.
type HeaderMode string

// Header modes. The zero value means "the limiter's configuration"
// (Config.Headers), which itself defaults to HeadersLegacy.
const (
	// HeadersLegacy: RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset (integers) of the one decision that is shown: the
	// denying policy, or the most restrictive enforced one.
	HeadersLegacy HeaderMode = "legacy"
	// HeadersDraft: the structured fields of the IETF draft
	// draft-ietf-httpapi-ratelimit-headers (RFC 9651 Lists):
	// RateLimit-Policy: "<policy>";q=<limit>;w=<window s> and
	// RateLimit: "<policy>";r=<remaining>;t=<reset s>, one member per
	// enforced policy of the hierarchy, in evaluation order.
	HeadersDraft HeaderMode = "draft"
	// HeadersBoth: the legacy fields and the draft's.
	HeadersBoth HeaderMode = "both"
)

// Valid reports whether m is a known mode (the zero value included).
func (m HeaderMode) Valid() bool {
	switch m {
	case "", HeadersLegacy, HeadersDraft, HeadersBoth:
		return true
	}
	return false
}

// resolve turns the zero mode into the limiter's configured one.
func (m HeaderMode) resolve(l *Limiter) HeaderMode {
	if m == "" && l != nil {
		m = l.cfg.Headers
	}
	if m == "" {
		m = HeadersLegacy
	}
	return m
}

// maxSFInteger is the largest RFC 9651 Integer (15 digits).
const maxSFInteger = 999_999_999_999_999

// WriteHeaders sets the RateLimit fields of o on h in mode (zero:
// HeadersLegacy), with resets relative to now. Outcomes without a decision
// (Unavailable, Indeterminate, NotLimited) set none.
//
// Which numbers are shown: a shadow policy's never (it does not enforce,
// so its quota would mislead a client). Legacy shows one decision, the
// outcome's own: the denying level of a hierarchy, or the most
// restrictive enforced level when all allowed. The draft lists every
// evaluated level whose numbers are known — global decisions and local
// emergency ones (with their per-pod limits) — so a client sees each
// quota of the hierarchy; a fail-open decision has no known remaining
// quota and is left out there. A draft field whose list would be empty is
// not sent; w is the quota window rounded up to whole seconds (absent
// when unknown), t the seconds until ResetAt rounded up (absent when
// unknown).
func WriteHeaders(h http.Header, mode HeaderMode, o Outcome, now time.Time) {
	d, ok := o.Decision()
	if !ok {
		return
	}
	if mode == "" {
		mode = HeadersLegacy
	}
	if (mode == HeadersLegacy || mode == HeadersBoth) && d.Source != SourceShadow {
		h.Set("RateLimit-Limit", strconv.FormatInt(max(d.Limit, 0), 10))
		h.Set("RateLimit-Remaining", strconv.FormatInt(max(d.Remaining, 0), 10))
		h.Set("RateLimit-Reset", strconv.FormatInt(resetSeconds(d, now), 10))
	}
	if mode == HeadersDraft || mode == HeadersBoth {
		if pol, lim, err := draftFields(o.Decisions(), now); err == nil && len(pol) > 0 {
			h.Set("RateLimit-Policy", pol)
			h.Set("RateLimit", lim)
		}
	}
}

// draftFields serialises the RateLimit-Policy and RateLimit lists.
func draftFields(ds []Decision, now time.Time) (policyField, limitField string, err error) {
	var pols, lims httpsfv.List
	for _, d := range ds {
		if d.Source != SourceGlobalRedis && d.Source != SourceLocalEmergency {
			continue
		}
		p := httpsfv.NewItem(d.Policy)
		p.Params.Add("q", min(max(d.Limit, 0), maxSFInteger))
		if d.Window > 0 {
			p.Params.Add("w", min(ceilSeconds(d.Window, 1), maxSFInteger))
		}
		r := httpsfv.NewItem(d.Policy)
		r.Params.Add("r", min(max(d.Remaining, 0), maxSFInteger))
		if !d.ResetAt.IsZero() {
			r.Params.Add("t", min(resetSeconds(d, now), maxSFInteger))
		}
		pols, lims = append(pols, p), append(lims, r)
	}
	if len(pols) == 0 {
		return "", "", nil
	}
	if policyField, err = httpsfv.Marshal(pols); err != nil {
		return "", "", fmt.Errorf("ratelimit: RateLimit-Policy: %w", err)
	}
	if limitField, err = httpsfv.Marshal(lims); err != nil {
		return "", "", fmt.Errorf("ratelimit: RateLimit: %w", err)
	}
	return policyField, limitField, nil
}

// resetSeconds is the seconds until d resets, rounded up (0: unknown or past).
func resetSeconds(d Decision, now time.Time) int64 {
	if d.ResetAt.IsZero() {
		return 0
	}
	return ceilSeconds(d.ResetAt.Sub(now), 0)
}
