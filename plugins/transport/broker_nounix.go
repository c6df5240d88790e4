//go:build !unix

package transport

import (
	"context"
	"log/slog"
	"net"
	"os"
)

// broker does nothing where there is no unix socket pair to pass (and
// no sandbox either): a plugin there dials for itself (Dial) and the
// targets it declares are not enforced.
type broker struct{ onRefuse func(reason string) }

// brokerRequired: there is no broker here.
const brokerRequired = false

func newBroker(*slog.Logger) (*broker, *os.File, error) { return &broker{}, nil, nil }

func (*broker) freeze([]string) {}
func (*broker) start()          {}
func (*broker) close()          {}

// startPluginBroker leaves Dial dialling directly.
func startPluginBroker() {}

func brokerDial(_ context.Context, _, address string) (net.Conn, error) {
	return nil, opError(address, ErrBrokerUnavailable)
}
