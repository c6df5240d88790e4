package envoyrls

import (
	"context"
	"fmt"
	"math"
	"unicode/utf8"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
)

type ratelimitEntry = commonv3.RateLimitDescriptor_Entry

// Request bounds. A descriptor beyond one is refused on its own, in-band
// (see Validate) — never truncated or folded into another descriptor.
const (
	// MaxDescriptors bounds the descriptors of one request.
	MaxDescriptors = 64
	// MaxEntries bounds the entries of one descriptor: a deeper descriptor
	// could match no rule.
	MaxEntries = rlsconfig.MaxDepth
	// MaxMessageBytes bounds a request on the wire (the server's
	// MaxRecvMsgSize).
	MaxMessageBytes = 256 << 10
	// MaxHits bounds a cost (hits_addend).
	MaxHits = math.MaxUint32
)

// Reason says why a descriptor was refused. The values are a closed set:
// they are the label values of caphost_envoy_rls_invalid_descriptors_total.
type Reason string

// Refusal reasons.
const (
	// ReasonTooManyDescriptors refuses every descriptor of a request with
	// more than MaxDescriptors.
	ReasonTooManyDescriptors Reason = "too_many_descriptors"
	// ReasonEntries: no entries, or more than MaxEntries.
	ReasonEntries Reason = "entries"
	// ReasonKey: an empty key, or one over rlsconfig.MaxKeyBytes.
	ReasonKey Reason = "key"
	// ReasonValueTooLong: a value over rlsconfig.MaxValueBytes. Envoy
	// fills values from request headers and the path, so this one is
	// client-controlled.
	ReasonValueTooLong Reason = "value_too_long"
	// ReasonNotUTF8: a key or value that is not valid UTF-8 (protobuf
	// refuses it on the wire; a direct caller can still pass one).
	ReasonNotUTF8 Reason = "not_utf8"
	// ReasonLimitOverride: a per-descriptor limit override, which caphost
	// cannot act on (its limits are compiled policies).
	ReasonLimitOverride Reason = "limit_override"
	// ReasonNegativeHits: is_negative_hits, which caphost cannot act on
	// (its programs never refund).
	ReasonNegativeHits Reason = "negative_hits"
	// ReasonHitsTooLarge: a hits_addend over MaxHits.
	ReasonHitsTooLarge Reason = "hits_too_large"
	// ReasonCheckOnly: hits_addend 0 — a check without counting — on a
	// counted rule or a selector-mapped domain: caphost's limiter cannot
	// evaluate a limit without consuming from it.
	ReasonCheckOnly Reason = "check_only"
	// ReasonSelectorKey: a selector-mapped descriptor with a key that is
	// not a selector attribute or identity, or a repeated key.
	ReasonSelectorKey Reason = "selector_key"
)

// Reasons lists every Reason.
func Reasons() []Reason {
	return []Reason{ReasonTooManyDescriptors, ReasonEntries, ReasonKey, ReasonValueTooLong, ReasonNotUTF8,
		ReasonLimitOverride, ReasonNegativeHits, ReasonHitsTooLarge, ReasonCheckOnly, ReasonSelectorKey}
}

// Refusal is why one descriptor is refused: its reason, the field (for
// example descriptors[1].entries[0].value) and a detail made of sizes and
// bounds. It never carries a key or a value.
type Refusal struct {
	Reason Reason
	Field  string
	Detail string
}

func (r *Refusal) String() string { return r.Field + ": " + r.Detail }

// Validation is what Validate found, per descriptor.
type Validation struct {
	// Costs[i] is descriptor i's cost: its hits_addend when set, else the
	// request's, a request hits_addend of 0 counting as 1 (envoyproxy/
	// ratelimit's rule). A descriptor hits_addend of 0 stays 0: a check
	// without counting.
	Costs []int64
	// Refused[i] is why descriptor i is refused, nil when it is valid.
	Refused []*Refusal
}

