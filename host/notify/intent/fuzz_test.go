package intent

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/keys"
)

// offlineStore is a Store with a key layout and no Redis, for decoders.
func offlineStore(t testing.TB) *Store {
	t.Helper()
	b, err := keys.NewBuilder(keys.Config{App: "demo", Env: "test", Material: policy.KeyMaterial{WriteVersion: 1,
		Versions: map[int]policy.Secret{1: policy.NewSecret(bytes.Repeat([]byte{7}, 32))}}})
	require.NoError(t, err)
	in, err := b.PrepareSharded(keys.ShardSpec{Capability: keys.CapNotify, Region: "intents", KeyVersion: 1, Shards: 4,
		AnchorKind: "stream", MemberKinds: []string{"intent"}})
	require.NoError(t, err)
	return &Store{intents: in, cfg: Config{Shards: 4}}
}

func TestPlanRoundTripIsCanonical(t *testing.T) {
	p := testPlan(t, "x")
	b, err := p.MarshalBinary()
	require.NoError(t, err)
	var q Plan
	require.NoError(t, q.UnmarshalBinary(b))
	b2, err := q.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, b, b2)
	require.NotContains(t, q.String(), "alice")
	require.NotContains(t, q.LogValue().String(), "Hello")
	// The header and the message (digested) detect any flipped bit; the
	// recipient and names are only bounded, so a flip there may stay valid.
	msg, err := p.Message.MarshalBinary()
	require.NoError(t, err)
	for i := range b {
		if i >= 5 && i < len(b)-len(msg) {
			continue
		}
		bad := bytes.Clone(b)
		bad[i] ^= 0x40
		require.ErrorIs(t, new(Plan).UnmarshalBinary(bad), ErrCorruptPlan, "flip at %d", i)
	}
	require.ErrorIs(t, new(Plan).UnmarshalBinary(append(bytes.Clone(b), 0)), ErrCorruptPlan, "trailing byte")
}

// FuzzPlan: no input panics the stored-plan decoder; whatever decodes
// re-encodes to the same bytes.
func FuzzPlan(f *testing.F) {
	p := testPlan(f, "x")
	b, err := p.MarshalBinary()
	require.NoError(f, err)
	f.Add(b)
	f.Add([]byte("CNIP\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Plan
		if p.UnmarshalBinary(b) != nil {
			return
		}
		again, err := p.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, b, again)
	})
}

// FuzzReceiptLog: the receipt log decoder never panics and accepts only
// receipts within bounds.
func FuzzReceiptLog(f *testing.F) {
	r := Receipt{Attempt: 2, Transport: "primary", Outcome: 1, Code: "http-202", ProviderRef: "m-1", At: testNow}
	enc, err := appendReceipt(nil, &r)
	require.NoError(f, err)
	f.Add(append([]byte{0, byte(len(enc))}, enc...))
	f.Add([]byte{0, 3, 'R', 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := decodeReceiptLog(b)
		if err != nil {
			return
		}
		for _, r := range rs {
			require.NoError(t, r.check())
			again, err := appendReceipt(nil, &r)
			require.NoError(t, err)
			require.LessOrEqual(t, len(again), maxReceiptBytes)
		}
	})
}

// FuzzEntryFields: the stream entry decoder accepts exactly {i, p} with
// an id of the delivery's shard and a plan that decodes.
func FuzzEntryFields(f *testing.F) {
	s := offlineStore(f)
	p := testPlan(f, "x")
	plan, err := p.MarshalBinary()
	require.NoError(f, err)
	loc, err := s.intents.Locate([][]byte{[]byte("k")})
	require.NoError(f, err)
	d := loc.Digest()
	id := []byte(string(hexID(d)))
	f.Add([]byte("i"), id, []byte("p"), plan, uint8(loc.Shard()))
	f.Add([]byte("p"), plan, []byte("i"), id, uint8(loc.Shard()))
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 []byte, shard uint8) {
		sh := int(shard % 4)
		e := runtime.StreamEntry{ID: "1-0", Fields: []runtime.StreamField{{Name: n1, Value: v1}, {Name: n2, Value: v2}}}
		dl := s.decodeEntry(sh, e, 1)
		if dl.Err != nil {
			return
		}
		require.Equal(t, "i", string(n1))
		require.Equal(t, "p", string(n2))
		l, err := s.locationOf(dl.ID)
		require.NoError(t, err)
		require.Equal(t, sh, l.Shard())
		again, err := dl.Plan.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, v2, again)
	})
}

func hexID(d [32]byte) ID {
	const hx = "0123456789abcdef"
	out := make([]byte, 64)
	for i, c := range d {
		out[2*i], out[2*i+1] = hx[c>>4], hx[c&15]
	}
	return ID(out)
}
