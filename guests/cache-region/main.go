// Command cache-region is the reference cache-region guest: region "products"
// (product detail by id and locale, stale-if-error, a process-local L1,
// stored with codec "product") and region "search-results" (query results,
// short TTLs, no stale serving, stored with codec "search-page"); both codecs
// are guests/codec's. It canonicalises request attributes into bounded
// logical key parts and decides admission; keys, HMACs, TTL enforcement and
// Redis stay in the host.
//
// Attributes are what the host's HTTP sidecar passes for
// GET /v1/cache/{region}/{key}: the path key as attribute "key" (a product id,
// a search query), each query parameter as an attribute of its name
// ("locale", "page").
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o cache-region.wasm ./guests/cache-region
//
// The policy revision is a build-time knob used to exercise hot swaps that
// change a region's policy: building with -ldflags=-X=main.policyRevision=v2
// declares the products region with a soft TTL twice as long (any "vN"
// multiplies it by N, up to the hard TTL; anything else is revision 1).
package main

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

// c-shared modules have no main entry; the host runs _initialize, which runs
// init, so init is where a guest registers.
func init() { guest.Register(Module()) }

func main() {}

// policyRevision is set at link time (-X=main.policyRevision=v2); see the
// package comment.
var policyRevision = "v1"

// productsSoftTTLMs is the products region's soft TTL under policyRevision;
// a malformed value falls back to revision 1 so a bad build flag never
// produces an invalid describe.
func productsSoftTTLMs() int64 {
	const soft, hard = 30_000, 600_000
	n, err := strconv.ParseUint(strings.TrimPrefix(policyRevision, "v"), 10, 8)
	if err != nil || n == 0 || !strings.HasPrefix(policyRevision, "v") {
		n = 1
	}
	return int64(min(soft*n, hard))
}

// maxQuery bounds the normalised search query kept in a key part; longer
// queries are not cached (their hit rate is negligible).
const maxQuery = 256

// Module returns the guest's declarations and handlers.
func Module() *guest.Module {
	return &guest.Module{Name: "cache-region", Regions: []guest.CacheRegion{
		{
			// Product detail is read far more often than it changes: an L1
			// absorbs hot products, the soft TTL bounds how long a price
			// change takes to show, and stale-if-error serves the last
			// price while the catalogue is down, up to the hard TTL.
			Decl: abi.RegionDecl{ID: "products", KeyVersion: 1, SoftTTLMs: productsSoftTTLMs(), HardTTLMs: 600_000,
				NegativeTTLMs: 5_000, JitterPercent: 10, StaleIfError: true, L1: true, MaxBytes: 64 << 10, Codec: "product"},
			Canonicalize: Products,
			Admit:        admitUnder(64 << 10),
		},
		{
			Decl: abi.RegionDecl{ID: "search-results", KeyVersion: 1, SoftTTLMs: 5_000, HardTTLMs: 30_000,
				NegativeTTLMs: 1_000, JitterPercent: 20, MaxBytes: 256 << 10, Codec: "search-page"},
			Canonicalize: Search,
			Admit:        admitSearch,
		},
	}}
}

func attr(attrs []abi.Attr, name string) string {
	for _, a := range attrs {
		if a.Name == name {
			return a.Value
		}
	}
	return ""
}

// Products keys a product by id (attribute "key") and locale. The id must be
// a short alphanumeric token; the locale defaults to "en" so equivalent
// requests share an entry. The parts are what they were when the id came as
// attribute "id", so entries written then stay valid (key version 1).
func Products(attrs []abi.Attr) ([]string, error) {
	id := attr(attrs, "key")
	if id == "" || len(id) > 64 || strings.IndexFunc(id, func(r rune) bool {
		return r > unicode.MaxASCII || !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-')
	}) >= 0 {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "id must be 1-64 letters, digits or '-'")
	}
	locale := strings.ToLower(attr(attrs, "locale"))
	if locale == "" {
		locale = "en"
	}
	if len(locale) > 16 {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "locale too long")
	}
	return []string{id, locale}, nil
}

// Search keys a results page by the normalised query (attribute "key"; case-
// and whitespace-insensitive) and page number.
func Search(attrs []abi.Attr) ([]string, error) {
	q := strings.Join(strings.Fields(strings.ToLower(attr(attrs, "key"))), " ")
	if q == "" || len(q) > maxQuery {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "query must be 1-%d bytes", maxQuery)
	}
	page := attr(attrs, "page")
	if page == "" {
		page = "1"
	}
	if len(page) > 4 || strings.Trim(page, "0123456789") != "" {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "page must be a number below 10000")
	}
	return []string{q, page}, nil
}

func admitUnder(max uint64) func(*abi.AdmitRequest) bool {
	return func(req *abi.AdmitRequest) bool { return req.SizeBytes > 0 && req.SizeBytes <= max }
}

// admitSearch stores only results that were expensive enough to be worth
// caching (over 2 ms to load) and fit the region.
func admitSearch(req *abi.AdmitRequest) bool {
	return req.SizeBytes > 0 && req.SizeBytes <= 256<<10 && req.LoadLatency >= 2_000
}
