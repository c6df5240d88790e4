package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestBareContextError: the caller's own context error, however wrapped,
// means no connection carried the command (a pool turn or a dial was
// still awaited); a socket timeout means it may have been sent. A bare
// DeadlineExceeded was misread as a socket timeout (it implements
// net.Error) and reported INDETERMINATE.
func TestBareContextError(t *testing.T) {
	sock := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for name, c := range map[string]struct {
		err  error
		bare bool
	}{
		"deadline":           {context.DeadlineExceeded, true},
		"wrapped deadline":   {fmt.Errorf("pool: %w", context.DeadlineExceeded), true},
		"canceled":           {context.Canceled, true},
		"socket timeout":     {sock, false},
		"socket and context": {errors.Join(sock, context.DeadlineExceeded), false},
		"other":              {errors.New("x"), false},
	} {
		assert.Equal(t, c.bare, bareContextError(c.err), name)
	}
}
