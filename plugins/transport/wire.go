package transport

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"

	"github.com/caphost/caphost/plugins/strictjson"
)

// The wire between the host and a transport plugin is gRPC (go-plugin's
// transport), one hand-registered service whose request and reply messages
// are google.protobuf.BytesValue carrying one JSON document each. The
// document, not protobuf, is the contract: it is decoded by strictjson
// (exact member names, no duplicates, no null, valid UTF-8) after a byte
// bound, then validated field by field. docs/transports.md is the spec.

// Bounds of what crosses the wire. A message larger than MaxMessageBytes is
// refused by the host before any plugin sees it.
const (
	MaxIntentIDBytes    = 128
	MaxChannelBytes     = 32
	MaxParts            = 16
	MaxPartNameBytes    = 64
	MaxContentTypeBytes = 128
	MaxMessageBytes     = 1 << 20 // all part bodies together
	MaxCodeBytes        = 64
	MaxProviderRefBytes = 256
	MaxRetryAfter       = 24 * time.Hour
	MaxReplyBytes       = 4 << 10 // a Deliver or Configure reply document
	MaxSettings         = 32
	MaxSettingKeyBytes  = 64
	MaxSettingValBytes  = 4 << 10
	// maxRequestBytes bounds an encoded Deliver request: the bodies in
	// base64 plus the envelope.
	maxRequestBytes = MaxMessageBytes*4/3 + 64<<10
)

// Errors of the wire. Every one is matched with errors.Is; none quotes a
// value it refused, only which field.
var (
	// ErrInvalidMessage: a Message the host refuses to hand to a plugin.
	ErrInvalidMessage = errors.New("transport: invalid message")
	// ErrInvalidReply: a plugin reply that is not a valid document.
	ErrInvalidReply = errors.New("transport: invalid plugin reply")
	// ErrInvalidSettings: settings outside the bounds above.
	ErrInvalidSettings = errors.New("transport: invalid settings")
)

// wireMessage is the Deliver request document.
type wireMessage struct {
	IntentID  string     `json:"intent_id"`
	Attempt   uint32     `json:"attempt"`
	Channel   string     `json:"channel"`
	Recipient string     `json:"recipient"`
	Parts     []wirePart `json:"parts"`
}

type wirePart struct {
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Body        []byte `json:"body"` // base64 (RFC 4648 standard alphabet, padded)
}

// wireReceipt is the Deliver reply document.
type wireReceipt struct {
	Outcome      string `json:"outcome"`
	Code         string `json:"code"`
	ProviderRef  string `json:"provider_ref,omitzero"`
	RetryAfterMS int64  `json:"retry_after_ms,omitzero"`
}

// wireConfigure is the Configure request document.
type wireConfigure struct {
	Settings map[string]string `json:"settings"`
}

// wireConfigured is the Configure reply document: OK, or the key of the
// setting the plugin refused and a bounded code saying why. With OK, the
// plugin also reports its sandbox (SandboxLevel); the members are
// omitted when it runs unconfined, which is also how a plugin built
// before sandboxes answers.
type wireConfigured struct {
	OK          bool   `json:"ok,omitzero"`
	Key         string `json:"key,omitzero"`
	Code        string `json:"code,omitzero"`
	LandlockABI uint8  `json:"landlock_abi,omitzero"`
	SandboxFS   bool   `json:"sandbox_fs,omitzero"`
	SandboxTCP  bool   `json:"sandbox_tcp,omitzero"`
	SandboxUDP  bool   `json:"sandbox_udp,omitzero"`
	SandboxSock bool   `json:"sandbox_sockets,omitzero"`
	SandboxHost bool   `json:"sandbox_hosts,omitzero"`
	SandboxPath bool   `json:"sandbox_paths,omitzero"`
	// Dial are the Sandbox's broker targets, which the host records
	// once for the process.
	Dial []string `json:"dial,omitzero"`
}

func configuredOK(l SandboxLevel, dial []string) wireConfigured {
	return wireConfigured{OK: true, LandlockABI: uint8(l.LandlockABI), SandboxFS: l.FS, SandboxTCP: l.TCP,
		SandboxUDP: l.UDP, SandboxSock: l.Sockets, SandboxHost: l.Hosts, SandboxPath: l.Paths, Dial: dial}
}

// level is the sandbox the reply reports.
func (w wireConfigured) level() SandboxLevel {
	return SandboxLevel{LandlockABI: int(w.LandlockABI), FS: w.SandboxFS, TCP: w.SandboxTCP, UDP: w.SandboxUDP,
		Sockets: w.SandboxSock, Hosts: w.SandboxHost, Paths: w.SandboxPath}
}

