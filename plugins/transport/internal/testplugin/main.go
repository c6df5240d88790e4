//go:build transporttest

// Command testplugin is a deliberately misbehaving transport plugin for
// the plugins/transport tests (built with -tags transporttest). Its
// setting "mode" chooses the misbehaviour:
//
//   - garbage: the reply is not JSON;
//   - bad-code: an ACCEPTED reply whose code breaks the charset;
//   - crash: the process exits in the middle of the call;
//   - wedge: the call never returns, whatever its deadline, while the
//     process and its health service stay up.
package main

import (
	"context"
	"os"

	"github.com/caphost/caphost/plugins/transport"
)

func main() {
	transport.ServeTestPlugin(func(_ context.Context, settings map[string]string, _ []byte) []byte {
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
