package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
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

// DialFunc connects to address ("host:port") over network ("tcp").
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Env is what a transport's Factory gets from the process it runs in. The
// zero Env is a transport built in process (tests, benchmarks): it dials
// directly.
type Env struct {
	// Dial makes the transport's connections; nil dials directly
	// (net.Dialer). In a plugin process (Serve) it asks the host's
	// connect broker, which dials only the targets the transport's
	// Sandbox declared (Sandbox.Dial): the sandbox refuses the plugin any
	// internet socket of its own. Failures keep net's shapes: an
	// unresolved name is a *net.DNSError, a refused connection wraps
	// ECONNREFUSED, a deadline is a timeout net.Error; a target the
	// broker refuses wraps ErrDialRefused; a plugin without its broker
	// where one is required (Linux) gets ErrBrokerUnavailable. No byte
	// has left when a dial fails.
	Dial DialFunc
}

// DialContext is e.Dial, or net.Dialer's DialContext when e.Dial is nil;
// its method value fits http.Transport.DialContext.
func (e Env) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if e.Dial == nil {
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}
	return e.Dial(ctx, network, address)
}

// unavailable is the Dial of a plugin process that needs a broker and
// has none.
func unavailable(_ context.Context, _, address string) (net.Conn, error) {
	return nil, opError(address, ErrBrokerUnavailable)
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