// ValidateMessage checks m against the wire bounds; the error names the
// field, never its value.
func ValidateMessage(m Message) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidMessage}, args...)...)
	}
	if !validIntentID(m.IntentID) {
		return bad("intent_id: 1..%d bytes of [A-Za-z0-9._:-] starting with a letter or digit", MaxIntentIDBytes)
	}
	if m.Attempt == 0 {
		return bad("attempt: 1-based, got 0")
	}
	if !validToken(m.Channel, MaxChannelBytes, false) {
		return bad("channel: 1..%d bytes of [a-z0-9-]", MaxChannelBytes)
	}
	if m.Recipient.IsZero() {
		return bad("recipient: unset")
	}
	if len(m.Parts) == 0 || len(m.Parts) > MaxParts {
		return bad("parts: 1..%d, got %d", MaxParts, len(m.Parts))
	}
	total := 0
	for i, p := range m.Parts {
		if !validToken(p.Name, MaxPartNameBytes, true) {
			return bad("parts[%d].name: 1..%d bytes of [a-z0-9._-]", i, MaxPartNameBytes)
		}
		for _, q := range m.Parts[:i] {
			if q.Name == p.Name {
				return bad("parts[%d].name: duplicate", i)
			}
		}
		if !validContentType(p.ContentType) {
			return bad("parts[%d].content_type: 1..%d bytes of printable ASCII", i, MaxContentTypeBytes)
		}
		total += len(p.Body)
	}
	if total > MaxMessageBytes {
		return bad("parts: bodies total %d bytes, limit %d", total, MaxMessageBytes)
	}
	return nil
}

// validIntentID: the IntentID becomes a file name, an HTTP header value and
// the local part of a Message-ID, so its alphabet is small.
func validIntentID(s string) bool {
	if s == "" || len(s) > MaxIntentIDBytes || !isAlnum(s[0]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// validToken: 1..limit bytes of [a-z0-9-], plus '.' and '_' when dotted.
func validToken(s string, limit int, dotted bool) bool {
	if s == "" || len(s) > limit {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || dotted && (c == '.' || c == '_')
		if !ok {
			return false
		}
	}
	return true
}

func validContentType(s string) bool {
	return s != "" && len(s) <= MaxContentTypeBytes && printableASCII(s)
}

// printableASCII: 0x20..0x7e only, so no CR/LF can reach a header.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// ValidCode reports whether s is a receipt code: 1..MaxCodeBytes bytes of
// [a-z0-9.-].
func ValidCode(s string) bool {
	if s == "" || len(s) > MaxCodeBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// ValidProviderRef reports whether s can be a receipt's ProviderRef: at
// most MaxProviderRefBytes bytes of printable ASCII.
func ValidProviderRef(s string) bool { return len(s) <= MaxProviderRefBytes && printableASCII(s) }

// ValidateReceipt checks r as the host checks a plugin's verdict: outcome in
// the closed set, code charset and bound, provider ref bound (printable
// ASCII), and a retry hint only on RejectedDefinite, within MaxRetryAfter.
func ValidateReceipt(r Receipt) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidReply}, args...)...)
	}
	if !r.Outcome.Valid() {
		return bad("outcome: not in the closed set")
	}
	if !ValidCode(r.Code) {
		return bad("code: 1..%d bytes of [a-z0-9.-]", MaxCodeBytes)
	}
	if !ValidProviderRef(r.ProviderRef) {
		return bad("provider_ref: at most %d bytes of printable ASCII", MaxProviderRefBytes)
	}
	if r.RetryAfter < 0 || r.RetryAfter > MaxRetryAfter {
		return bad("retry_after_ms: 0..%d", MaxRetryAfter.Milliseconds())
	}
	if r.RetryAfter != 0 && r.Outcome != RejectedDefinite {
		return bad("retry_after_ms: only with REJECTED_DEFINITE")
	}
	if r.RetryAfter%time.Millisecond != 0 {
		return bad("retry_after_ms: whole milliseconds")
	}
	return nil
}

// ValidateSettings checks a plugin's settings map against the bounds: at
// most MaxSettings keys of [a-z0-9._-], values of valid UTF-8 without
// control characters.
func ValidateSettings(s map[string]string) error {
	if len(s) > MaxSettings {
		return fmt.Errorf("%w: %d keys, limit %d", ErrInvalidSettings, len(s), MaxSettings)
	}
	for k, v := range s {
		if !validToken(k, MaxSettingKeyBytes, true) {
			return fmt.Errorf("%w: a key is not 1..%d bytes of [a-z0-9._-]", ErrInvalidSettings, MaxSettingKeyBytes)
		}
		if len(v) > MaxSettingValBytes || !utf8.ValidString(v) || hasControl(v) {
			return fmt.Errorf("%w: %s: at most %d bytes of UTF-8 without control characters", ErrInvalidSettings, k, MaxSettingValBytes)
		}
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return true
		}
	}
	return false
}

