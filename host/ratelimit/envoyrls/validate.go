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

// Request bounds. A request beyond one is refused whole with
// InvalidArgument — never truncated or folded into another descriptor.
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

// Validate checks a request against the bounds and returns the cost of
// each descriptor: the descriptor's hits_addend when set, else the
// request's, 0 counting as 1 (envoyproxy/ratelimit's rule). Its error is a
// gRPC InvalidArgument status naming the field, never a value. Refused
// because caphost cannot act on them: a per-descriptor limit override, a
// descriptor hits_addend of 0 (a check without counting) and negative hits.
func Validate(req *rlsv3.RateLimitRequest) ([]int64, error) {
	bad := func(format string, args ...any) ([]int64, error) {
		return nil, status.Errorf(codes.InvalidArgument, "envoyrls: "+format, args...)
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
	switch {
	case len(ds) == 0:
		return bad("descriptors: at least one is required")
	case len(ds) > MaxDescriptors:
		return bad("descriptors: %d, at most %d", len(ds), MaxDescriptors)
	}
	base := max(int64(req.GetHitsAddend()), 1)
	costs := make([]int64, len(ds))
	for i, d := range ds {
		p := fmt.Sprintf("descriptors[%d]", i)
		if d == nil {
			return bad("%s: null descriptor", p)
		}
		es := d.GetEntries()
		switch {
		case len(es) == 0:
			return bad("%s.entries: at least one is required", p)
		case len(es) > MaxEntries:
			return bad("%s.entries: %d, at most %d", p, len(es), MaxEntries)
		case d.GetLimit() != nil:
			return bad("%s.limit: limit overrides are not supported by caphost", p)
		case d.GetIsNegativeHits():
			return bad("%s.is_negative_hits: negative hits are not supported by caphost", p)
		}
		for j, e := range es {
			ep := fmt.Sprintf("%s.entries[%d]", p, j)
			switch k, v := e.GetKey(), e.GetValue(); {
			case k == "":
				return bad("%s.key: must not be empty", ep)
			case len(k) > rlsconfig.MaxKeyBytes:
				return bad("%s.key: %d bytes, at most %d", ep, len(k), rlsconfig.MaxKeyBytes)
			case len(v) > rlsconfig.MaxValueBytes:
				return bad("%s.value: %d bytes, at most %d", ep, len(v), rlsconfig.MaxValueBytes)
			case !utf8.ValidString(k):
				return bad("%s.key: not valid UTF-8", ep)
			case !utf8.ValidString(v):
				return bad("%s.value: not valid UTF-8", ep)
			}
		}
		costs[i] = base
		if h := d.GetHitsAddend(); h != nil {
			switch v := h.GetValue(); {
			case v == 0:
				return bad("%s.hits_addend: 0 (a check without counting) is not supported by caphost", p)
			case v > MaxHits:
				return bad("%s.hits_addend: at most %d", p, uint64(MaxHits))
			default:
				costs[i] = int64(v)
			}
		}
	}
	return costs, nil
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
