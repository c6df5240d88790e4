// Package smtp is the SMTP notification transport (net/smtp): one message
// per attempt with a Message-ID derived from the intent id, so receivers
// can recognise a resend. It runs inside the caphost-transport-smtp plugin
// process and, for tests, in process.
package smtp

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/caphost/caphost/plugins/transport"
)

// Sender submits messages to one SMTP server.
type Sender struct {
	addr, host  string
	from        string
	helo        string
	starttls    bool
	auth        smtp.Auth
	msgIDDomain string
	now         func() time.Time
	dial        transport.DialFunc
}

var (
	_ transport.Transport = (*Sender)(nil)
	_ transport.Sandboxed = (*Sender)(nil)
)

func knownSetting(k string) bool {
	switch k {
	case "host", "port", "from", "helo", "tls", "username", "password", "message-id-domain":
		return true
	}
	return false
}

// New builds a sender from its settings: "host", "port" and "from"
// (required); "tls" = "starttls" (the default: STARTTLS is required) or
// "none"; "username" and "password" for AUTH PLAIN (net/smtp sends them
// only over TLS or to localhost); "helo" (default "localhost");
// "message-id-domain" (default "caphost.invalid").
//
// Its connections are env's (the host's connect broker in a plugin
// process).
func New(settings map[string]string, env transport.Env) (transport.Transport, error) {
	for k := range settings {
		if !knownSetting(k) {
			return nil, &transport.SettingError{Key: k, Code: "unknown"}
		}
	}
	s := &Sender{host: settings["host"], helo: settings["helo"], msgIDDomain: settings["message-id-domain"], now: time.Now, dial: env.DialContext}
	if s.host == "" || strings.ContainsAny(s.host, " /@") {
		return nil, &transport.SettingError{Key: "host", Code: "invalid"}
	}
	port, err := strconv.ParseUint(settings["port"], 10, 16)
	if err != nil || port == 0 {
		return nil, &transport.SettingError{Key: "port", Code: "invalid"}
	}
	s.addr = net.JoinHostPort(s.host, strconv.FormatUint(port, 10))
	if !transport.ValidDialTarget(s.addr) {
		return nil, &transport.SettingError{Key: "host", Code: "invalid"}
	}
	from, err := mail.ParseAddress(settings["from"])
	if err != nil {
		return nil, &transport.SettingError{Key: "from", Code: "invalid"}
	}
	s.from = from.Address
	switch settings["tls"] {
	case "", "starttls":
		s.starttls = true
	case "none":
	default:
		return nil, &transport.SettingError{Key: "tls", Code: "invalid"}
	}
	if s.helo == "" {
		s.helo = "localhost"
	}
	if s.msgIDDomain == "" {
		s.msgIDDomain = "caphost.invalid"
	}
	if !validDomain(s.msgIDDomain) {
		return nil, &transport.SettingError{Key: "message-id-domain", Code: "invalid"}
	}
	if u := settings["username"]; u != "" {
		s.auth = smtp.PlainAuth("", u, settings["password"], s.host)
	}
	return s, nil
}

// Name returns "smtp".
func (s *Sender) Name() string { return "smtp" }

// Close does nothing: each attempt has its own connection.
func (s *Sender) Close() error { return nil }

// Sandbox is what the SMTP plugin process may do: have the host's
// connect broker dial the configured host and port (resolved by the
// host) and verify the STARTTLS certificate (transport.Sandbox.Network).
// No other file, host or port, no socket of its own.
func (s *Sender) Sandbox() transport.Sandbox {
	return transport.Sandbox{Dial: []string{s.addr}, Network: true}
}

// MessageID is the Message-ID of every attempt of intentID: the same for
// each attempt, so a receiver that sees it twice knows it is a resend. The
// intent id's '.' and ':' are written =2E and =3A ('=' is never in an
// intent id, so the mapping is one-to-one and the result is a dot-atom).
func MessageID(intentID, domain string) string {
	local := strings.NewReplacer(".", "=2E", ":", "=3A").Replace(intentID)
	return "<" + local + "@" + domain + ">"
}

