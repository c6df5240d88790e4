package certainty_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/runtime/certainty"
)

// serverErr mimics go-redis' proto.RedisError: a string error with RedisError().
type serverErr string

func (e serverErr) Error() string { return string(e) }
func (serverErr) RedisError()     {}

type outcomer struct{ o certainty.Outcome }

func (o outcomer) Error() string                       { return "custom" }
func (o outcomer) CertaintyOutcome() certainty.Outcome { return o.o }

func TestClassifyTable(t *testing.T) {
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	readTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	cases := []struct {
		name     string
		err      error
		mutation bool
		want     certainty.Outcome
	}{
		{"nil", nil, true, certainty.Applied},
		{"redis nil reply", redis.Nil, false, certainty.Applied},
		{"wrapped redis nil", fmt.Errorf("x: %w", redis.Nil), false, certainty.Applied},
		{"outcomer rejected", outcomer{certainty.Rejected}, true, certainty.Rejected},
		{"wrapped outcomer", fmt.Errorf("guard: %w", outcomer{certainty.OverloadedBeforeSend}), true, certainty.OverloadedBeforeSend},
		{"invalid outcomer", outcomer{0}, true, certainty.Indeterminate},
		{"pool timeout", redis.ErrPoolTimeout, true, certainty.OverloadedBeforeSend},
		{"pool exhausted", redis.ErrPoolExhausted, true, certainty.OverloadedBeforeSend},
		{"client closed", redis.ErrClosed, true, certainty.UnavailableBeforeSend},
		{"dial refused", dialErr, true, certainty.UnavailableBeforeSend},
		{"dns", &net.DNSError{Err: "no such host", Name: "x"}, true, certainty.UnavailableBeforeSend},
		{"WRONGTYPE", serverErr("WRONGTYPE Operation against a key"), true, certainty.Rejected},
		{"NOPERM", serverErr("NOPERM this user has no permissions"), true, certainty.Rejected},
		{"NOAUTH", serverErr("NOAUTH Authentication required."), true, certainty.Rejected},
		{"WRONGPASS", serverErr("WRONGPASS invalid username-password pair"), true, certainty.Rejected},
		{"CROSSSLOT", serverErr("CROSSSLOT Keys in request don't hash to the same slot"), true, certainty.Rejected},
		{"READONLY", serverErr("READONLY You can't write against a read only replica."), true, certainty.NotApplied},
		{"OOM", serverErr("OOM command not allowed when used memory > 'maxmemory'."), true, certainty.NotApplied},
		{"MISCONF", serverErr("MISCONF Redis is configured to save RDB snapshots"), true, certainty.NotApplied},
		{"NOREPLICAS", serverErr("NOREPLICAS Not enough good replicas to write."), true, certainty.NotApplied},
		{"EXECABORT", serverErr("EXECABORT Transaction discarded"), true, certainty.NotApplied},
		{"BUSY", serverErr("BUSY Redis is busy running a script."), true, certainty.NotApplied},
		{"LOADING", serverErr("LOADING Redis is loading the dataset in memory"), false, certainty.NotApplied},
		{"MASTERDOWN", serverErr("MASTERDOWN Link with MASTER is down"), true, certainty.NotApplied},
		{"CLUSTERDOWN", serverErr("CLUSTERDOWN The cluster is down"), true, certainty.NotApplied},
		{"TRYAGAIN", serverErr("TRYAGAIN Multiple keys request during rehashing"), true, certainty.NotApplied},
		{"NOSCRIPT", serverErr("NOSCRIPT No matching script."), true, certainty.NotApplied},
		{"MOVED", serverErr("MOVED 3999 127.0.0.1:6381"), true, certainty.NotApplied},
		{"ERR on read", serverErr("ERR wrong number of arguments"), false, certainty.NotApplied},
		{"ERR on mutation", serverErr("ERR user_script:1: boom"), true, certainty.Indeterminate},
		{"unknown code on mutation", serverErr("WEIRD something"), true, certainty.Indeterminate},
		{"read timeout mutation", readTimeout, true, certainty.Indeterminate},
		{"read timeout read", readTimeout, false, certainty.Indeterminate},
		{"eof", io.EOF, true, certainty.Indeterminate},
		{"unexpected eof", io.ErrUnexpectedEOF, false, certainty.Indeterminate},
		{"reset", &net.OpError{Op: "read", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}, true, certainty.Indeterminate},
		{"canceled", context.Canceled, true, certainty.Indeterminate},
		{"deadline", context.DeadlineExceeded, true, certainty.Indeterminate},
		{"unclassified", errors.New("something odd"), true, certainty.Indeterminate},
		{"unclassified read", errors.New("something odd"), false, certainty.Indeterminate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := certainty.Classify(tc.err, tc.mutation)
			assert.Equal(t, tc.want, got, "got %s", got)
			assert.False(t, got.Retryable() && got.Ambiguous())
		})
	}
}

