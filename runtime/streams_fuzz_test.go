package runtime

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// fuzzValue builds a go-redis-shaped reply value (string, int64, nil,
// []any, map[any]any) from b, so the stream reply decoders see arbitrary
// nesting, types and sizes.
func fuzzValue(b []byte, depth int) (any, []byte) {
	if len(b) == 0 {
		return nil, b
	}
	tag, b := b[0], b[1:]
	switch tag % 6 {
	case 0:
		return nil, b
	case 1:
		n := 0
		if len(b) > 0 {
			n, b = int(b[0]%24), b[1:]
		}
		n = min(n, len(b))
		return string(b[:n]), b[n:]
	case 2:
		if len(b) == 0 {
			return int64(0), b
		}
		return int64(int8(b[0])), b[1:]
	case 3, 4:
		if depth > 4 || len(b) == 0 {
			return []any{}, b
		}
		n := int(b[0] % 8)
		b = b[1:]
		out := make([]any, 0, n)
		for range n {
			var v any
			v, b = fuzzValue(b, depth+1)
			out = append(out, v)
		}
		if tag%6 == 4 {
			m := map[any]any{}
			for i := 0; i+1 < len(out); i += 2 {
				if k, ok := out[i].(string); ok {
					m[k] = out[i+1]
				}
			}
			return m, b
		}
		return out, b
	default:
		// A well-formed id, so decoders get past the id checks.
		return "1-0", b
	}
}

// FuzzStreamReplyDecoders: no reply shape panics a decoder, and whatever a
// decoder accepts respects the count and field bounds.
func FuzzStreamReplyDecoders(f *testing.F) {
	f.Add([]byte{3, 1, 3, 2, 1, 1, 's', 3, 2, 5, 3, 4, 1, 1, 'i', 1, 1, 'a'})
	f.Add([]byte{3, 3, 1, 3, '0', '-', '0', 3, 0, 3, 0})
	f.Add([]byte{3, 1, 3, 4, 5, 1, 1, 'c', 2, 7, 2, 1})
	f.Add([]byte{3, 1, 4, 4, 1, 4, 'n', 'a', 'm', 'e', 1, 1, 'g', 1, 7, 'p', 'e', 'n', 'd', 'i', 'n', 'g', 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, _ := fuzzValue(b, 0)
		if es, err := decodeReadGroupReply(v, "s", 4); err == nil {
			require.LessOrEqual(t, len(es), 4)
			for _, e := range es {
				require.True(t, validStreamID(e.ID))
				require.NotEmpty(t, e.Fields)
				require.LessOrEqual(t, len(e.Fields), MaxStreamFields)
			}
		}
		if es, next, del, err := decodeAutoClaimReply(v, 4); err == nil {
			require.LessOrEqual(t, len(es), 4)
			require.LessOrEqual(t, len(del), 4)
			require.True(t, validStreamID(next))
		}
		if ps, err := decodePendingReply(v, 4); err == nil {
			require.LessOrEqual(t, len(ps), 4)
			for _, p := range ps {
				require.GreaterOrEqual(t, p.Deliveries, int64(0))
				require.GreaterOrEqual(t, p.Idle, 0*p.Idle)
			}
		}
		if info, found, err := decodeGroupInfoReply(v, "g"); err == nil && found {
			require.GreaterOrEqual(t, info.Pending, int64(0))
			require.GreaterOrEqual(t, info.Lag, int64(0))
		}
	})
}

func TestValidStreamID(t *testing.T) {
	for _, ok := range []string{"0-0", "1-0", "1700000000000-12", "18446744073709551615-18446744073709551615"} {
		require.True(t, validStreamID(ok), ok)
	}
	for _, bad := range []string{"", "0", "-", "01-0", "1-01", "1-", "-1", "1-2-3", "a-0", "18446744073709551616-0", "1 -0"} {
		require.False(t, validStreamID(bad), bad)
	}
}
