package transport

import (
	"context"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// handshake is what host and plugin must agree on before go-plugin connects
// them. The cookie is not a secret: it stops a transport binary from being
// run by hand as if it were a program.
func handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  1,
		MagicCookieKey:   "CAPHOST_TRANSPORT_PLUGIN",
		MagicCookieValue: "d1c0a5e2-transport-v1",
	}
}

// pluginKey is the one plugin a transport binary serves.
const pluginKey = "transport"

const (
	serviceName     = "caphost.transport.v1.Transport"
	methodConfigure = "/" + serviceName + "/Configure"
	methodDeliver   = "/" + serviceName + "/Deliver"
)

// wireServer is the service's handler type (grpc checks the registered
// implementation against it).
type wireServer interface {
	configure(ctx context.Context, req []byte) ([]byte, error)
	deliver(ctx context.Context, req []byte) ([]byte, error)
}

func unary(call func(s wireServer, ctx context.Context, req []byte) ([]byte, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.BytesValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		out, err := call(srv.(wireServer), ctx, in.GetValue())
		if err != nil {
			return nil, err
		}
		return wrapperspb.Bytes(out), nil
	}
}

// serviceDesc is written by hand instead of generated: the messages are
// BytesValue, so there is nothing for protoc to generate.
func serviceDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*wireServer)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Configure", Handler: unary(wireServer.configure)},
			{MethodName: "Deliver", Handler: unary(wireServer.deliver)},
		},
		Metadata: "caphost/transport/v1",
	}
}

// grpcPlugin is go-plugin's view of a transport: the plugin side registers
// the service, the host side gets the connection.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	srv wireServer // plugin side only
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(serviceDesc(), p.srv)
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return c, nil
}