// Deliver submits m. Classification: nothing is delivered before the
// server's reply to the end of DATA, so every failure up to and including
// writing the body is RejectedDefinite (an SMTP 4xx reply with code
// smtp-4xx: retry later; 5xx: refused); a 2xx reply to the end of DATA is
// Accepted; a 4xx/5xx reply to it is RejectedDefinite; a connection lost
// or a deadline passed after the end of DATA was sent and before the reply
// is Indeterminate.
func (s *Sender) Deliver(ctx context.Context, m transport.Message) transport.Receipt {
	definite := func(code string) transport.Receipt {
		return transport.Receipt{Outcome: transport.RejectedDefinite, Code: code}
	}
	if err := transport.ValidateMessage(m); err != nil {
		return definite("message-invalid")
	}
	to, err := mail.ParseAddress(m.Recipient.Value())
	if err != nil {
		return definite("recipient-invalid")
	}
	msgID := MessageID(m.IntentID, s.msgIDDomain)
	msg, code := s.compose(m, to.Address, msgID)
	if code != "" {
		return definite(code)
	}
	conn, err := s.dial(ctx, "tcp", s.addr)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return definite("connect-refused")
		case ctx.Err() != nil:
			return definite("connect-timeout")
		}
		return definite("connect-failed")
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// Cancellation ends any blocked read or write at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	before := func(err error) transport.Receipt {
		if c, ok := replyCode(err); ok {
			return definite("smtp-" + strconv.Itoa(c))
		}
		if ctx.Err() != nil || isTimeout(err) {
			return definite("timeout-before-data-end")
		}
		return definite("smtp-io-before-data-end")
	}
	c, err := smtp.NewClient(conn, s.host)
	if err != nil {
		return before(err)
	}
	if err := c.Hello(s.helo); err != nil {
		return before(err)
	}
	if s.starttls {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return definite("starttls-unavailable")
		}
		if err := c.StartTLS(&tls.Config{ServerName: s.host, MinVersion: tls.VersionTLS12}); err != nil {
			return before(err)
		}
	}
	if s.auth != nil {
		if err := c.Auth(s.auth); err != nil {
			return before(err)
		}
	}
	if err := c.Mail(s.from); err != nil {
		return before(err)
	}
	if err := c.Rcpt(to.Address); err != nil {
		return before(err)
	}
	w, err := c.Data()
	if err != nil {
		return before(err)
	}
	if _, err := w.Write(msg); err != nil {
		return before(err)
	}
	// Close writes the end of DATA and reads the server's verdict: from
	// here on the message may have been taken.
	if err := w.Close(); err != nil {
		if code, ok := replyCode(err); ok {
			return definite("smtp-" + strconv.Itoa(code))
		}
		if ctx.Err() != nil || isTimeout(err) {
			return transport.Receipt{Outcome: transport.Indeterminate, Code: "timeout-after-data"}
		}
		return transport.Receipt{Outcome: transport.Indeterminate, Code: "lost-after-data"}
	}
	_ = c.Quit()
	return transport.Receipt{Outcome: transport.Accepted, Code: "smtp-250", ProviderRef: msgID}
}

// replyCode returns the server's reply code when err is one (4xx or 5xx).
func replyCode(err error) (int, bool) {
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 400 && te.Code <= 599 {
		return te.Code, true
	}
	return 0, false
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// compose builds the RFC 5322 message from the parts "subject", "text"
// and "html"; it returns a receipt code when a part cannot be sent.
func (s *Sender) compose(m transport.Message, to, msgID string) ([]byte, string) {
	var subject, text, html []byte
	for _, p := range m.Parts {
		if !utf8.Valid(p.Body) {
			return nil, "part-not-text"
		}
		switch p.Name {
		case "subject":
			subject = p.Body
		case "text":
			text = p.Body
		case "html":
			html = p.Body
		default:
			return nil, "part-unsupported"
		}
	}
	if bytes.ContainsAny(subject, "\r\n") {
		return nil, "subject-invalid"
	}
	if text == nil && html == nil {
		return nil, "body-missing"
	}
	var b bytes.Buffer
	h := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	h("From", "<"+s.from+">")
	h("To", "<"+to+">")
	h("Subject", mime.QEncoding.Encode("utf-8", string(subject)))
	h("Date", s.now().UTC().Format(time.RFC1123Z))
	h("Message-ID", msgID)
	h("MIME-Version", "1.0")
	body := func(w *bytes.Buffer, p []byte) {
		q := quotedprintable.NewWriter(w)
		_, _ = q.Write(p)
		_ = q.Close()
	}
	switch {
	case text != nil && html != nil:
		mw := multipart.NewWriter(&b)
		h("Content-Type", "multipart/alternative; boundary="+mw.Boundary())
		b.WriteString("\r\n")
		for _, alt := range []struct {
			ct string
			p  []byte
		}{{"text/plain; charset=utf-8", text}, {"text/html; charset=utf-8", html}} {
			pw, _ := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {alt.ct}, "Content-Transfer-Encoding": {"quoted-printable"}})
			var pb bytes.Buffer
			body(&pb, alt.p)
			_, _ = pw.Write(pb.Bytes())
		}
		_ = mw.Close()
	default:
		ct, p := "text/plain; charset=utf-8", text
		if text == nil {
			ct, p = "text/html; charset=utf-8", html
		}
		h("Content-Type", ct)
		h("Content-Transfer-Encoding", "quoted-printable")
		b.WriteString("\r\n")
		body(&b, p)
	}
	return b.Bytes(), ""
}

// validDomain reports whether s is a dot-atom of letters, digits and '-',
// so it can follow '@' in a Message-ID.
func validDomain(s string) bool {
	if s == "" || len(s) > 253 || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
