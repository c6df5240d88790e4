// Command codec is the reference codec guest, with the schemas the reference
// cache regions (guests/cache-region) store:
//
//   - "user-profile": a JSON record whose stored form moved from v1
//     (full_name, no locale) to v2 (name, locale);
//   - "product" (region products): v2 holds the price as integer cents, v1
//     held it as a decimal string ("12.34"), converted exactly on read;
//   - "search-page" (region search-results): a query, a page number and the
//     page's product ids; v1 only.
//
// Writes use each schema's latest version; reads of older payloads are
// upgraded. It owns only the payload format; envelopes, framing and the
// version gate stay in the host.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o codec.wasm ./guests/codec
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

// c-shared modules have no main entry; the host runs _initialize, which runs
// init, so init is where a guest registers.
func init() { guest.Register(Module()) }

func main() {}

// Profile is the interchange form (and the v2 stored form).
type Profile struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Email  string `json:"email"`
	Locale string `json:"locale"`
}

// profileV1 is the legacy stored form.
type profileV1 struct {
	ID       string `json:"id"`
	FullName string `json:"full_name"`
	Email    string `json:"email"`
}

const defaultLocale = "en"

// Module returns the guest's declarations and handlers.
func Module() *guest.Module {
	return &guest.Module{Name: "codec", Codecs: []guest.Codec{
		{
			Decl:   abi.CodecDecl{SchemaID: "user-profile", WriteVersion: 2, ReadableVersions: []uint32{1, 2}},
			Encode: Encode,
			Decode: Decode,
		},
		jsonSchema("product", readProductV1, readProduct),
		jsonSchema("search-page", readSearchPage),
	}}
}

// strict decodes exactly one JSON object with no unknown fields.
func strict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data")
	}
	return nil
}

func (p *Profile) valid() error {
	if p.ID == "" || p.Name == "" || p.Email == "" || p.Locale == "" {
		return errors.New("id, name, email and locale are required")
	}
	return nil
}

// Encode validates an interchange Profile and writes the canonical v2 payload.
func Encode(value []byte) ([]byte, error) {
	var p Profile
	if err := strict(value, &p); err != nil {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "value: %v", err)
	}
	if err := p.valid(); err != nil {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "value: %v", err)
	}
	return canonical(p), nil
}

// Decode reads a v1 or v2 payload and returns the v2 interchange form.
func Decode(storedVersion uint32, payload []byte) ([]byte, error) {
	var p Profile
	switch storedVersion {
	case 1:
		var old profileV1
		if err := strict(payload, &old); err != nil {
			return nil, guest.Errorf(abi.CodeCorrupt, "v1 payload: %v", err)
		}
		p = Profile{ID: old.ID, Name: old.FullName, Email: old.Email, Locale: defaultLocale}
	case 2:
		if err := strict(payload, &p); err != nil {
			return nil, guest.Errorf(abi.CodeCorrupt, "v2 payload: %v", err)
		}
	default:
		return nil, guest.Errorf(abi.CodeSchemaMismatch, "stored version %d", storedVersion)
	}
	if err := p.valid(); err != nil {
		return nil, guest.Errorf(abi.CodeCorrupt, "payload: %v", err)
	}
	return canonical(p), nil
}
