// Command caphost-transport-file is the file-sink notification transport
// as a go-plugin process (package filesink). caphost launches it after
// checking its sha256; run by hand it only prints a notice.
package main

import (
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/plugins/transport/filesink"
)

func main() { transport.Serve(filesink.New) }
