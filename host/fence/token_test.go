package fence

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type textVector struct {
	Text    string `json:"text"`
	OK      bool   `json:"ok"`
	Epoch   string `json:"epoch"`
	Counter int64  `json:"counter"`
	Binary  string `json:"binary"`
	Err     string `json:"err"`
}

type binaryVector struct {
	Binary  string `json:"binary"`
	OK      bool   `json:"ok"`
	Epoch   string `json:"epoch"`
	Counter int64  `json:"counter"`
	Err     string `json:"err"`
}

type vectors struct {
	Text   []textVector   `json:"text"`
	Binary []binaryVector `json:"binary"`
}

func loadVectors(t testing.TB) vectors {
	t.Helper()
	raw, err := os.ReadFile("testdata/token_vectors.json")
	require.NoError(t, err)
	var v vectors
	require.NoError(t, json.Unmarshal(raw, &v))
	require.NotEmpty(t, v.Text)
	require.NotEmpty(t, v.Binary)
	return v
}

func sentinel(t *testing.T, name string) error {
	t.Helper()
	switch name {
	case "syntax":
		return ErrSyntax
	case "range":
		return ErrRange
	}
	t.Fatalf("vector names unknown error %q", name)
	return nil
}

func TestTokenTextVectors(t *testing.T) {
	for _, v := range loadVectors(t).Text {
		t.Run(strconv.Quote(v.Text), func(t *testing.T) {
			got, err := ParseToken(v.Text)
			if !v.OK {
				require.Error(t, err)
				assert.ErrorIs(t, err, sentinel(t, v.Err))
				var pe *ParseError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, Token{}, got)
				// UnmarshalText agrees and leaves the target unchanged.
				keep := Token{Epoch: 3, Counter: 4}
				assert.ErrorIs(t, keep.UnmarshalText([]byte(v.Text)), sentinel(t, v.Err))
				assert.Equal(t, Token{Epoch: 3, Counter: 4}, keep)
				return
			}
			require.NoError(t, err)
			epoch, err := strconv.ParseUint(v.Epoch, 10, 64)
			require.NoError(t, err)
			want := Token{Epoch: epoch, Counter: v.Counter}
			assert.Equal(t, want, got)
			assert.Equal(t, v.Text, got.String(), "canonical form round-trips")
			bin, err := got.MarshalBinary()
			require.NoError(t, err)
			assert.Equal(t, v.Binary, hex.EncodeToString(bin))
			var back Token
			require.NoError(t, back.UnmarshalBinary(bin))
			assert.Equal(t, want, back)
		})
	}
}

func TestTokenBinaryVectors(t *testing.T) {
	for _, v := range loadVectors(t).Binary {
		t.Run(v.Binary, func(t *testing.T) {
			raw, err := hex.DecodeString(v.Binary)
			require.NoError(t, err)
			var got Token
			err = got.UnmarshalBinary(raw)
			if !v.OK {
				assert.ErrorIs(t, err, sentinel(t, v.Err))
				assert.Equal(t, Token{}, got)
				return
			}
			require.NoError(t, err)
			epoch, err := strconv.ParseUint(v.Epoch, 10, 64)
			require.NoError(t, err)
			assert.Equal(t, Token{Epoch: epoch, Counter: v.Counter}, got)
		})
	}
}