// Validate checks a request against the bounds.
//
// What concerns one descriptor is answered for that descriptor alone: a
// refused descriptor is answered OVER_LIMIT (fail closed) and counts
// nothing, while the request's other descriptors are decided as usual.
// This matters because Envoy treats a failed rate-limit call according to
// its failure_mode_deny, which defaults to allowing: refusing the whole
// request with a gRPC error would let one oversized header skip every
// limit of the request. More than MaxDescriptors refuses every descriptor
// the same way (OVER_LIMIT, nothing counted).
//
// The error, a gRPC InvalidArgument naming the field and never a value, is
// kept for what belongs to no descriptor and that Envoy never sends: an
// empty, over-long or non-UTF-8 domain (Envoy's domain is its own static
// configuration, and it refuses an empty one) and a request without
// descriptors (Envoy makes no call then). envoyproxy/ratelimit errors on
// both too.
func Validate(req *rlsv3.RateLimitRequest) (Validation, error) {
	bad := func(format string, args ...any) (Validation, error) {
		return Validation{}, status.Errorf(codes.InvalidArgument, "envoyrls: "+format, args...)
	}
	switch d := req.GetDomain(); {
	case d == "":
		return bad("domain: must not be empty")
	case len(d) > rlsconfig.MaxDomainBytes:
		return bad("domain: %d bytes, at most %d", len(d), rlsconfig.MaxDomainBytes)
	case !utf8.ValidString(d):
		return bad("domain: not valid UTF-8")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return bad("descriptors: at least one is required")
	}
	v := Validation{Costs: make([]int64, len(ds)), Refused: make([]*Refusal, len(ds))}
	if len(ds) > MaxDescriptors {
		// One refusal shared by every descriptor: the answer's size is
		// the request's, whatever its count.
		r := &Refusal{Reason: ReasonTooManyDescriptors, Field: "descriptors", Detail: fmt.Sprintf("%d, at most %d", len(ds), MaxDescriptors)}
		for i := range ds {
			v.Refused[i] = r
		}
		return v, nil
	}
	base := max(int64(req.GetHitsAddend()), 1)
	for i, d := range ds {
		v.Costs[i], v.Refused[i] = checkDescriptor(i, d, base)
	}
	return v, nil
}

// checkDescriptor returns the cost of descriptor i, or why it is refused.
func checkDescriptor(i int, d *commonv3.RateLimitDescriptor, base int64) (int64, *Refusal) {
	// The field is named only for a refusal: every call checks every
	// descriptor, and a valid one must not pay for formatting.
	refuse := func(r Reason, field, format string, args ...any) (int64, *Refusal) {
		return 0, &Refusal{Reason: r, Field: fmt.Sprintf("descriptors[%d]", i) + field, Detail: fmt.Sprintf(format, args...)}
	}
	entry := func(j int, field string) string { return fmt.Sprintf(".entries[%d].%s", j, field) }
	es := d.GetEntries()
	switch {
	case len(es) == 0:
		return refuse(ReasonEntries, ".entries", "at least one is required")
	case len(es) > MaxEntries:
		return refuse(ReasonEntries, ".entries", "%d, at most %d", len(es), MaxEntries)
	case d.GetLimit() != nil:
		return refuse(ReasonLimitOverride, ".limit", "limit overrides are not supported by caphost")
	case d.GetIsNegativeHits():
		return refuse(ReasonNegativeHits, ".is_negative_hits", "negative hits are not supported by caphost")
	}
	for j, e := range es {
		switch k, v := e.GetKey(), e.GetValue(); {
		case k == "":
			return refuse(ReasonKey, entry(j, "key"), "must not be empty")
		case len(k) > rlsconfig.MaxKeyBytes:
			return refuse(ReasonKey, entry(j, "key"), "%d bytes, at most %d", len(k), rlsconfig.MaxKeyBytes)
		case len(v) > rlsconfig.MaxValueBytes:
			return refuse(ReasonValueTooLong, entry(j, "value"), "%d bytes, at most %d", len(v), rlsconfig.MaxValueBytes)
		case !utf8.ValidString(k):
			return refuse(ReasonNotUTF8, entry(j, "key"), "not valid UTF-8")
		case !utf8.ValidString(v):
			return refuse(ReasonNotUTF8, entry(j, "value"), "not valid UTF-8")
		}
	}
	h := d.GetHitsAddend()
	switch {
	case h == nil:
		return base, nil
	case h.GetValue() > MaxHits:
		return refuse(ReasonHitsTooLarge, ".hits_addend", "at most %d", uint64(MaxHits))
	}
	return int64(h.GetValue()), nil
}

// RequestIDHeader is the gRPC metadata key whose value, when present and
// well-formed, identifies a request for the dedup of rules that enable it:
// Envoy forwards x-request-id on its rate-limit call, and a retried call
// carries the same id, so a retry is not charged twice.
const RequestIDHeader = "x-request-id"

// maxRequestIDBytes keeps "<id>/<descriptor index>" within the limiter's
// evaluation id bound.
const maxRequestIDBytes = 120

// requestID is the request's x-request-id, or "" when it is absent,
// repeated, longer than maxRequestIDBytes or not printable ASCII: an id
// that cannot be trusted to be the same on a retry is no id (the limiter
// then mints one).
func requestID(ctx context.Context) string {
	vs := metadata.ValueFromIncomingContext(ctx, RequestIDHeader)
	if len(vs) != 1 || len(vs[0]) == 0 || len(vs[0]) > maxRequestIDBytes {
		return ""
	}
	for i := 0; i < len(vs[0]); i++ {
		if c := vs[0][i]; c < 0x21 || c > 0x7e {
			return ""
		}
	}
	return vs[0]
}
