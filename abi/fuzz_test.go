package abi

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzMessages runs every message decoder over arbitrary input. The encoding
// is canonical, so whatever a decoder accepts must re-encode to the same
// bytes; and a rejection must be an ErrMalformed, never a panic.
func FuzzMessages(f *testing.F) {
	for _, m := range sampleMessages() {
		f.Add(m.AppendTo(nil))
	}
	f.Add([]byte{byte(TagRateSelectResponse), 0x80, 0x80, 0x80, 0x80, 0x10})
	f.Fuzz(func(t *testing.T, b []byte) {
		accepted := 0
		for _, m := range allMessages() {
			err := m.Unmarshal(b)
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("%T: error %v is not ErrMalformed", m, err)
				}
				continue
			}
			accepted++
			if again := m.AppendTo(nil); !bytes.Equal(again, b) {
				t.Fatalf("%T: decode/encode not canonical:\n in %x\nout %x", m, b, again)
			}
		}
		if accepted > 1 {
			t.Fatalf("%d message types accepted the same bytes", accepted)
		}
	})
}

// FuzzParseFrame: a frame is OK with a body, a *StatusError, or ErrMalformed.
func FuzzParseFrame(f *testing.F) {
	f.Add(AppendOKFrame(nil))
	f.Add(AppendErrorFrame(nil, CodeCorrupt, "bad"))
	f.Add([]byte{9, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		body, err := ParseFrame(b)
		var se *StatusError
		switch {
		case err == nil:
			if len(b) == 0 || b[0] != 0 || !bytes.Equal(body, b[1:]) {
				t.Fatalf("bad OK frame handling for %x", b)
			}
		case errors.As(err, &se):
			if !se.Code.Valid() || se.Code == CodeOK || len(se.Detail) > MaxDetailBytes {
				t.Fatalf("bad status error %+v", se)
			}
			if again := AppendErrorFrame(nil, se.Code, se.Detail); !bytes.Equal(again, b) {
				t.Fatalf("status frame not canonical: %x vs %x", b, again)
			}
		case !errors.Is(err, ErrMalformed):
			t.Fatalf("unexpected error %v", err)
		}
	})
}

// FuzzParseDescription: describe output never panics, errors are typed, and
// an accepted description survives a JSON round trip unchanged.
func FuzzParseDescription(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "describe", "*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDescription(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidDescription) && !errors.Is(err, ErrUnsupportedMajor) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		js, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := ParseDescription(js)
		if err != nil {
			t.Fatalf("re-parse of accepted description failed: %v", err)
		}
		js2, _ := json.Marshal(d2)
		if !bytes.Equal(js, js2) {
			t.Fatalf("description not stable:\n%s\n%s", js, js2)
		}
	})
}