func TestWrapHidesServerText(t *testing.T) {
	secretish := "WRONGTYPE Operation against key ca:app:prod:secret-digest"
	err := certainty.Wrap("set", serverErr(secretish), true)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "secret-digest")
	assert.Contains(t, err.Error(), "WRONGTYPE")
	assert.Contains(t, err.Error(), "REJECTED")

	var ce *certainty.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, certainty.Rejected, ce.Outcome)
	assert.False(t, ce.Retryable())
	assert.False(t, ce.Ambiguous())
	assert.ErrorIs(t, err, certainty.ErrRejected)
	assert.NotErrorIs(t, err, certainty.ErrIndeterminate)
	// The cause stays reachable for typed inspection.
	var se serverErr
	require.ErrorAs(t, err, &se)

	// Unknown codes never reach the text.
	err = certainty.Wrap("set", serverErr("XSECRETX rest"), true)
	assert.NotContains(t, err.Error(), "XSECRETX")
	assert.ErrorIs(t, err, certainty.ErrIndeterminate)
}

func TestWrapNilAndApplied(t *testing.T) {
	assert.NoError(t, certainty.Wrap("get", nil, false))
	// redis.Nil is a reply: it is passed through untouched.
	assert.ErrorIs(t, certainty.Wrap("get", redis.Nil, false), redis.Nil)
	var ce *certainty.Error
	assert.False(t, errors.As(certainty.Wrap("get", redis.Nil, false), &ce))
	// An *Error is not wrapped twice.
	e1 := certainty.Wrap("set", io.EOF, true)
	assert.Same(t, e1, certainty.Wrap("other", e1, true))
}

func TestWrapBoundsOp(t *testing.T) {
	err := certainty.Wrap("set key\x00value", io.EOF, true)
	assert.Contains(t, err.Error(), "invalid-op")
	err = certainty.Wrap(strings.Repeat("a", 100), io.EOF, true)
	assert.Less(t, len(err.Error()), 80)
}

func TestSentinels(t *testing.T) {
	for _, o := range certainty.Outcomes() {
		s := certainty.Sentinel(o)
		if o == certainty.Applied {
			assert.Nil(t, s)
			continue
		}
		require.NotNil(t, s)
		e := &certainty.Error{Outcome: o}
		assert.ErrorIs(t, e, s)
		assert.Equal(t, o.Retryable(), e.Retryable())
		assert.Equal(t, o.Ambiguous(), e.Ambiguous())
		assert.False(t, e.Retryable() && e.Ambiguous(), o.String())
		assert.Equal(t, o, certainty.Classify(fmt.Errorf("wrapped: %w", e), true))
	}
}

func TestServerCode(t *testing.T) {
	assert.Equal(t, "WRONGTYPE", certainty.ServerCode("WRONGTYPE Operation"))
	assert.Equal(t, "OOM", certainty.ServerCode("OOM"))
	assert.Equal(t, "UNKNOWN", certainty.ServerCode("wrongtype x"))
	assert.Equal(t, "UNKNOWN", certainty.ServerCode(""))
	assert.Equal(t, "UNKNOWN", certainty.ServerCode("WRONGTYPEX: y"))
	assert.Equal(t, "UNKNOWN", certainty.ServerCode("ABCDEFGHIJKLMNOPQRSTUVWXYZ rest"))
}
