// Command caphost-transport-smtp is the SMTP notification transport as a
// go-plugin process (package smtp). caphost launches it after checking its
// sha256; run by hand it only prints a notice.
package main

import (
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/plugins/transport/smtp"
)

func main() { transport.Serve(smtp.New) }
