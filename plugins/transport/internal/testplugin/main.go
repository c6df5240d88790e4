//go:build transporttest

// Command testplugin is the plugins/transport tests' plugin (built with
// -tags transporttest). Its setting "mode" chooses what it does:
//
//   - garbage: the reply is not JSON;
//   - bad-code: an ACCEPTED reply whose code breaks the charset;
//   - crash: the process exits in the middle of the call;
//   - wedge: the call never returns, whatever its deadline, while the
//     process and its health service stay up;
//   - probe: a well-behaved transport served as transport.Serve serves
//     one, confined to its declared Sandbox (see probe).
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caphost/caphost/plugins/transport"
)

func main() {
	transport.ServeTestPlugin(build, func(_ context.Context, settings map[string]string, _ []byte) []byte {
		switch settings["mode"] {
		case "garbage":
			return []byte("not json")
		case "bad-code":
			return []byte(`{"outcome":"ACCEPTED","code":"Has Spaces"}`)
		case "crash":
			os.Exit(3)
		case "wedge":
			select {}
		}
		return []byte(`{"outcome":"ACCEPTED","code":"ok"}`)
	})
}

// build makes the probe for mode "probe", nothing for the raw modes.
func build(settings map[string]string) (transport.Transport, error) {
	if settings["mode"] != "probe" {
		return nil, nil
	}
	sb := transport.Sandbox{Network: settings["network"] == "true"}
	if d := settings["allow-dir"]; d != "" {
		sb.ReadDirs = []string{d}
	}
	if p := settings["allow-port"]; p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return nil, &transport.SettingError{Key: "allow-port", Code: "invalid"}
		}
		sb.ConnectTCP = []uint16{uint16(n)}
	}
	return &probe{sb: sb}, nil
}

// probe declares a Sandbox of one readable directory ("allow-dir"), one
// TCP port ("allow-port") and, with "network" = "true", the network base
// set. Each Deliver runs one probe per message part, in order, with the
// part's body as its argument, and answers ACCEPTED with the results
// joined by "." as its code, for example "read-denied.connect-ok":
//
//   - read <path>: read the file: read-ok, read-denied (EACCES, EPERM) or
//     read-failed;
//   - write <path>: create the file: write-ok, write-denied, write-failed;
//   - connect <host:port>: a TCP connection: connect-ok, connect-denied,
//     connect-refused, connect-failed;
//   - bind <host:port>: listen on a classic TCP socket: bind-ok, …;
//   - roots: load the system CA pool: roots-ok, roots-empty,
//     roots-denied, roots-failed.
type probe struct{ sb transport.Sandbox }

func (p *probe) Name() string               { return "probe" }
func (p *probe) Close() error               { return nil }
func (p *probe) Sandbox() transport.Sandbox { return p.sb }

func (p *probe) Deliver(ctx context.Context, m transport.Message) transport.Receipt {
	var codes []string
	for _, part := range m.Parts {
		arg := string(part.Body)
		var err error
		switch part.Name {
		case "read":
			_, err = os.ReadFile(arg)
		case "write":
			err = os.WriteFile(arg, []byte("x"), 0o600)
		case "connect":
			d := &net.Dialer{Timeout: 5 * time.Second}
			var c net.Conn
			if c, err = d.DialContext(ctx, "tcp", arg); err == nil {
				_ = c.Close()
			}
		case "bind":
			var lc net.ListenConfig
			lc.SetMultipathTCP(false)
			var l net.Listener
			if l, err = lc.Listen(ctx, "tcp", arg); err == nil {
				_ = l.Close()
			}
		case "roots":
			var pool *x509.CertPool
			if pool, err = x509.SystemCertPool(); err == nil && pool.Equal(x509.NewCertPool()) {
				codes = append(codes, "roots-empty")
				continue
			}
		default:
			return transport.Receipt{Outcome: transport.RejectedDefinite, Code: "unknown-probe"}
		}
		codes = append(codes, part.Name+"-"+result(err))
	}
	return transport.Receipt{Outcome: transport.Accepted, Code: strings.Join(codes, ".")}
}

func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fs.ErrPermission):
		return "denied"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	}
	return "failed"
}
