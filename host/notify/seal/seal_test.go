package seal

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

var update = flag.Bool("update", false, "rewrite testdata/sealed-v1.hex (only with a new format byte)")

func material(b byte) policy.Secret { return policy.NewSecret(bytes.Repeat([]byte{b}, 32)) }

func ring(t testing.TB, write int, versions map[int]policy.Secret) *Ring {
	t.Helper()
	r, err := New(Config{WriteVersion: write, Versions: versions})
	require.NoError(t, err)
	return r
}

var (
	plain   = []byte("CNIP\x01 a plan with alice@example.com and Hello, Alice")
	binding = []byte(strings.Repeat("ab", 32))
)

func TestSealOpensOnlyWhereItWasBound(t *testing.T) {
	r := ring(t, 1, map[int]policy.Secret{1: material(1)})
	b, err := r.Seal(nil, plain, binding)
	require.NoError(t, err)
	require.True(t, IsSealed(b))
	require.Len(t, b, len(plain)+Overhead)
	require.False(t, bytes.Contains(b, []byte("alice")), "the recipient is readable in the sealed bytes")
	got, err := r.Open(nil, b, binding)
	require.NoError(t, err)
	require.Equal(t, plain, got)

	// Two seals of one plan differ (a fresh nonce each).
	b2, err := r.Seal(nil, plain, binding)
	require.NoError(t, err)
	require.NotEqual(t, b, b2)

	other := []byte(strings.Repeat("cd", 32))
	_, err = r.Open(nil, b, other)
	require.ErrorIs(t, err, ErrCorrupt, "a plan moved to another intent must not open")

	// Every flipped bit fails: in the header as not sealed or an unknown
	// version, anywhere else as corrupt.
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x01
		_, err := r.Open(nil, bad, binding)
		require.Error(t, err, "flip at %d", i)
		switch {
		case i < len(magic)+1:
			require.ErrorIs(t, err, ErrNotSealed, "flip at %d", i)
		case i < headerSize:
			require.ErrorIs(t, err, ErrUnknownVersion, "flip at %d", i)
		default:
			require.ErrorIs(t, err, ErrCorrupt, "flip at %d", i)
		}
	}
	for n := range len(b) {
		_, err := r.Open(nil, b[:n], binding)
		require.Error(t, err, "truncated to %d", n)
	}
	_, err = r.Open(nil, append(bytes.Clone(b), 0), binding)
	require.ErrorIs(t, err, ErrCorrupt, "a trailing byte")
	_, err = r.Open(nil, plain, binding)
	require.ErrorIs(t, err, ErrNotSealed)
}

func TestRotation(t *testing.T) {
	v1 := ring(t, 1, map[int]policy.Secret{1: material(1)})
	old, err := v1.Seal(nil, plain, binding)
	require.NoError(t, err)

	// Step 1 of a rotation: every replica reads v2 before any writes it.
	both := ring(t, 2, map[int]policy.Secret{1: material(1), 2: material(2)})
	got, err := both.Open(nil, old, binding)
	require.NoError(t, err)
	require.Equal(t, plain, got)
	fresh, err := both.Seal(nil, plain, binding)
	require.NoError(t, err)
	_, err = v1.Open(nil, fresh, binding)
	require.ErrorIs(t, err, ErrUnknownVersion, "a replica without v2 cannot read what v2 sealed")

	// v1 retired: what it sealed no longer opens.
	v2 := ring(t, 2, map[int]policy.Secret{2: material(2)})
	_, err = v2.Open(nil, old, binding)
	require.ErrorIs(t, err, ErrUnknownVersion)

	// The same version number with other material: corrupt, not opened.
	wrong := ring(t, 1, map[int]policy.Secret{1: material(9)})
	_, err = wrong.Open(nil, old, binding)
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestConfigIsChecked(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no versions":          {WriteVersion: 1},
		"write not a version":  {WriteVersion: 2, Versions: map[int]policy.Secret{1: material(1)}},
		"version 0":            {WriteVersion: 0, Versions: map[int]policy.Secret{0: material(1)}},
		"version above max":    {WriteVersion: MaxVersion + 1, Versions: map[int]policy.Secret{MaxVersion + 1: material(1)}},
		"short material":       {WriteVersion: 1, Versions: map[int]policy.Secret{1: policy.NewSecret(make([]byte, 31))}},
		"long material":        {WriteVersion: 1, Versions: map[int]policy.Secret{1: policy.NewSecret(make([]byte, MaxMaterialBytes+1))}},
		"more than 4 versions": {WriteVersion: 1, Versions: map[int]policy.Secret{1: material(1), 2: material(2), 3: material(3), 4: material(4), 5: material(5)}},
	} {
		_, err := New(cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		require.NotContains(t, err.Error(), string(bytes.Repeat([]byte{1}, 32)), name)
	}
}

func TestStringNamesVersionsOnly(t *testing.T) {
	r := ring(t, 2, map[int]policy.Secret{2: policy.NewSecret([]byte(strings.Repeat("s3cret-material-", 2))), 1: material(1)})
	require.Equal(t, "seal.Ring(aes-256-gcm write v2 versions [1 2])", r.String())
}

// zeros is a nonce source of zero bytes, for golden bytes only.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestGolden pins the format and the key derivation: a plan stored by one
// release must open in the next. testdata/sealed-v1.hex was written by this
// test with -update once; a change that breaks it breaks every stored
// intent.
func TestGolden(t *testing.T) {
	r, err := New(Config{WriteVersion: 7, Versions: map[int]policy.Secret{7: material(0x42)}, Rand: zeros{}})
	require.NoError(t, err)
	b, err := r.Seal(nil, plain, binding)
	require.NoError(t, err)
	path := filepath.Join("testdata", "sealed-v1.hex")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update once")
	require.Equal(t, strings.TrimSpace(string(want)), hex.EncodeToString(b))
	got, err := r.Open(nil, b, binding)
	require.NoError(t, err)
	require.Equal(t, plain, got)
}

// FuzzOpen: no input panics Open, and whatever opens was sealed by the ring
// (an input that opens must seal back to a plan Open returns unchanged).
func FuzzOpen(f *testing.F) {
	r := ring(f, 1, map[int]policy.Secret{1: material(1)})
	b, err := r.Seal(nil, plain, binding)
	require.NoError(f, err)
	f.Add(b)
	f.Add([]byte("CNIE\x01\x00\x01"))
	f.Add([]byte("CNIE\x01\x00\x02" + strings.Repeat("x", 40)))
	f.Add(plain)
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := r.Open(nil, in, binding)
		if err != nil {
			require.Nil(t, out)
			return
		}
		require.True(t, IsSealed(in))
		require.Len(t, in, len(out)+Overhead)
	})
}

// BenchmarkSeal measures what sealing adds to a submit and opening to a
// delivery, for a small plan and for the largest rendering (64 KiB parts
// are typical of an HTML mail).
func BenchmarkSeal(b *testing.B) {
	r := ring(b, 1, map[int]policy.Secret{1: material(1)})
	for _, size := range []int{256, 64 << 10} {
		p := bytes.Repeat([]byte{'x'}, size)
		dst := make([]byte, 0, size+Overhead)
		b.Run("seal/"+strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := r.Seal(dst[:0], p, binding); err != nil {
					b.Fatal(err)
				}
			}
		})
		sealed, err := r.Seal(nil, p, binding)
		require.NoError(b, err)
		b.Run("open/"+strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := r.Open(dst[:0], sealed, binding); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
