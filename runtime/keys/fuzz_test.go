package keys

import (
	"errors"
	"strings"
	"testing"

	"github.com/caphost/caphost/runtime/internal/hashslot"
)

// splitParts turns fuzz bytes into parts: each part is preceded by one
// length byte, so the fuzzer controls both count and content.
func splitParts(raw []byte) [][]byte {
	var parts [][]byte
	for len(raw) > 0 {
		n := int(raw[0])
		raw = raw[1:]
		if n > len(raw) {
			n = len(raw)
		}
		parts = append(parts, raw[:n])
		raw = raw[n:]
	}
	return parts
}

func FuzzBuild(f *testing.F) {
	f.Add("cache", "worklog-summary", "entry", 2, 2, false, []byte("\x08tenant-1\x07item-42"), 0)
	f.Add("rate", "login-r3", "dedup", 1, 1, false, []byte("\x04\xc0\xa8\x00\x01"), 0)
	f.Add("idem", "a{b}", "record", 1, 2, false, []byte("\x01{\x01}"), 0)
	f.Add("session", "web", "tombstone", 999, 0, true, []byte("\x00\x00"), 0)
	f.Add("fence", "r", "owner", 1, 2, false, []byte("\x02ab\x01c"), 2)
	f.Add("lease", strings.Repeat("r", 64), "owner", 1000, 3, false, []byte{}, 0)
	f.Add("cache", "r", "entry", 1, 2, false, []byte("\xff"+strings.Repeat("x", 300)), 1)

	b, err := NewBuilder(testConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, capability, region, kind string, kv, hv int, opaque bool, raw []byte, extraKinds int) {
		s := Spec{Capability: Capability(capability), Region: region, KeyVersion: kv, Kind: kind, Parts: splitParts(raw), Opaque: opaque}
		k, err := b.BuildWith(s, hv)
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("error does not match ErrInvalidSpec: %v", err)
			}
			if !k.IsZero() {
				t.Fatal("a key came back with an error")
			}
			for _, p := range s.Parts {
				if len(p) >= 12 && strings.Contains(err.Error(), string(p)) {
					t.Fatalf("error quotes part bytes: %v", err)
				}
			}
			return
		}
		checkKey(t, b, s, k)
		again, err := b.BuildWith(s, hv)
		if err != nil || again != k {
			t.Fatalf("not deterministic: %v", err)
		}

		// Group over the capability's allowlist prefix: always one slot.
		kinds := Capability(capability).Kinds()
		n := 1 + (extraKinds&0xff)%len(kinds)
		ks, err := b.GroupWith(s, hv, kinds[:n]...)
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("group error does not match ErrInvalidSpec: %v", err)
			}
			return // kinds across co-location groups are legitimately rejected
		}
		for _, gk := range ks {
			checkKey(t, b, s, gk)
			if gk.Slot() != ks[0].Slot() {
				t.Fatal("group spans slots")
			}
		}
	})
}

func checkKey(t *testing.T, b *Builder, s Spec, k Key) {
	t.Helper()
	seg, err := parseKey(k.Redis())
	if err != nil {
		t.Fatalf("output does not parse: %v (%q)", err, k.Redis())
	}
	if len(k.Redis()) > b.MaxKeyBytes() {
		t.Fatalf("key is %d bytes", len(k.Redis()))
	}
	if !strings.HasPrefix(k.Redis(), b.Namespace()) {
		t.Fatal("namespace missing")
	}
	if seg.Capability != string(s.Capability) || seg.Region != s.Region || seg.KeyVersion != s.KeyVersion || seg.Kind != k.Kind() {
		t.Fatalf("segments do not round-trip: %+v", seg)
	}
	if k.Slot() != hashslot.Of(k.Redis()) {
		t.Fatal("slot mismatch")
	}
}
