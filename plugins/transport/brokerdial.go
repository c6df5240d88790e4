package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
)

// Errors of Dial in a plugin process, matched with errors.Is.
var (
	// ErrDialRefused: the host's broker refused the target (not declared
	// in the Sandbox, or a malformed request). It wraps EACCES, as the
	// sandbox's own refusals do.
	ErrDialRefused = fmt.Errorf("transport: broker refused the dial: %w", syscall.EACCES)
	// ErrBrokerUnavailable: the plugin has no broker socket, or the host
	// end of it is gone.
	ErrBrokerUnavailable = errors.New("transport: connect broker unavailable")
	// ErrBrokerBusy: the host already runs its maximum of dials for this
	// process.
	ErrBrokerBusy = errors.New("transport: connect broker busy")
)

// brokered is set by Serve where the broker exists (unix systems): in a
// plugin process, Dial then always goes through it.
var brokered atomic.Bool

// Dial connects to address ("host:port", network "tcp") for a transport.
// In a plugin process (one run by Serve) it asks the host's connect
// broker, which dials only the targets the transport's Sandbox declared
// (Sandbox.Dial): the sandbox refuses the plugin any internet socket of
// its own. Outside a plugin (a transport run in process, as in tests) it
// is net.Dialer's DialContext. Failures keep net's shapes: an unresolved
// name is a *net.DNSError, a refused connection wraps ECONNREFUSED, a
// deadline is a timeout net.Error; a target the broker refuses wraps
// ErrDialRefused. No byte has left when Dial fails.
func Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if !brokered.Load() {
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}
	return brokerDial(ctx, network, address)
}

// opError wraps err as net's dial errors are; a *net.DNSError stays
// reachable with errors.As.
func opError(address string, err error) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: brokerAddr(address), Err: err}
}

// brokerAddr names a broker target in an error.
type brokerAddr string

func (a brokerAddr) Network() string { return "tcp" }
func (a brokerAddr) String() string  { return string(a) }

// timeoutError is a dial's deadline, a net.Error whose Timeout is true;
// it matches os.ErrDeadlineExceeded.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
func (timeoutError) Is(err error) bool {
	return err == os.ErrDeadlineExceeded || err == context.DeadlineExceeded
}
