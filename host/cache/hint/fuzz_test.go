package hint_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/hint"
)

// openAllocBound is what one Open may allocate at most: the Region string
// and the Scope copy, with room for a pooled HMAC rebuilt after a GC
// emptied the pool, and for the runtime's own noise while memstats are
// read.
const openAllocBound = 16 << 10

// FuzzOpen: Open never panics, fails only with a valid category, never
// allocates past openAllocBound, and whatever it accepts re-seals to
// exactly the same bytes. Without the secret the fuzzer cannot make a
// valid tag, so with resign the input is taken as a frame and the tag is
// appended (by the test's own implementation of the construction): that
// drives the fuzzer through the parser behind the tag as well.
func FuzzOpen(f *testing.F) {
	names, err := filepath.Glob(filepath.Join("testdata", "*.hex"))
	require.NoError(f, err)
	for _, n := range names {
		b := readHex(f, strings.TrimSuffix(filepath.Base(n), ".hex"))
		f.Add(b, false)
		if len(b) > hint.TagBytes {
			f.Add(b[:len(b)-hint.TagBytes], true)
		}
	}
	f.Add([]byte{}, false)
	f.Add([]byte("\xc5HNT\x01"), true)
	c := newCodec(f, secret, t0)
	f.Fuzz(func(t *testing.T, b []byte, resign bool) {
		if resign {
			b = sign(secret, b)
		}
		in := bytes.Clone(b)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, err := c.Open(b)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > openAllocBound {
			t.Fatalf("Open of %d bytes allocated %d bytes", len(b), n)
		}
		if !bytes.Equal(in, b) {
			t.Fatal("Open changed its input")
		}
		if err != nil {
			var he *hint.Error
			if !errors.As(err, &he) || !he.Category.Valid() || he.Category == hint.ErrInvalid {
				t.Fatalf("untyped or invalid failure: %v", err)
			}
			return
		}
		if len(b) > hint.MaxBytes || len(m.Region) > hint.MaxRegionBytes || len(m.Scope) > hint.MaxScopeBytes {
			t.Fatalf("accepted past the bounds: %d bytes", len(b))
		}
		again, err := c.Seal(m)
		if err != nil {
			t.Fatalf("an opened hint does not re-seal: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-seal differs:\n in %x\nout %x", b, again)
		}
	})
}