func TestTokenJSON(t *testing.T) {
	type doc struct {
		Fence Token `json:"fence"`
	}
	raw, err := json.Marshal(doc{Token{Epoch: 1<<64 - 1, Counter: MaxCounter}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"fence":"18446744073709551615.9007199254740991"}`, string(raw))
	var back doc
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, Token{Epoch: 1<<64 - 1, Counter: MaxCounter}, back.Fence)

	assert.ErrorIs(t, json.Unmarshal([]byte(`{"fence":"01.2"}`), &back), ErrSyntax)
	assert.Error(t, json.Unmarshal([]byte(`{"fence":12}`), &back), "a number is not a token")
	_, err = json.Marshal(doc{})
	assert.ErrorIs(t, err, ErrRange, "the zero token does not marshal")
}

func TestTokenValidateCompare(t *testing.T) {
	for _, bad := range []Token{{}, {Epoch: 1}, {Counter: 1}, {Epoch: 1, Counter: -1}, {Epoch: 1, Counter: MaxCounter + 1}} {
		assert.ErrorIs(t, bad.Validate(), ErrRange, "%v", bad)
		_, err := NewToken(bad.Epoch, bad.Counter)
		assert.ErrorIs(t, err, ErrRange)
		_, err = bad.MarshalText()
		assert.ErrorIs(t, err, ErrRange)
		_, err = bad.MarshalBinary()
		assert.ErrorIs(t, err, ErrRange)
	}
	tok, err := NewToken(2, 5)
	require.NoError(t, err)
	assert.False(t, tok.IsZero())
	assert.True(t, Token{}.IsZero())
	assert.Equal(t, 0, tok.Compare(Token{2, 5}))
	assert.Equal(t, -1, tok.Compare(Token{2, 6}))
	assert.Equal(t, 1, tok.Compare(Token{2, 4}))
	assert.Equal(t, -1, tok.Compare(Token{3, 1}), "epoch first")
	assert.Equal(t, 1, tok.Compare(Token{1, MaxCounter}), "epoch first")
	b, err := tok.AppendText([]byte("t="))
	require.NoError(t, err)
	assert.Equal(t, "t=2.5", string(b))
}

func TestParseErrorTruncatesInput(t *testing.T) {
	long := make([]byte, 1000)
	for i := range long {
		long[i] = 'x'
	}
	_, err := ParseToken(string(long))
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	assert.Len(t, pe.Input, 48)
	assert.Less(t, len(err.Error()), 100)
}

func TestDigestText(t *testing.T) {
	d := NewDigest()
	assert.False(t, d.IsZero())
	assert.NotEqual(t, d, NewDigest())
	back, err := ParseDigest(d.String())
	require.NoError(t, err)
	assert.Equal(t, d, back)
	for _, bad := range []string{"", d.String()[:63], d.String() + "0", "G" + d.String()[1:], "A" + d.String()[1:]} {
		_, err := ParseDigest(bad)
		assert.ErrorIs(t, err, ErrSyntax, "%q", bad)
	}
	raw, err := json.Marshal(d)
	require.NoError(t, err)
	var j Digest
	require.NoError(t, json.Unmarshal(raw, &j))
	assert.Equal(t, d, j)
}

// canonicalShape is an independent statement of the syntax: two decimal
// runs without a leading zero (a lone 0 is well-formed), one dot.
var canonicalShape = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// referenceParse is the spec restated with math/big.
func referenceParse(s string) (Token, error) {
	m := canonicalShape.FindStringSubmatch(s)
	if m == nil {
		return Token{}, ErrSyntax
	}
	e, _ := new(big.Int).SetString(m[1], 10)
	c, _ := new(big.Int).SetString(m[2], 10)
	maxEpoch := new(big.Int).SetUint64(1<<64 - 1)
	if e.Sign() == 0 || e.Cmp(maxEpoch) > 0 || c.Sign() == 0 || c.Cmp(big.NewInt(MaxCounter)) > 0 {
		return Token{}, ErrRange
	}
	return Token{Epoch: e.Uint64(), Counter: c.Int64()}, nil
}

func FuzzParseToken(f *testing.F) {
	for _, v := range loadVectors(f).Text {
		f.Add(v.Text)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseToken(s)
		want, wantErr := referenceParse(s)
		if wantErr != nil {
			if !errors.Is(err, wantErr) {
				t.Fatalf("ParseToken(%q) = %v, %v; reference says %v", s, got, err, wantErr)
			}
			return
		}
		if err != nil || got != want {
			t.Fatalf("ParseToken(%q) = %v, %v; reference says %v", s, got, err, want)
		}
		if got.String() != s {
			t.Fatalf("not canonical: %q -> %q", s, got.String())
		}
		bin, err := got.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back Token
		if err := back.UnmarshalBinary(bin); err != nil || back != got {
			t.Fatalf("binary round trip of %v: %v, %v", got, back, err)
		}
	})
}

func FuzzUnmarshalBinary(f *testing.F) {
	for _, v := range loadVectors(f).Binary {
		raw, _ := hex.DecodeString(v.Binary)
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var tok Token
		if err := tok.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := tok.MarshalBinary()
		if err != nil || string(again) != string(b) {
			t.Fatalf("round trip %x -> %v -> %x, %v", b, tok, again, err)
		}
		if _, err := ParseToken(tok.String()); err != nil {
			t.Fatalf("text form of %v does not parse: %v", tok, err)
		}
	})
}
