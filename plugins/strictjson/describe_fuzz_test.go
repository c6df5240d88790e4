package strictjson_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

// The host's describe decoder lives in package plugins, whose tests build
// every test guest first; its fuzz target lives here, next to the decoder it
// is built on, so a fuzz worker starts in milliseconds.

func describeSeeds(tb testing.TB) [][]byte {
	files, err := filepath.Glob(filepath.Join("..", "..", "abi", "testdata", "describe", "*.json"))
	require.NoError(tb, err)
	require.NotEmpty(tb, files)
	var out [][]byte
	for _, p := range files {
		b, err := os.ReadFile(p)
		require.NoError(tb, err)
		out = append(out, b)
	}
	return out
}

func TestParseDescriptionValidFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "abi", "testdata", "describe", "valid.json"))
	require.NoError(t, err)
	d, err := plugins.ParseDescription(b)
	require.NoError(t, err)
	assert.Equal(t, []abi.Kind{abi.KindCodec, abi.KindCacheRegion, abi.KindRatePolicy, abi.KindRenderer}, d.Kinds)
	// What guests built with the SDK write (encoding/json of the types)
	// reads back unchanged.
	js, err := json.Marshal(d)
	require.NoError(t, err)
	d2, err := plugins.ParseDescription(js)
	require.NoError(t, err)
	assert.Equal(t, d, d2)

	_, err = plugins.ParseDescription(make([]byte, abi.MaxDescribeBytes+1))
	assert.ErrorIs(t, err, abi.ErrInvalidDescription)
	_, err = plugins.ParseDescription([]byte(`{"abi":{"major":2,"minor":0},"module":"m","kinds":["codec"],"codecs":[{"schema_id":"s","write_version":1,"readable_versions":[1]}]}`))
	assert.ErrorIs(t, err, abi.ErrUnsupportedMajor)
}

// FuzzParseDescription: describe output never panics, errors are typed, and
// whatever the strict decoder accepts is valid UTF-8, means the same to
// abi.ParseDescription (encoding/json: strictness removes leniency, never
// adds meaning) and survives a JSON round trip.
func FuzzParseDescription(f *testing.F) {
	for _, b := range describeSeeds(f) {
		f.Add(b)
	}
	f.Add([]byte(`{"abi":{"major":1,"minor":0},"module":"m","KINDS":["codec"],"codecs":[{"schema_id":"s","write_version":1,"readable_versions":[1]}]}`))
	f.Add([]byte(`{"abi":{"major":1,"minor":0},"module":"m","kinds":["codec"],"kinds":["codec"],"codecs":[{"schema_id":"s","write_version":1,"readable_versions":[1]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := plugins.ParseDescription(b)
		if err != nil {
			if !errors.Is(err, abi.ErrInvalidDescription) && !errors.Is(err, abi.ErrUnsupportedMajor) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if !utf8.Valid(b) {
			t.Fatalf("accepted invalid UTF-8 %q", b)
		}
		lenient, err := abi.ParseDescription(b)
		if err != nil {
			t.Fatalf("abi.ParseDescription refuses what the host accepted (%q): %v", b, err)
		}
		if !reflect.DeepEqual(d, lenient) {
			t.Fatalf("the two decoders disagree on %q:\n%+v\n%+v", b, d, lenient)
		}
		js, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := plugins.ParseDescription(js)
		if err != nil {
			t.Fatalf("re-parse of accepted description failed: %v", err)
		}
		if !reflect.DeepEqual(d, d2) {
			t.Fatalf("round trip changed the description:\n%+v\n%+v", d, d2)
		}
	})
}
