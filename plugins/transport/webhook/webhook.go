// Package webhook is the webhook notification transport: an HTTP POST of
// the message's JSON document, signed with HMAC-SHA256 and carrying the
// intent id as its Idempotency-Key. It runs inside the
// caphost-transport-webhook plugin process and, for tests, in process.
//
// Signature (Stripe-style; docs/transports.md is the spec): the header
//
//	Caphost-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>
//
// Receivers recompute the HMAC over the exact bytes received, compare in
// constant time and refuse a t too far from their clock (Verify does both).
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/caphost/caphost/plugins/transport"
)

// Header names the transport sets.
const (
	SignatureHeader   = "Caphost-Signature"
	IdempotencyHeader = "Idempotency-Key"
	AttemptHeader     = "Caphost-Attempt"
	// MinSecretBytes is the shortest HMAC secret accepted.
	MinSecretBytes = 16
	// maxDrainBytes of a response body are read (and discarded) so the
	// connection closes cleanly; the rest is never read.
	maxDrainBytes = 4 << 10
)

// Webhook posts each message to one URL.
type Webhook struct {
	url    string
	target string // "host:port": the URL's host and its port, or its scheme's default
	secret []byte
	client *http.Client
	now    func() time.Time
}

var (
	_ transport.Transport = (*Webhook)(nil)
	_ transport.Sandboxed = (*Webhook)(nil)
)

// New builds a webhook from its settings: "url" (http or https, absolute,
// no user info) and "secret" (at least MinSecretBytes bytes). Any other key
// is refused. Its connections are env's (the host's connect broker in a
// plugin process).
func New(settings map[string]string, env transport.Env) (transport.Transport, error) {
	return newWebhook(settings, env, time.Now)
}

