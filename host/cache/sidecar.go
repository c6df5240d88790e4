package cache

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/caphost/caphost/host/httpjson"
)

// The sidecar API's ServeMux patterns (the keys of Sidecar.Routes) and
// its bounds. The sidecar routes below /v1/cache/ itself, on the escaped
// path, rather than through ServeMux wildcards: a wildcard cannot carry a
// key of "/" (%2F alone reads as a trailing slash) and ServeMux answers
// dot segments with a redirect. PatternRoot is registered so that ServeMux
// never redirects /v1/cache to /v1/cache/.
const (
	PatternRoot            = "/v1/cache"
	PatternTree            = "/v1/cache/"
	DefaultSidecarDeadline = time.Second
	MaxSidecarWait         = 10 * time.Second
)

// The methods of the sidecar's two path shapes, as the Allow header of
// its 405 lists them.
const (
	allowKey    = "GET, HEAD, PUT, DELETE"
	allowRegion = "DELETE"
)

// SidecarPatterns lists the sidecar API's ServeMux patterns.
func SidecarPatterns() []string {
	return []string{PatternRoot, PatternTree}
}

// Headers of the sidecar API. A value travels in the body as raw bytes;
// everything about it travels in these headers.
const (
	// HeaderStatus (response): fresh, stale, negative, miss, and for a miss
	// "; reason=absent|expired|invalidated".
	HeaderStatus = "Caphost-Cache-Status"
	// HeaderRevision: the source revision (response: of the value; request:
	// of the value recorded), a decimal uint64.
	HeaderRevision = "Caphost-Source-Revision"
	// HeaderExpires (response): the entry's hard expiry, RFC 3339 with ms.
	HeaderExpires = "Caphost-Expires"
	// HeaderRefresh (request): "claim" asks for the refresh lease on a miss
	// or a stale hit. (Response): granted or contended.
	HeaderRefresh = "Caphost-Refresh"
	// HeaderRefreshToken (response, when granted; request, with the PUT):
	// the token to record with.
	HeaderRefreshToken = "Caphost-Refresh-Token"
	// HeaderWait (request): how long a contended miss may wait for the
	// holder's write, a Go duration ("250ms"), at most the region's lease
	// wait.
	HeaderWait = "Caphost-Wait"
	// HeaderIntent (request): upsert (default) or
	// only-if-source-revision-newer.
	HeaderIntent = "Caphost-Record-Intent"
	// HeaderAbsent (request): "true" records an authoritative absence (the
	// body must be empty).
	HeaderAbsent = "Caphost-Authoritative-Absent"
	// HeaderDeadline (request): the call's deadline in milliseconds
	// (1..10000, default 1000).
	HeaderDeadline = "Caphost-Deadline-Ms"
)

// Error codes only the cache sidecar answers. Stable: clients switch on
// them.
const (
	CodeUnknownRegion      httpjson.Code = "unknown-region"
	CodeInvalidKey         httpjson.Code = "invalid-key"
	CodeValueRefused       httpjson.Code = "value-refused"
	CodeIncompatibleSchema httpjson.Code = "incompatible-schema"
	CodeCorrupt            httpjson.Code = "corrupt-entry"
	CodeCodecFailure       httpjson.Code = "codec-failure"
	CodeInvalidToken       httpjson.Code = "invalid-refresh-token"
	CodeCacheUnavailable   httpjson.Code = "cache-unavailable"
)

// SidecarOptions configure NewSidecar.
type SidecarOptions struct {
	Log *slog.Logger
}

// Sidecar serves the cache to non-Go services over HTTP:
//
//	GET|HEAD|PUT|DELETE /v1/cache/{region}/{key}
//	DELETE              /v1/cache/{region}
//
// Paths. The region and the key each travel in one path segment,
// percent-encoded (url.PathEscape, or any encoding of the same bytes), and
// are decoded exactly once: /v1/cache/items/a%2Fb is the key "a/b",
// a%252F the key "a%2F", %2F the key "/". A key of "." or ".." is sent as
// %2E or %2E%2E: a literal dot segment, an empty segment (so an empty key,
// a double slash or a trailing slash) is not a path the sidecar serves —
// behind `caphost serve` (host/httpapi) such a non-canonical path is a 400
// bad-path before it reaches the sidecar; served alone the sidecar answers
// it, like any path of another shape (/v1/cache, a third segment), 404
// not-found. The decoded key must be valid UTF-8 of 1..MaxKeyPartBytes
// bytes (400 invalid-key); an unknown region, its bytes whatever they are,
// is 404 unknown-region.
//
// Methods. Another method is 405 method-not-allowed with an Allow header
// (GET, HEAD, PUT, DELETE on a key; DELETE on a region). HEAD is a GET
// without the body.
//
// Query. A key of a region without a canonicaliser takes no query
// parameters; a region with one takes them as its attributes (each once,
// valid UTF-8, not named key); a malformed query is refused: all 400
// invalid-key. DELETE of a region takes none (400 bad-request).
//
// Every answer is one of: a 2xx (200 with the value as raw bytes for a
// hit, 200 {"outcome": ...} for PUT and DELETE), a 404 with an empty body
// and a Caphost-Cache-Status header (a miss or a cached absence), or a
// JSON error body {"code", "message"} with a stable code (httpjson and the
// Code constants here). The only 500s are corrupt-entry and codec-failure
// (a region's codec guest or its stored entry failed; the entry was
// quarantined); a 503 (cache-unavailable, unavailable) means read the
// source. No answer is a redirect.
type Sidecar struct {
	c   *Cache
	log *slog.Logger
}

