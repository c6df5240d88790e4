package cache

import (
	"strconv"
	"unicode/utf8"

	"github.com/caphost/caphost/runtime/keys"
)

// Key bounds: the key builder's part bounds, and the ABI's attribute bounds
// for attributes a cache-region guest canonicalises.
const (
	MaxKeyParts      = keys.MaxParts
	MaxKeyPartBytes  = keys.MaxPartBytes
	MaxAttrs         = 64
	MaxAttrNameBytes = 128
	MaxAttrValBytes  = 1024
)

// Attr is one request attribute for a region whose cache-region guest
// canonicalises keys.
type Attr struct {
	Name, Value string
}

// Key names one entry of a region. A region declared with a canonicaliser
// (a cache-region guest's region) takes attributes, which the guest turns
// into the entry's logical parts; any other region takes the parts
// themselves. Either way the parts only ever reach Redis as an HMAC digest
// inside a key.
type Key struct {
	parts []string
	attrs []Attr
	attr  bool
}

// Parts returns the key with these logical parts (1..16, each ≤ 1 KiB).
func Parts(parts ...string) Key { return Key{parts: parts} }

// Attrs returns the key a region's canonicaliser derives from attrs
// (≤ 64; names ≤ 128 and values ≤ 1024 bytes of valid UTF-8).
func Attrs(attrs ...Attr) Key { return Key{attrs: attrs, attr: true} }

// check bounds k for a region that canonicalises (canon) or not.
func (k Key) check(canon bool) error {
	switch {
	case canon && !k.attr:
		return keyErr("the region canonicalises attributes: use cache.Attrs")
	case !canon && k.attr:
		return keyErr("the region has no canonicaliser: use cache.Parts")
	case canon:
		if len(k.attrs) > MaxAttrs {
			return keyErr(strconv.Itoa(len(k.attrs)) + " attributes, at most " + strconv.Itoa(MaxAttrs))
		}
		for _, a := range k.attrs {
			if len(a.Name) == 0 || len(a.Name) > MaxAttrNameBytes || len(a.Value) > MaxAttrValBytes ||
				!utf8.ValidString(a.Name) || !utf8.ValidString(a.Value) {
				return keyErr("an attribute is empty, too long or not UTF-8")
			}
		}
		return nil
	}
	if len(k.parts) == 0 || len(k.parts) > MaxKeyParts {
		return keyErr("want 1.." + strconv.Itoa(MaxKeyParts) + " parts")
	}
	for _, p := range k.parts {
		if len(p) > MaxKeyPartBytes {
			return keyErr("a part exceeds " + strconv.Itoa(MaxKeyPartBytes) + " bytes")
		}
	}
	return nil
}

// keyError is an ErrInvalidKey with a reason that never quotes key material.
type keyError struct{ reason string }

func keyErr(reason string) error         { return &keyError{reason} }
func (e *keyError) Error() string        { return "cache: invalid key: " + e.reason }
func (e *keyError) Is(target error) bool { return target == ErrInvalidKey }
