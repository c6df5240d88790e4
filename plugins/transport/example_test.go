package transport_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/caphost/caphost/plugins/transport"
)

// ExampleLaunch runs the file-sink transport as a plugin process and
// delivers one message twice: the second attempt of the same intent is
// deduplicated by the sink.
func ExampleLaunch() {
	bin := filepath.Join(binDir, "file") // built by TestMain, as `make transports` builds build/transports/file
	data, err := os.ReadFile(bin)
	if err != nil {
		fmt.Println(err)
		return
	}
	sum := sha256.Sum256(data)
	dir, err := os.MkdirTemp("", "outbox-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	p, err := transport.Launch(context.Background(), transport.Config{
		Name:     "file",
		Path:     bin,
		SHA256:   hex.EncodeToString(sum[:]),
		Settings: map[string]string{"dir": dir},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	rcpt, _ := transport.NewRecipient("ada@example.com")
	m := transport.Message{IntentID: "intent-42", Attempt: 1, Channel: "email", Recipient: rcpt,
		Parts: []transport.Part{{Name: "text", ContentType: "text/plain", Body: []byte("Hello, Ada.")}}}
	for attempt := uint32(1); attempt <= 2; attempt++ {
		m.Attempt = attempt
		r := p.Deliver(context.Background(), m)
		fmt.Println(attempt, r.Outcome, r.Code, r.ProviderRef, m.Recipient)
	}
	// Output:
	// 1 ACCEPTED file-written intent-42.json ***
	// 2 ACCEPTED file-exists intent-42.json ***
}

// ExampleEnv is how a transport makes its connections: through the Env its
// Factory gets. In a plugin process, Serve's Env asks the host's connect
// broker for one of the targets the transport's Sandbox declared; the
// zero Env, for a transport built in process (a test, a benchmark), dials
// directly.
func ExampleEnv() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			_, _ = c.Write([]byte("220 ready\r\n"))
			_ = c.Close()
		}
	}()

	var env transport.Env // in process: a direct dial
	conn, err := env.DialContext(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	greeting, err := bufio.NewReader(conn).ReadString('\n')
	fmt.Printf("%q %v\n", greeting, err)
	// Output:
	// "220 ready\r\n" <nil>
}
