// Package raw is a synthetic package for the archtest self-check. Every
// exported signature marked "violation" must be reported; the others must not.
package raw

import "context"

// Key stands in for keys.Key.
type Key struct{}

// Client is an exported type.
type Client struct{}

// Conn is an exported type.
type Conn struct{}

type hidden struct{}

// Runner is an exported interface.
type Runner interface {
	Run(ctx context.Context, args ...any) error // violation
	Name() string
}

// RawFunc is an exported function type.
type RawFunc func(argv []byte) // violation

func Do(ctx context.Context, args ...any) error                    { return nil } // violation
func DoIface(ctx context.Context, args ...interface{}) error       { return nil } // violation
func (c *Client) Do(ctx context.Context, args ...any) error        { return nil } // violation
func (c Client) Pipeline(ctx context.Context, cmds []any) error    { return nil } // violation
func Get(ctx context.Context, key string) error                    { return nil } // violation
func MGet(ctx context.Context, keys []string) error                { return nil } // violation
func Del(ctx context.Context, Keys ...string) error                { return nil } // violation
func Eval(ctx context.Context, script string, args []string) error { return nil } // two violations
func RunLua(ctx context.Context, lua []byte) error                 { return nil } // violation
func Exec(ctx context.Context, command string) error               { return nil } // violation
func (c *Conn) Send(cmd string) error                              { return nil } // violation

// Fine: typed key, logical identifiers, non-raw names, unexported.
func Lookup(ctx context.Context, k Key, region string) error   { return nil }
func Execute(ctx context.Context, idempotencyKey string) error { return nil }
func Errorf(format string, n int) error                        { return nil }
func With(ctx context.Context, parts ...[]byte) error          { return nil }
func do(ctx context.Context, args ...any) error                { return nil }
func (h *hidden) Do(ctx context.Context, args ...any) error    { return nil }
func (c *Client) get(key string) error                         { return nil }
func Count(ctx context.Context, keys int) error                { return nil }

// Printf-style wrappers format rather than execute; anything else variadic-any is flagged.
func Errorf(code int, format string, args ...any) error { return nil }
func Logf(msg string, args ...any)                      {} // violation: not a format wrapper
