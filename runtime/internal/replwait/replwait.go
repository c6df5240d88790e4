// Package replwait carries the one permission the command guard checks
// before it admits WAIT: a grant on the call's context, which only the
// runtime's packages can create (this package is internal to runtime/).
//
// The program executor puts a grant on the context of exactly one
// pipeline — a catalog program followed by WAIT on the same connection —
// with the bounds the capability configured. The guard refuses WAIT
// without a grant, with more replicas than granted, with a timeout of 0
// (block forever) or above the grant, so a WAIT never reaches the wire
// from anywhere else.
package replwait

import (
	"context"
	"time"
)

// Hard bounds of every grant: no configuration may ask for more.
const (
	// MaxAcks is the largest replica count a WAIT may ask for.
	MaxAcks = 16
	// MaxTimeout is the longest a WAIT may block a pooled connection.
	MaxTimeout = 5 * time.Second
)

// Grant bounds the WAIT one call may send.
type Grant struct {
	// Acks is the most replicas the WAIT may ask for (1..MaxAcks).
	Acks int
	// Timeout is the longest timeout it may carry (1ms..MaxTimeout).
	Timeout time.Duration
}

// Valid reports whether g is within the hard bounds.
func (g Grant) Valid() bool {
	return g.Acks >= 1 && g.Acks <= MaxAcks && g.Timeout >= time.Millisecond && g.Timeout <= MaxTimeout
}

type key struct{}

// With returns ctx carrying g. An invalid grant is not attached.
func With(ctx context.Context, g Grant) context.Context {
	if !g.Valid() {
		return ctx
	}
	return context.WithValue(ctx, key{}, g)
}

// From returns the grant ctx carries.
func From(ctx context.Context) (Grant, bool) {
	if ctx == nil {
		return Grant{}, false
	}
	g, ok := ctx.Value(key{}).(Grant)
	return g, ok
}
