// Command caphost-transport-webhook is the webhook notification transport
// as a go-plugin process (package webhook). caphost launches it after
// checking its sha256; run by hand it only prints a notice.
package main

import (
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/plugins/transport/webhook"
)

func main() { transport.Serve(webhook.New) }
