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

import "github.com/caphost/caphost/abi/guest"

// c-shared modules have no main entry; the host runs _initialize, which runs
// init, so init is where a guest registers.
func init() { guest.Register(Module()) }

func main() {}

// Module returns the guest's declarations and handlers.
func Module() *guest.Module {
	return &guest.Module{Name: "codec", Codecs: []guest.Codec{
		jsonSchema("user-profile", readProfileV1, readProfile),
		jsonSchema("product", readProductV1, readProduct),
		jsonSchema("search-page", readSearchPage),
	}}
}
