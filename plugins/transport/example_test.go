package transport_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
