package certainty

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Classify maps the error of one Redis call to its Outcome. mutation says
// whether the call may change server state. The order matters and follows
// the translator rules of the execution-certainty model:
//
//  1. nil, and the nil reply (redis.Nil), are Applied: facades refine
//     NotApplied/Conflict from program statuses.
//  2. An error that knows its outcome (Outcomer: guard rejections, admission
//     refusals, runtime dial/handshake wrappers, *Error) is trusted.
//  3. Failures that provably happen before the request is written: pool
//     timeout/exhaustion → OverloadedBeforeSend; a closed client, dial
//     errors, DNS and TLS handshake failures → UnavailableBeforeSend.
//  4. A server error reply is classified by its first token only (see
//     serverCode); the server answered, so it is never ambiguous — except
//     an unknown or generic ("ERR") code on a mutation, because a program
//     can fail after some of its writes were applied.
//  5. Timeouts, resets, EOF and context cancellation may have happened after
//     the request was written: Indeterminate, for reads as well (the catalog,
//     not this function, decides that a read is retry-safe). The runtime's
//     admission hook refines context errors it can prove happened before
//     send (go-redis returns a bare ctx.Err() only while waiting for a pool
//     turn or a dial).
//  6. Anything else is Indeterminate: an unclassified failure must never
//     look like "not applied".
func Classify(err error, mutation bool) Outcome {
	o, _ := classify(err, mutation)
	return o
}

// Reason returns the bounded reason code Classify based its decision on
// ("WRONGTYPE", "timeout", "dial", ...). It never returns server text.
func Reason(err error, mutation bool) string {
	_, code := classify(err, mutation)
	return code
}

func classify(err error, mutation bool) (Outcome, string) {
	if err == nil || errors.Is(err, redis.Nil) {
		return Applied, ""
	}
	var oc Outcomer
	if errors.As(err, &oc) {
		o := oc.CertaintyOutcome()
		if o.Valid() {
			code := "runtime"
			var ce *Error
			if errors.As(err, &ce) && ce.Code != "" {
				code = ce.Code
			}
			return o, code
		}
		return Indeterminate, "invalid-outcome"
	}
	switch {
	case errors.Is(err, redis.ErrPoolTimeout):
		return OverloadedBeforeSend, "pool-timeout"
	case errors.Is(err, redis.ErrPoolExhausted):
		return OverloadedBeforeSend, "pool-exhausted"
	case errors.Is(err, redis.ErrClosed):
		return UnavailableBeforeSend, "client-closed"
	}
	if code, ok := dialFailure(err); ok {
		return UnavailableBeforeSend, code
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return serverOutcome(rerr.Error(), mutation)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Indeterminate, "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return Indeterminate, "deadline"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Indeterminate, "eof"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return Indeterminate, "reset"
	case errors.Is(err, net.ErrClosed):
		return Indeterminate, "conn-closed"
	}
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		return Indeterminate, "timeout"
	}
	return Indeterminate, "unclassified"
}

// dialFailure reports failures that can only happen while a connection is
// being established, before any command byte is written.
func dialFailure(err error) (string, bool) {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return "dial", true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "dns", true
	}
	var (
		verr  *tls.CertificateVerificationError
		rherr tls.RecordHeaderError
		aerr  tls.AlertError
		uaerr x509.UnknownAuthorityError
		herr  x509.HostnameError
		cerr  x509.CertificateInvalidError
	)
	if errors.As(err, &verr) || errors.As(err, &rherr) || errors.As(err, &aerr) ||
		errors.As(err, &uaerr) || errors.As(err, &herr) || errors.As(err, &cerr) {
		return "tls-handshake", true
	}
	return "", false
}

// serverOutcome classifies a server error reply by its first token.
func serverOutcome(msg string, mutation bool) (Outcome, string) {
	code := ServerCode(msg)
	switch code {
	case "WRONGTYPE", "CROSSSLOT", "NOPERM", "NOAUTH", "WRONGPASS", "NOUSER", "UNAUTHORIZED":
		// Invalid, and will stay invalid: repeating it cannot help.
		return Rejected, code
	case "READONLY", "OOM", "MISCONF", "NOREPLICAS", "EXECABORT",
		"BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN",
		"MOVED", "ASK", "NOSCRIPT", "BUSYGROUP", "BUSYKEY":
		// The server refused before executing.
		return NotApplied, code
	}
	if !mutation {
		// A read that got an error reply changed nothing.
		return NotApplied, code
	}
	return Indeterminate, code
}

// knownCodes bounds the codes that may appear in errors and metrics.
var knownCodes = map[string]struct{}{
	"ERR": {}, "WRONGTYPE": {}, "CROSSSLOT": {}, "NOPERM": {}, "NOAUTH": {}, "WRONGPASS": {},
	"NOUSER": {}, "UNAUTHORIZED": {}, "READONLY": {}, "OOM": {}, "MISCONF": {}, "NOREPLICAS": {},
	"EXECABORT": {}, "BUSY": {}, "LOADING": {}, "MASTERDOWN": {}, "CLUSTERDOWN": {}, "TRYAGAIN": {},
	"MOVED": {}, "ASK": {}, "NOSCRIPT": {}, "BUSYGROUP": {}, "BUSYKEY": {}, "NOPROTO": {},
	"NOTBUSY": {}, "UNKILLABLE": {}, "NOGOODSLAVE": {}, "NOTREADY": {},
}

// ServerCode extracts the error code (the first token) of a server error
// reply and returns it only when it is one of the known codes; anything else
// becomes "UNKNOWN", so server-controlled text never reaches errors or
// metric labels.
func ServerCode(msg string) string {
	end := 0
	for end < len(msg) && end < 16 && msg[end] >= 'A' && msg[end] <= 'Z' {
		end++
	}
	if end == 0 || (end < len(msg) && msg[end] != ' ') {
		return "UNKNOWN"
	}
	tok := msg[:end]
	if _, ok := knownCodes[tok]; ok {
		return tok
	}
	return "UNKNOWN"
}