// NewSidecar returns the sidecar API over c.
func NewSidecar(c *Cache, o SidecarOptions) *Sidecar {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Sidecar{c: c, log: o.Log}
}

// Routes returns the handlers, keyed by SidecarPatterns: the sidecar
// itself for both.
func (s *Sidecar) Routes() map[string]http.Handler {
	return map[string]http.Handler{PatternRoot: s, PatternTree: s}
}

// ServeHTTP routes a request below /v1/cache/ on its escaped path.
func (s *Sidecar) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	region, key, hasKey, ok := splitPath(r.URL.EscapedPath())
	switch {
	case !ok:
		httpjson.WriteError(w, httpjson.NewError(http.StatusNotFound, httpjson.CodeNotFound, "no such endpoint"))
	case !hasKey && r.Method == http.MethodDelete:
		s.deleteRegion(w, r, region)
	case !hasKey:
		httpjson.MethodNotAllowed(allowRegion).ServeHTTP(w, r)
	case r.Method == http.MethodGet, r.Method == http.MethodHead:
		s.get(w, r, region, key)
	case r.Method == http.MethodPut:
		s.put(w, r, region, key)
	case r.Method == http.MethodDelete:
		s.delete(w, r, region, key)
	default:
		httpjson.MethodNotAllowed(allowKey).ServeHTTP(w, r)
	}
}

// splitPath parses an escaped path /v1/cache/{region}[/{key}], each
// segment non-empty, not a literal dot segment, and decoded exactly once.
// Whether the decoded bytes are a region or a valid key is the caller's
// question.
func splitPath(escaped string) (region, key string, hasKey, ok bool) {
	rest, found := strings.CutPrefix(escaped, PatternTree)
	if !found {
		return "", "", false, false
	}
	segs := strings.Split(rest, "/")
	if len(segs) > 2 {
		return "", "", false, false
	}
	dec := make([]string, len(segs))
	for i, seg := range segs {
		if seg == "" || seg == "." || seg == ".." {
			return "", "", false, false
		}
		d, err := url.PathUnescape(seg)
		if err != nil {
			return "", "", false, false
		}
		dec[i] = d
	}
	if len(dec) == 1 {
		return dec[0], "", false, true
	}
	return dec[0], dec[1], true, true
}

// outcomeBody is the JSON answer of PUT and DELETE.
type outcomeBody struct {
	Outcome string `json:"outcome"`
}