func newWebhook(settings map[string]string, env transport.Env, now func() time.Time) (*Webhook, error) {
	for k := range settings {
		if k != "url" && k != "secret" {
			return nil, &transport.SettingError{Key: k, Code: "unknown"}
		}
	}
	u, err := url.Parse(settings["url"])
	switch {
	case settings["url"] == "":
		return nil, &transport.SettingError{Key: "url", Code: "missing"}
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "":
		return nil, &transport.SettingError{Key: "url", Code: "invalid"}
	}
	// The broker's target is what http.Transport dials: the URL's host
	// and port as written, or the scheme's default port.
	port, err := urlPort(u)
	target := net.JoinHostPort(u.Hostname(), strconv.Itoa(int(port)))
	if err != nil || !transport.ValidDialTarget(target) || u.Port() != "" && u.Port() != strconv.Itoa(int(port)) {
		return nil, &transport.SettingError{Key: "url", Code: "invalid"}
	}
	secret := settings["secret"]
	if len(secret) < MinSecretBytes {
		return nil, &transport.SettingError{Key: "secret", Code: "too-short"}
	}
	return &Webhook{
		url:    u.String(),
		target: target,
		secret: []byte(secret),
		now:    now,
		client: &http.Client{
			// One connection per delivery: net/http replays a request
			// carrying an Idempotency-Key on a reused connection that
			// failed, which would be a second send the host never decided.
			// A fresh connection also makes "nothing was sent" provable:
			// no connection, no byte.
			Transport: &http.Transport{
				DisableKeepAlives: true,
				Proxy:             nil,
				// In the plugin, the host's connect broker dials the
				// declared target; http.Transport asks for exactly it
				// (the URL's host and port) as no redirect is followed
				// and there is no proxy.
				DialContext:            env.DialContext,
				MaxResponseHeaderBytes: 16 << 10,
				ForceAttemptHTTP2:      false,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// urlPort is the TCP port u's requests go to: its explicit port, or 80
// for http and 443 for https.
func urlPort(u *url.URL) (uint16, error) {
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, errors.New("webhook: url port out of range")
	}
	return uint16(n), nil
}

// Name returns "webhook".
func (w *Webhook) Name() string { return "webhook" }

// Sandbox is what the webhook's plugin process may do: have the host's
// connect broker dial the URL's host and port (resolved by the host) and
// verify TLS (transport.Sandbox.Network). No other file, host or port,
// no socket of its own: redirects are never followed and there is no
// proxy.
func (w *Webhook) Sandbox() transport.Sandbox {
	return transport.Sandbox{Dial: []string{w.target}, Network: true}
}

// Close releases idle connections (there are none: keep-alive is off).
func (w *Webhook) Close() error {
	w.client.CloseIdleConnections()
	return nil
}

// Sign returns the Caphost-Signature header value for body at unix time t.
func Sign(secret []byte, t int64, body []byte) string {
	ts := strconv.FormatInt(t, 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(signature(secret, ts, body))
}

// signature is HMAC-SHA256(secret, ts + "." + body).
func signature(secret []byte, ts string, body []byte) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return mac.Sum(nil)
}

// ErrSignature is returned by Verify for a missing, malformed, stale or
// wrong signature.
var ErrSignature = errors.New("webhook: bad signature")

// Verify checks a Caphost-Signature header value against body, as a
// receiver does: exactly "t=<digits>,v1=<64 hex>", |now - t| ≤ tolerance,
// and the HMAC compared in constant time.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	tPart, vPart, ok := strings.Cut(header, ",")
	if !ok || !strings.HasPrefix(tPart, "t=") || !strings.HasPrefix(vPart, "v1=") {
		return fmt.Errorf("%w: malformed header", ErrSignature)
	}
	ts := tPart[2:]
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || ts == "" || strings.Trim(ts, "0123456789") != "" {
		return fmt.Errorf("%w: malformed timestamp", ErrSignature)
	}
	if d := now.Sub(time.Unix(t, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp outside tolerance", ErrSignature)
	}
	got, err := hex.DecodeString(vPart[3:])
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: malformed v1", ErrSignature)
	}
	if !hmac.Equal(got, signature(secret, ts, body)) {
		return fmt.Errorf("%w: mismatch", ErrSignature)
	}
	return nil
}

// Deliver posts m. Classification:
//   - no connection was made (refused, DNS, dial timeout, TLS handshake):
//     RejectedDefinite — not a byte left;
//   - the connection was made and no response came (timeout, reset):
//     Indeterminate — the receiver may have acted on the request;
//   - a response: 2xx Accepted; 408, 429 and 5xx RejectedDefinite with the
//     Retry-After hint; any other status RejectedDefinite (the receiver
//     answered, so the outcome is known).
func (w *Webhook) Deliver(ctx context.Context, m transport.Message) transport.Receipt {
	definite := func(code string) transport.Receipt {
		return transport.Receipt{Outcome: transport.RejectedDefinite, Code: code}
	}
	if err := transport.ValidateMessage(m); err != nil {
		return definite("message-invalid")
	}
	body, err := transport.EncodeDocument(m)
	if err != nil {
		return definite("part-not-text")
	}
	var connected atomic.Bool
	tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }})
	req, err := http.NewRequestWithContext(tctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return definite("request-invalid")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "caphost-transport-webhook/1")
	req.Header.Set(IdempotencyHeader, m.IntentID)
	req.Header.Set(AttemptHeader, strconv.FormatUint(uint64(m.Attempt), 10))
	req.Header.Set(SignatureHeader, Sign(w.secret, w.now().Unix(), body))
	resp, err := w.client.Do(req)
	if err != nil {
		timeout := ctx.Err() != nil || isTimeout(err)
		if !connected.Load() {
			switch {
			case errors.Is(err, syscall.ECONNREFUSED):
				return definite("connect-refused")
			case isDNS(err):
				return definite("dns-failed")
			case timeout:
				return definite("connect-timeout")
			}
			return definite("connect-failed")
		}
		if timeout {
			return transport.Receipt{Outcome: transport.Indeterminate, Code: "timeout-after-send"}
		}
		return transport.Receipt{Outcome: transport.Indeterminate, Code: "reset-after-send"}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrainBytes))
	_ = resp.Body.Close()
	return classify(resp, w.now())
}

func classify(resp *http.Response, now time.Time) transport.Receipt {
	code := "http-" + strconv.Itoa(resp.StatusCode)
	if resp.StatusCode < 100 || resp.StatusCode > 999 {
		code = "http-invalid"
	}
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		ref := resp.Header.Get("X-Request-Id")
		if !transport.ValidProviderRef(ref) {
			ref = ""
		}
		return transport.Receipt{Outcome: transport.Accepted, Code: code, ProviderRef: ref}
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500:
		return transport.Receipt{Outcome: transport.RejectedDefinite, Code: code, RetryAfter: RetryAfter(resp.Header.Get("Retry-After"), now)}
	}
	return transport.Receipt{Outcome: transport.RejectedDefinite, Code: code}
}

// RetryAfter parses a Retry-After value (delay-seconds or an HTTP date) into
// a whole-millisecond duration within transport.MaxRetryAfter; anything
// else, or a date in the past, is 0.
func RetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	d = max(0, min(d, transport.MaxRetryAfter))
	return d.Truncate(time.Millisecond)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func isDNS(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de)
}
