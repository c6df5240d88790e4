package httpapi

import "github.com/caphost/caphost/host/httpjson"

// Error codes only the admin endpoints answer (the generic codes are
// httpjson's, the sidecar's are ratelimit's). Stable: clients switch on
// them.
const (
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
