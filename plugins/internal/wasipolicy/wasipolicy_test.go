package wasipolicy

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAllowed(t *testing.T) {
	for _, fn := range []string{"clock_time_get", "random_get", "fd_write", "proc_exit"} {
		assert.True(t, Allowed(fn), fn)
	}
	for _, fn := range []string{"path_open", "sock_accept", "sock_recv", "fd_readdir", "path_unlink_file", ""} {
		assert.False(t, Allowed(fn), fn)
	}
}