func encodeMessage(m Message) ([]byte, error) {
	w := wireMessage{IntentID: m.IntentID, Attempt: m.Attempt, Channel: m.Channel, Recipient: m.Recipient.Value(),
		Parts: make([]wirePart, len(m.Parts))}
	for i, p := range m.Parts {
		w.Parts[i] = wirePart{Name: p.Name, ContentType: p.ContentType, Body: p.Body}
	}
	return json.Marshal(w)
}

// decodeMessage is the plugin side's strict reading of a Deliver request.
func decodeMessage(b []byte) (Message, error) {
	if len(b) > maxRequestBytes {
		return Message{}, fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidMessage, len(b), maxRequestBytes)
	}
	var w wireMessage
	if err := strictjson.Unmarshal(b, &w); err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	rcpt, err := NewRecipient(w.Recipient)
	if err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	m := Message{IntentID: w.IntentID, Attempt: w.Attempt, Channel: w.Channel, Recipient: rcpt, Parts: make([]Part, len(w.Parts))}
	for i, p := range w.Parts {
		m.Parts[i] = Part{Name: p.Name, ContentType: p.ContentType, Body: p.Body}
	}
	if err := ValidateMessage(m); err != nil {
		return Message{}, err
	}
	return m, nil
}

func encodeReceipt(r Receipt) ([]byte, error) {
	return json.Marshal(wireReceipt{Outcome: r.Outcome.String(), Code: r.Code, ProviderRef: r.ProviderRef,
		RetryAfterMS: r.RetryAfter.Milliseconds()})
}

// DecodeReceipt is the host's strict reading of a plugin's Deliver reply:
// at most MaxReplyBytes, one strict JSON document, then ValidateReceipt.
// Every failure wraps ErrInvalidReply.
func DecodeReceipt(b []byte) (Receipt, error) {
	if len(b) > MaxReplyBytes {
		return Receipt{}, fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidReply, len(b), MaxReplyBytes)
	}
	var w wireReceipt
	if err := strictjson.Unmarshal(b, &w); err != nil {
		return Receipt{}, fmt.Errorf("%w: %w", ErrInvalidReply, err)
	}
	var o Outcome
	switch w.Outcome {
	case "ACCEPTED":
		o = Accepted
	case "REJECTED_DEFINITE":
		o = RejectedDefinite
	case "INDETERMINATE":
		o = Indeterminate
	default:
		return Receipt{}, fmt.Errorf("%w: outcome: not in the closed set", ErrInvalidReply)
	}
	if w.RetryAfterMS < 0 || w.RetryAfterMS > MaxRetryAfter.Milliseconds() {
		return Receipt{}, fmt.Errorf("%w: retry_after_ms: 0..%d", ErrInvalidReply, MaxRetryAfter.Milliseconds())
	}
	r := Receipt{Outcome: o, Code: w.Code, ProviderRef: w.ProviderRef, RetryAfter: time.Duration(w.RetryAfterMS) * time.Millisecond}
	if err := ValidateReceipt(r); err != nil {
		return Receipt{}, err
	}
	return r, nil
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func encodeConfigure(s map[string]string) ([]byte, error) {
	if s == nil {
		s = map[string]string{}
	}
	return json.Marshal(wireConfigure{Settings: s})
}

func decodeConfigure(b []byte) (map[string]string, error) {
	if len(b) > MaxSettings*(MaxSettingKeyBytes+MaxSettingValBytes*6+16)+64 {
		return nil, fmt.Errorf("%w: document too large", ErrInvalidSettings)
	}
	var w wireConfigure
	if err := strictjson.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSettings, err)
	}
	if err := ValidateSettings(w.Settings); err != nil {
		return nil, err
	}
	return w.Settings, nil
}

func decodeConfigured(b []byte) (wireConfigured, error) {
	if len(b) > MaxReplyBytes {
		return wireConfigured{}, fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidReply, len(b), MaxReplyBytes)
	}
	var w wireConfigured
	if err := strictjson.Unmarshal(b, &w); err != nil {
		return wireConfigured{}, fmt.Errorf("%w: %w", ErrInvalidReply, err)
	}
	switch {
	case w.OK && w.Key == "" && w.Code == "":
		if !w.level().valid() {
			return wireConfigured{}, fmt.Errorf("%w: configure reply: sandbox claims more than its landlock_abi restricts", ErrInvalidReply)
		}
		if err := checkDialTargets(w.Dial); err != nil {
			return wireConfigured{}, fmt.Errorf("%w: configure reply: %w", ErrInvalidReply, err)
		}
	case !w.OK && validToken(w.Key, MaxSettingKeyBytes, true) && ValidCode(w.Code) && w.level() == (SandboxLevel{}) && len(w.Dial) == 0:
	default:
		return wireConfigured{}, fmt.Errorf("%w: configure reply: ok (and its sandbox), or a key and a code", ErrInvalidReply)
	}
	return w, nil
}
