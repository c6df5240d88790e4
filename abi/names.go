package abi

// Kind is a guest kind. The set is closed for ABI v1.
type Kind string

// Guest kinds of ABI v1.
const (
	KindCodec       Kind = "codec"
	KindCacheRegion Kind = "cache-region"
	KindRatePolicy  Kind = "rate-policy"
	KindRenderer    Kind = "renderer"
)

// Kinds lists the v1 kinds in a fixed order.
func Kinds() []Kind { return []Kind{KindCodec, KindCacheRegion, KindRatePolicy, KindRenderer} }

// Valid reports whether k is a v1 kind.
func (k Kind) Valid() bool {
	switch k {
	case KindCodec, KindCacheRegion, KindRatePolicy, KindRenderer:
		return true
	}
	return false
}

// Algorithm is a rate-limit algorithm from the host's closed menu. A guest
// picks one; it never supplies an implementation.
type Algorithm string

// The host's rate-limit menu.
const (
	AlgFixedWindow    Algorithm = "fixed-window"
	AlgSlidingCounter Algorithm = "sliding-counter"
	AlgTokenBucket    Algorithm = "token-bucket"
	AlgGCRA           Algorithm = "gcra"
	AlgSlidingLog     Algorithm = "sliding-log"
	AlgConcurrency    Algorithm = "concurrency"
)

// Valid reports whether a is on the host's menu.
func (a Algorithm) Valid() bool {
	switch a {
	case AlgFixedWindow, AlgSlidingCounter, AlgTokenBucket, AlgGCRA, AlgSlidingLog, AlgConcurrency:
		return true
	}
	return false
}

// Module and export names. Every name a guest can export or import is here;
// the host refuses any other import.
const (
	// ImportModule is the wasm import module of the host functions.
	ImportModule = "caphost_v1"
	// ImportLog is log(level i32, ptr i32, len i32): a bounded, rate-limited log line.
	ImportLog = "log"
	// ImportCount is count(ptr i32, len i32): increments a host-allowlisted event counter.
	ImportCount = "count"

	// ExportInitialize is the reactor initialiser emitted by the Go toolchain; the host calls it once per instance.
	ExportInitialize = "_initialize"
	// ExportVersion is caphost_abi_version() i32 returning PackVersion(major, minor).
	ExportVersion = "caphost_abi_version"
	// ExportAlloc is caphost_alloc(size i32) i32: the guest returns a region of at least size bytes that
	// stays valid, and is not touched by the guest, until the next caphost_alloc call.
	ExportAlloc = "caphost_alloc"
)

// Export identifies a guest entry point. Every Export takes (ptr i32, len i32)
// naming the request in guest memory and returns i64 (ptr<<32 | len) naming
// the response frame, which stays valid until the next call into the instance.
type Export uint8

// Exports of ABI v1.
const (
	ExportDescribe Export = iota + 1
	ExportCodecEncode
	ExportCodecDecode
	ExportCacheCanonicalize
	ExportCacheAdmit
	ExportRateSelect
	ExportRender
	exportEnd
)

// NumExports is one past the largest Export value, for array-indexed tables.
const NumExports = int(exportEnd)

var exportNames = [...]string{
	ExportDescribe:          "caphost_describe",
	ExportCodecEncode:       "caphost_codec_encode",
	ExportCodecDecode:       "caphost_codec_decode",
	ExportCacheCanonicalize: "caphost_cache_canonicalize",
	ExportCacheAdmit:        "caphost_cache_admit",
	ExportRateSelect:        "caphost_rate_select",
	ExportRender:            "caphost_render",
}

// Valid reports whether e is a v1 export.
func (e Export) Valid() bool { return e >= ExportDescribe && e < exportEnd }

// Name is the wasm export name, or "" for an invalid Export.
func (e Export) Name() string {
	if !e.Valid() {
		return ""
	}
	return exportNames[e]
}

// String implements fmt.Stringer.
func (e Export) String() string {
	if n := e.Name(); n != "" {
		return n
	}
	return "invalid-export"
}

// Kind is the guest kind that must be declared for the export to be callable
// ("" for describe, which every module has).
func (e Export) Kind() Kind {
	switch e {
	case ExportCodecEncode, ExportCodecDecode:
		return KindCodec
	case ExportCacheCanonicalize, ExportCacheAdmit:
		return KindCacheRegion
	case ExportRateSelect:
		return KindRatePolicy
	case ExportRender:
		return KindRenderer
	}
	return ""
}

// ExportsOf lists the exports a module declaring kind k must provide.
func ExportsOf(k Kind) []Export {
	switch k {
	case KindCodec:
		return []Export{ExportCodecEncode, ExportCodecDecode}
	case KindCacheRegion:
		return []Export{ExportCacheCanonicalize, ExportCacheAdmit}
	case KindRatePolicy:
		return []Export{ExportRateSelect}
	case KindRenderer:
		return []Export{ExportRender}
	}
	return nil
}

// LogLevel is the level argument of the log import.
type LogLevel uint32

// Log levels accepted by the log import; other values are logged as LogError.
const (
	LogDebug LogLevel = 0
	LogInfo  LogLevel = 1
	LogWarn  LogLevel = 2
	LogError LogLevel = 3
)