func (s *Sidecar) get(w http.ResponseWriter, r *http.Request, region, raw string) {
	ctx, cancel, reg, key, herr := s.begin(r, region, raw)
	defer cancel()
	if herr != nil {
		httpjson.WriteError(w, herr)
		return
	}
	var wait time.Duration
	if v := r.Header.Get(HeaderWait); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxSidecarWait {
			httpjson.WriteError(w, httpjson.FieldError(HeaderWait, "must be a duration within 0..10s"))
			return
		}
		wait = d
	}
	var (
		lk    Lookup
		claim Claim
		tok   string
		err   error
	)
	switch r.Header.Get(HeaderRefresh) {
	case "":
		lk, err = reg.Lookup(ctx, key)
	case "claim":
		lk, claim, tok, err = reg.LookupOrClaim(ctx, key, wait)
	default:
		httpjson.WriteError(w, httpjson.FieldError(HeaderRefresh, "want claim"))
		return
	}
	if err != nil {
		httpjson.WriteError(w, s.errorOf(err))
		return
	}
	switch claim {
	case Granted:
		w.Header().Set(HeaderRefresh, "granted")
		w.Header().Set(HeaderRefreshToken, tok)
	case Contended:
		w.Header().Set(HeaderRefresh, "contended")
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	switch lk.Kind {
	case Hit:
		h.Set(HeaderStatus, strings.ToLower(lk.Freshness.String()))
		setMeta(h, lk)
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.Itoa(len(lk.Value)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(lk.Value)
	case NegativeHit:
		h.Set(HeaderStatus, "negative")
		setMeta(h, lk)
		w.WriteHeader(http.StatusNotFound)
	case Miss:
		h.Set(HeaderStatus, "miss; reason="+strings.ToLower(lk.MissReason.String()))
		w.WriteHeader(http.StatusNotFound)
	case IncompatibleSchema:
		// Not a miss: a client that loaded and wrote now would overwrite
		// an entry another writer's newer schema needs.
		httpjson.WriteError(w, httpjson.NewError(http.StatusConflict, CodeIncompatibleSchema,
			"the stored entry has a schema this host cannot read ("+lk.Schema.String()+"); do not write it"))
	case Unavailable:
		httpjson.WriteError(w, &httpjson.Error{Status: http.StatusServiceUnavailable, RetryAfter: time.Second,
			Body: httpjson.ErrorBody{Code: CodeCacheUnavailable, Message: "the cache is unavailable (" + lk.Unavailable.String() + "); read the source"}})
	}
}

func setMeta(h http.Header, lk Lookup) {
	if v, ok := lk.SourceRevision.Value(); ok {
		h.Set(HeaderRevision, strconv.FormatUint(v, 10))
	}
	if !lk.HardExpiresAt.IsZero() {
		h.Set(HeaderExpires, lk.HardExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
}

func (s *Sidecar) put(w http.ResponseWriter, r *http.Request, region, raw string) {
	ctx, cancel, reg, key, herr := s.begin(r, region, raw)
	defer cancel()
	if herr != nil {
		httpjson.WriteError(w, herr)
		return
	}
	var meta RecordMeta
	if v := r.Header.Get(HeaderRevision); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || strconv.FormatUint(n, 10) != v {
			httpjson.WriteError(w, httpjson.FieldError(HeaderRevision, "must be a decimal uint64"))
			return
		}
		meta.Revision = SourceRevision(n)
	}
	switch r.Header.Get(HeaderIntent) {
	case "", "upsert":
	case "only-if-source-revision-newer":
		meta.Intent = OnlyIfSourceRevisionNewer
	default:
		httpjson.WriteError(w, httpjson.FieldError(HeaderIntent, "want upsert or only-if-source-revision-newer"))
		return
	}
	absent := false
	switch r.Header.Get(HeaderAbsent) {
	case "", "false":
	case "true":
		absent = true
	default:
		httpjson.WriteError(w, httpjson.FieldError(HeaderAbsent, "want true or false"))
		return
	}
	rg, err := reg.current()
	if err != nil {
		httpjson.WriteError(w, s.errorOf(err))
		return
	}
	body, herr := readValue(w, r, int64(rg.pol.MaxBytes))
	if herr != nil {
		httpjson.WriteError(w, herr)
		return
	}
	if absent && len(body) > 0 {
		httpjson.WriteError(w, httpjson.FieldError(HeaderAbsent, "an authoritative absence has no body"))
		return
	}
	var o RecordOutcome
	switch tok := r.Header.Get(HeaderRefreshToken); {
	case tok != "":
		o, err = reg.RecordClaimed(ctx, key, tok, body, absent, meta)
	case absent:
		o, err = reg.RecordAbsent(ctx, key, meta)
	default:
		o, err = reg.Record(ctx, key, body, meta)
	}
	if err != nil {
		httpjson.WriteError(w, s.errorOf(err))
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, outcomeBody{Outcome: o.String()})
}

func (s *Sidecar) delete(w http.ResponseWriter, r *http.Request, region, raw string) {
	ctx, cancel, reg, key, herr := s.begin(r, region, raw)
	defer cancel()
	if herr != nil {
		httpjson.WriteError(w, herr)
		return
	}
	o, err := reg.Invalidate(ctx, key)
	if err != nil {
		httpjson.WriteError(w, s.errorOf(err))
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, outcomeBody{Outcome: o.String()})
}

func (s *Sidecar) deleteRegion(w http.ResponseWriter, r *http.Request, region string) {
	ctx, cancel, herr := deadline(r)
	defer cancel()
	if herr != nil {
		httpjson.WriteError(w, herr)
		return
	}
	if r.URL.RawQuery != "" {
		httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, httpjson.CodeBadRequest, "a region takes no query parameters"))
		return
	}
	reg, err := s.c.Region(region)
	if err != nil {
		httpjson.WriteError(w, s.errorOf(err))
		return
	}
	o, err := reg.InvalidateRegion(ctx)
	if err != nil {
		httpjson.WriteError(w, s.errorOf(err))
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, outcomeBody{Outcome: o.String()})
}

