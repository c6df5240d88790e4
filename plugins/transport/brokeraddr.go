package transport

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// DNS rebinding. The broker dials only declared names, but a name is
// whatever its DNS says at the moment of the dial: a webhook URL whose
// zone an attacker controls can answer a public address when the host
// starts and 127.0.0.1, 169.254.169.254 (a cloud's metadata service) or
// an internal address later, on the declared port. So the broker resolves
// each declared name once when it freezes the targets and records the
// classes of the addresses it got (addrClass); a dial then connects only
// to addresses of those classes. A name that was public stays public; an
// internal name (a relay on the private network, localhost in tests)
// keeps working. A name that did not resolve at freeze may reach public
// addresses only. An IP literal target is its own address, never
// resolved. Addresses no class covers (unspecified, multicast, broadcast,
// 0.0.0.0/8) are never dialled: connecting to 0.0.0.0 reaches the
// local host.

// addrClass is a set of address classes.
type addrClass uint8

const (
	// classPublic: global unicast not in another class.
	classPublic addrClass = 1 << iota
	// classPrivate: RFC 1918, RFC 4193 (fc00::/7) and the shared
	// address space of RFC 6598 (100.64.0.0/10, carrier-grade NAT).
	classPrivate
	// classLoopback: 127.0.0.0/8 and ::1.
	classLoopback
	// classLinkLocal: 169.254.0.0/16 (where clouds serve instance
	// metadata) and fe80::/10.
	classLinkLocal
)

// freezeLookupTimeout bounds resolving one declared name at freeze.
const freezeLookupTimeout = 5 * time.Second

var (
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10")
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	broadcast   = netip.AddrFrom4([4]byte{255, 255, 255, 255})
)

// classOf is a's class, or 0 for an address the broker never dials. An
// IPv4-mapped IPv6 address is classed as its IPv4 address.
func classOf(a netip.Addr) addrClass {
	a = a.Unmap()
	switch {
	case !a.IsValid(), a.IsUnspecified(), a.IsMulticast(), a == broadcast, a.Is4() && thisNetwork.Contains(a):
		return 0
	case a.IsLoopback():
		return classLoopback
	case a.IsLinkLocalUnicast():
		return classLinkLocal
	case a.IsPrivate(), a.Is4() && sharedSpace.Contains(a):
		return classPrivate
	case a.IsGlobalUnicast():
		return classPublic
	}
	return 0
}

// String names the classes in s, for logs.
func (s addrClass) String() string {
	var names []string
	for _, c := range []struct {
		c    addrClass
		name string
	}{{classPublic, "public"}, {classPrivate, "private"}, {classLoopback, "loopback"}, {classLinkLocal, "link-local"}} {
		if s&c.c != 0 {
			names = append(names, c.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// lookupFunc resolves a host name to its addresses.
type lookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// frozenTarget is one declared target as the broker dials it.
type frozenTarget struct {
	host string
	port uint16
	// literal is the target's address when its host is an IP address.
	literal netip.Addr
	// classes are the classes the name may reach: those it resolved to at
	// freeze (public when it did not resolve), a literal's own.
	classes addrClass
	// resolved is whether the name resolved at freeze.
	resolved bool
}

// freezeTarget resolves target ("host:port", a ValidDialTarget) with
// lookup, bounded by ctx and freezeLookupTimeout, and records what it
// may reach.
func freezeTarget(ctx context.Context, lookup lookupFunc, target string) frozenTarget {
	ap, err := netip.ParseAddrPort(target)
	if err == nil {
		return frozenTarget{port: ap.Port(), literal: ap.Addr().Unmap(), classes: classOf(ap.Addr()), resolved: true}
	}
	i := strings.LastIndexByte(target, ':')
	host := target[:i]
	port, _ := strconv.ParseUint(target[i+1:], 10, 16)
	ft := frozenTarget{host: host, port: uint16(port), classes: classPublic}
	ctx, cancel := context.WithTimeout(ctx, freezeLookupTimeout)
	defer cancel()
	addrs, err := lookup(ctx, host)
	if err != nil || len(addrs) == 0 {
		return ft
	}
	var classes addrClass
	for _, a := range addrs {
		classes |= classOf(a)
	}
	if classes != 0 {
		ft.classes, ft.resolved = classes, true
	}
	return ft
}

// allowed returns the addresses of addrs the target may connect to, in
// their order.
func (ft frozenTarget) allowed(addrs []netip.Addr) []netip.Addr {
	var ok []netip.Addr
	for _, a := range addrs {
		if c := classOf(a); c != 0 && ft.classes&c != 0 {
			ok = append(ok, a.Unmap())
		}
	}
	return ok
}
