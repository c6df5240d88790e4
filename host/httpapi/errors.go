package httpapi

import "github.com/caphost/caphost/host/httpjson"

// Error codes only the daemon mux and the admin endpoints answer (the
// generic codes are httpjson's, the sidecars' are ratelimit's and
// cache's). Stable: clients switch on them.
const (
	// CodeBadPath: the request path is not canonical (an empty, . or ..
	// segment, a double or trailing slash); 400 on every endpoint, before
	// any route. Percent-encode a key that is "." or "..", or contains "/".
	CodeBadPath httpjson.Code = "bad-path"
	// CodeUnauthorized: missing or wrong admin bearer token.
	CodeUnauthorized httpjson.Code = "unauthorized"
	// CodeUnknownGuest: no configured guest has that name.
	CodeUnknownGuest httpjson.Code = "unknown-guest"
	// CodeSwapBusy: another swap is in progress; retry later.
	CodeSwapBusy httpjson.Code = "swap-busy"
	// CodeGuestUntrusted: the module's digest or signature was rejected.
	CodeGuestUntrusted httpjson.Code = "guest-untrusted"
	// CodeGuestInvalid: the module failed to compile, instantiate or
	// describe itself, or declares what the slot cannot accept.
	CodeGuestInvalid httpjson.Code = "guest-invalid"
	// CodeSwapFailed: the swap failed for another reason; the previous
	// generation keeps serving.
	CodeSwapFailed httpjson.Code = "swap-failed"
)