// begin bounds the call's deadline and resolves the region and the key
// (both decoded from the path by splitPath): the path key is the one part
// of a region without a canonicaliser; for a region with one, the path key
// is the attribute "key" and the query parameters are the other attributes
// (each at most once, valid UTF-8).
func (s *Sidecar) begin(r *http.Request, region, raw string) (context.Context, context.CancelFunc, *Region, Key, *httpjson.Error) {
	ctx, cancel, herr := deadline(r)
	if herr != nil {
		return ctx, cancel, nil, Key{}, herr
	}
	reg, err := s.c.Region(region)
	if err != nil {
		return ctx, cancel, nil, Key{}, s.errorOf(err)
	}
	rg, err := reg.current()
	if err != nil {
		return ctx, cancel, nil, Key{}, s.errorOf(err)
	}
	if raw == "" || !utf8.ValidString(raw) {
		return ctx, cancel, nil, Key{}, httpjson.NewError(http.StatusBadRequest, CodeInvalidKey, "the key must be non-empty UTF-8")
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return ctx, cancel, nil, Key{}, httpjson.NewError(http.StatusBadRequest, CodeInvalidKey, "the query is malformed")
	}
	if !rg.pol.Canonicalize {
		if len(q) > 0 {
			return ctx, cancel, nil, Key{}, httpjson.NewError(http.StatusBadRequest, CodeInvalidKey, "the region takes no attributes (query parameters)")
		}
		return ctx, cancel, reg, Parts(raw), nil
	}
	attrs := []Attr{{Name: "key", Value: raw}}
	names := make([]string, 0, len(q))
	for n := range q {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		vs := q[n]
		if n == "key" || len(vs) != 1 || !utf8.ValidString(n) || !utf8.ValidString(vs[0]) {
			return ctx, cancel, nil, Key{}, httpjson.NewError(http.StatusBadRequest, CodeInvalidKey,
				"attributes must be valid UTF-8, each given once, and not named key")
		}
		attrs = append(attrs, Attr{Name: n, Value: vs[0]})
	}
	return ctx, cancel, reg, Attrs(attrs...), nil
}

// deadline returns the request's context bounded by Caphost-Deadline-Ms.
func deadline(r *http.Request) (context.Context, context.CancelFunc, *httpjson.Error) {
	d := DefaultSidecarDeadline
	if v := r.Header.Get(HeaderDeadline); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10_000 {
			ctx, cancel := context.WithCancel(r.Context())
			return ctx, cancel, httpjson.FieldError(HeaderDeadline, "must be 1..10000")
		}
		d = time.Duration(n) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(r.Context(), d)
	return ctx, cancel, nil
}

// readValue reads a raw value body of at most max bytes.
func readValue(w http.ResponseWriter, r *http.Request, max int64) ([]byte, *httpjson.Error) {
	tooLarge := httpjson.NewError(http.StatusRequestEntityTooLarge, httpjson.CodeTooLarge, "the value exceeds the region's max-bytes")
	if r.ContentLength > max {
		return nil, tooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge
	case err != nil:
		return nil, httpjson.NewError(http.StatusBadRequest, httpjson.CodeBadRequest, "the body could not be read")
	}
	return b, nil
}

// errorOf maps an error of the cache to its answer. Messages never carry a
// key, a value or a guest's detail.
func (s *Sidecar) errorOf(err error) *httpjson.Error {
	var ce *CodecError
	switch {
	case errors.Is(err, ErrUnknownRegion):
		return httpjson.NewError(http.StatusNotFound, CodeUnknownRegion, "no such cache region")
	case errors.Is(err, ErrInvalidKey):
		return httpjson.NewError(http.StatusBadRequest, CodeInvalidKey, "the key is invalid for the region")
	case errors.Is(err, ErrValueRefused):
		return httpjson.NewError(http.StatusBadRequest, CodeValueRefused, "the region's codec refused the value")
	case errors.Is(err, ErrInvalidToken):
		return httpjson.NewError(http.StatusBadRequest, CodeInvalidToken, "the refresh token is invalid for this region and key")
	case errors.Is(err, ErrNoRevision):
		return httpjson.FieldError(HeaderRevision, "required with only-if-source-revision-newer")
	case errors.Is(err, ErrCorrupt):
		return httpjson.NewError(http.StatusInternalServerError, CodeCorrupt, "the stored entry is corrupt; it was quarantined")
	case errors.As(err, &ce):
		s.log.Warn("cache guest failure", "region", ce.Region, "op", ce.Op, "error", err)
		return httpjson.NewError(http.StatusInternalServerError, CodeCodecFailure, "the region's guest failed ("+ce.Op+")")
	case errors.Is(err, ErrClosed), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return httpjson.NewError(http.StatusServiceUnavailable, httpjson.CodeUnavailable, "the cache could not answer in time")
	}
	// An error this map does not know is the cache failing, not the
	// request: the caller reads its source, as for any outage.
	s.log.Error("cache sidecar error", "error", err)
	return &httpjson.Error{Status: http.StatusServiceUnavailable, RetryAfter: time.Second,
		Body: httpjson.ErrorBody{Code: CodeCacheUnavailable, Message: "the cache failed; read the source"}}
}
