package transport

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestClassOf pins the address classes the connect broker keeps a
// declared name within.
func TestClassOf(t *testing.T) {
	for addr, want := range map[string]addrClass{
		"203.0.113.7": classPublic, "8.8.8.8": classPublic, "2001:db8::1": classPublic,
		"10.1.2.3": classPrivate, "172.16.0.1": classPrivate, "192.168.1.1": classPrivate,
		"100.64.0.1": classPrivate, "100.127.255.254": classPrivate, "fd12::1": classPrivate,
		"127.0.0.1": classLoopback, "127.9.9.9": classLoopback, "::1": classLoopback, "::ffff:127.0.0.1": classLoopback,
		"169.254.169.254": classLinkLocal, "fe80::1": classLinkLocal, "::ffff:169.254.169.254": classLinkLocal,
		"0.0.0.0": 0, "::": 0, "0.1.2.3": 0, "224.0.0.1": 0, "ff02::1": 0, "255.255.255.255": 0,
	} {
		assert.Equal(t, want, classOf(netip.MustParseAddr(addr)), addr)
	}
	assert.Equal(t, "public,loopback", (classPublic | classLoopback).String())
	assert.Equal(t, "none", addrClass(0).String())
}

// TestFreezeTarget: a literal is its own class; a name gets the classes
// it resolves to, public when it does not resolve (or resolves only to
// addresses never dialled).
func TestFreezeTarget(t *testing.T) {
	answer := func(addrs ...string) lookupFunc {
		return func(context.Context, string) ([]netip.Addr, error) {
			if len(addrs) == 0 {
				return nil, errors.New("no such host")
			}
			var out []netip.Addr
			for _, a := range addrs {
				out = append(out, netip.MustParseAddr(a))
			}
			return out, nil
		}
	}
	ctx := context.Background()
	ft := freezeTarget(ctx, answer(), "[::ffff:10.0.0.1]:25")
	assert.Equal(t, frozenTarget{port: 25, literal: netip.MustParseAddr("10.0.0.1"), classes: classPrivate, resolved: true}, ft)
	ft = freezeTarget(ctx, answer("127.0.0.1", "10.0.0.2"), "relay.internal:587")
	assert.Equal(t, frozenTarget{host: "relay.internal", port: 587, classes: classLoopback | classPrivate, resolved: true}, ft)
	ft = freezeTarget(ctx, answer(), "hooks.example:443")
	assert.Equal(t, frozenTarget{host: "hooks.example", port: 443, classes: classPublic}, ft)
	ft = freezeTarget(ctx, answer("0.0.0.0"), "hooks.example:443")
	assert.Equal(t, classPublic, ft.classes)
	assert.False(t, ft.resolved)
}
