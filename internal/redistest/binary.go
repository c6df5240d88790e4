package redistest

import (
	"fmt"
	"os/exec"
	"testing"
)

// installHint is the message every missing-prerequisite failure carries, so a
// fresh machine tells the engineer exactly what to do instead of skipping.
const installHint = "redis-server not found: install it with `apt-get install -y redis-server`"

// Binary returns the redis-server path or fails t with an install hint.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := lookBinary()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lookBinary finds redis-server on PATH; its error carries the install hint.
func lookBinary() (string, error) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("%s (%w)", installHint, err)
	}
	return p, nil
}
