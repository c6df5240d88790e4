package rlsconfig

import "strings"

// MaxHeaderNameBytes bounds a configured response header name.
const MaxHeaderNameBytes = 64

// Default response header names (envoyproxy/ratelimit's defaults).
const (
	DefaultHeaderLimit     = "RateLimit-Limit"
	DefaultHeaderRemaining = "RateLimit-Remaining"
	DefaultHeaderReset     = "RateLimit-Reset"
)

// HeaderNamesOrDefaults returns the three names with the defaults in
// place of the empty ones: the names the service will send.
func HeaderNamesOrDefaults(limit, remaining, reset string) (string, string, string) {
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	return or(limit, DefaultHeaderLimit), or(remaining, DefaultHeaderRemaining), or(reset, DefaultHeaderReset)
}

// ValidHeaderName reports whether s can name a rate-limit response header
// (envoyproxy/ratelimit's LIMIT_*_HEADER settings): 1 to
// MaxHeaderNameBytes bytes of an HTTP token (RFC 9110 tchar), so Envoy
// forwards it as given and it can never split a header.
func ValidHeaderName(s string) bool {
	if len(s) == 0 || len(s) > MaxHeaderNameBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// DistinctHeaderNames reports whether the response header names that are
// set all differ, ignoring case as HTTP header names do. An empty name is
// not set and clashes with nothing: a caller that knows the defaults fills
// them in first, one that checks only what was configured passes the
// names as given.
func DistinctHeaderNames(names ...string) bool {
	for i, a := range names {
		if a == "" {
			continue
		}
		for _, b := range names[i+1:] {
			if strings.EqualFold(a, b) {
				return false
			}
		}
	}
	return true
}
