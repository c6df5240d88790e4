package conformance

import (
	"embed"

	"github.com/caphost/caphost/abi"
)

// cards holds the capability card of every guest kind, cards/<kind>.md, in
// the 13-item format that host/capability.ParseCard reads. They live here,
// next to the suite that checks each kind, so that the binary carries the
// card of every kind it can load and a kind cannot be added without one
// (TestKindCards). Package host parses them and checks the evidence they
// name: plugins may not import host. Relative links in a card are relative
// to this directory (plugins/conformance/cards in the module).
//
// An embed.FS is read-only, so this is no mutable package state.
//
//go:embed cards/*.md
var cards embed.FS

// KindCard returns the capability card of guest kind k, and false when k
// has none — which includes every value outside abi's closed set of kinds,
// so a caller cannot name an arbitrary file. The bytes are a fresh copy the
// caller may keep or modify.
func KindCard(k abi.Kind) ([]byte, bool) {
	if !k.Valid() {
		return nil, false
	}
	b, err := cards.ReadFile("cards/" + string(k) + ".md")
	if err != nil {
		return nil, false
	}
	return b, true
}
