//go:build !unix

package transport

import (
	"context"
	"log/slog"
	"os"
)

// broker does nothing where there is no unix socket pair to pass (and
// no sandbox either): a plugin there dials for itself (the zero Env) and the
// targets it declares are not enforced.
type broker struct{ onRefuse func(reason string) }

// brokerRequired: there is no broker here.
const brokerRequired = false

func newBroker(*slog.Logger) (*broker, *os.File, error) { return &broker{}, nil, nil }

func (*broker) freeze(context.Context, []string) {}
func (*broker) start()                           {}
func (*broker) close()                           {}

// pluginEnv is the zero Env: a plugin here dials for itself.
func pluginEnv() Env { return Env{} }
