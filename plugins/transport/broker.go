package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// The connect broker. A network transport's plugin never makes an
// internet socket of its own: its sandbox refuses socket(2) for AF_INET
// and AF_INET6 (and connect(2) altogether). It asks the host instead, over
// a unix SOCK_SEQPACKET socket pair the host creates for each plugin
// process and passes as the child's descriptor 3 (brokerFD), to dial one
// of the "host:port" targets its Sandbox declared (Sandbox.Dial). The
// host records those targets from the Configure reply, once per process,
// resolves and dials only them, and hands back the connected socket with
// SCM_RIGHTS. docs/transports.md, "The connect broker", is the spec.
//
// Request (plugin → host), one datagram of exactly 10+n bytes:
//
//	[0]     dialOp (1)
//	[1:5]   request id, big-endian, non-zero
//	[5:9]   timeout in milliseconds, big-endian, 1..maxDialTimeout
//	[9]     n, the address's length, 1..MaxDialTargetBytes
//	[10:]   the address, "host:port", exactly as declared
//
// Reply (host → plugin), one datagram of 6 bytes, carrying the connected
// socket as SCM_RIGHTS when the status is dialOK:
//
//	[0]     dialOp (1)
//	[1:5]   the request's id (0 when the request was too short to carry one)
//	[5]     a dialStatus
const (
	dialOp          = 1
	dialHeaderBytes = 10
	dialReplyBytes  = 6
	// MaxDialTargets bounds how many targets a Sandbox declares.
	MaxDialTargets = 8
	// MaxDialTargetBytes bounds one "host:port" target.
	MaxDialTargetBytes = 255
	maxDialRequest     = dialHeaderBytes + MaxDialTargetBytes
	// maxDialTimeout bounds one dial, whatever the plugin asks.
	maxDialTimeout = 30 * time.Second
	// maxDialsInFlight bounds the dials one plugin process has running
	// on the host at once; more are answered dialBusy at once.
	maxDialsInFlight = 8
	// brokerWriteTimeout bounds writing one reply: a plugin that does
	// not read its socket loses the reply (and the socket), never holds
	// a host goroutine.
	brokerWriteTimeout = time.Second
	// brokerFD is the broker socket's descriptor in the plugin process:
	// exec.Cmd.ExtraFiles[0]. A fixed number, so the plugin's
	// environment stays go-plugin's handshake variables only.
	brokerFD = 3
)

// dialStatus is the outcome of one dial request.
type dialStatus uint8

const (
	dialOK          dialStatus = iota // connected: the socket comes with the reply
	dialNotDeclared                   // not one of the targets frozen at configure
	dialInvalid                       // a malformed request
	dialBusy                          // maxDialsInFlight dials are running
	dialDNS                           // the host could not resolve the name
	dialRefused                       // the server refused the connection
	dialTimeout                       // the deadline passed before a connection
	dialFailed                        // any other failure to connect
	dialAddress                       // the name resolved only to addresses of classes it did not resolve to at configure
	dialStatusCount
)

// String is a bounded code for logs.
func (s dialStatus) String() string {
	switch s {
	case dialOK:
		return "ok"
	case dialNotDeclared:
		return "not-declared"
	case dialInvalid:
		return "invalid"
	case dialBusy:
		return "busy"
	case dialDNS:
		return "dns-failed"
	case dialRefused:
		return "connect-refused"
	case dialTimeout:
		return "connect-timeout"
	case dialFailed:
		return "connect-failed"
	case dialAddress:
		return "address-refused"
	}
	return "status-" + strconv.Itoa(int(s))
}

// dialRequest is one decoded request.
type dialRequest struct {
	id      uint32
	timeout time.Duration
	addr    string
}

// errDialRequest wraps a request the host refuses to read.
var errDialRequest = errors.New("transport: broker: invalid dial request")

// decodeDialRequest decodes one request datagram strictly: the exact
// length, a known op, a non-zero id, a timeout within bounds and a
// well-formed target. It returns the id it could read (0 when none) with
// an error, so the refusal can still be addressed.
func decodeDialRequest(b []byte) (dialRequest, error) {
	bad := func(id uint32, why string) (dialRequest, error) {
		return dialRequest{id: id}, fmt.Errorf("%w: %s", errDialRequest, why)
	}
	if len(b) < 5 {
		return bad(0, "short")
	}
	id := binary.BigEndian.Uint32(b[1:5])
	switch {
	case b[0] != dialOp:
		return bad(id, "unknown op")
	case id == 0:
		return bad(0, "zero id")
	case len(b) < dialHeaderBytes:
		return bad(id, "short")
	}
	ms := binary.BigEndian.Uint32(b[5:9])
	n := int(b[9])
	switch {
	case ms == 0 || time.Duration(ms)*time.Millisecond > maxDialTimeout:
		return bad(id, "timeout out of range")
	case n == 0 || len(b) != dialHeaderBytes+n:
		return bad(id, "address length")
	}
	addr := string(b[dialHeaderBytes:])
	if !ValidDialTarget(addr) {
		return bad(id, "address")
	}
	return dialRequest{id: id, timeout: time.Duration(ms) * time.Millisecond, addr: addr}, nil
}

// encodeDialRequest is the plugin side's request; addr is checked by the
// caller.
func encodeDialRequest(r dialRequest) []byte {
	b := make([]byte, dialHeaderBytes+len(r.addr))
	b[0] = dialOp
	binary.BigEndian.PutUint32(b[1:5], r.id)
	binary.BigEndian.PutUint32(b[5:9], uint32(r.timeout/time.Millisecond))
	b[9] = byte(len(r.addr))
	copy(b[dialHeaderBytes:], r.addr)
	return b
}

func encodeDialReply(id uint32, s dialStatus) []byte {
	b := make([]byte, dialReplyBytes)
	b[0] = dialOp
	binary.BigEndian.PutUint32(b[1:5], id)
	b[5] = byte(s)
	return b
}

// decodeDialReply is the plugin side's decoder of a reply.
func decodeDialReply(b []byte) (uint32, dialStatus, error) {
	if len(b) != dialReplyBytes || b[0] != dialOp || b[5] >= byte(dialStatusCount) {
		return 0, 0, errors.New("transport: broker: invalid reply")
	}
	return binary.BigEndian.Uint32(b[1:5]), dialStatus(b[5]), nil
}

// ValidDialTarget reports whether s can be a Sandbox.Dial target: at
// most MaxDialTargetBytes of "host:port", the host a DNS name
// ([A-Za-z0-9_.-], labels of 1..63 bytes not starting or ending with '-')
// or an IP address (IPv6 in brackets), the port 1..65535 in decimal
// without leading zeros.
func ValidDialTarget(s string) bool {
	if len(s) == 0 || len(s) > MaxDialTargetBytes {
		return false
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || net.JoinHostPort(host, port) != s {
		return false
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || strconv.FormatUint(n, 10) != port {
		return false
	}
	if strings.Contains(host, ":") {
		ip := net.ParseIP(host)
		return ip != nil && ip.To4() == nil && !strings.Contains(host, "%")
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
