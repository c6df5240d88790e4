package abi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDescriptionValid(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "describe", "valid.json"))
	require.NoError(t, err)
	d, err := ParseDescription(b)
	require.NoError(t, err)
	assert.Equal(t, []Kind{KindCodec, KindCacheRegion, KindRatePolicy, KindRenderer}, d.Kinds)
	assert.Equal(t, AlgGCRA, d.RatePolicies[1].Algorithm)
	assert.Equal(t, []ParamSpec{{Name: "name", Type: ParamText, MaxBytes: 128}, {Name: "count", Type: ParamInteger},
		{Name: "due", Type: ParamTimestamp}}, d.Templates[1].ParamSpecs)
	assert.Nil(t, d.Templates[0].ParamSpecs, "param_specs is optional")
	// Round trip through encoding/json is stable.
	again, err := json.Marshal(d)
	require.NoError(t, err)
	d2, err := ParseDescription(again)
	require.NoError(t, err)
	assert.Equal(t, d, d2)
}

func TestParseDescriptionRejects(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "describe", "invalid-*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			// The file carries its expected messages under "_expect", which
			// is removed before parsing.
			var raw map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(b, &raw))
			var expect []string
			require.NoError(t, json.Unmarshal(raw["_expect"], &expect))
			delete(raw, "_expect")
			b, err = json.Marshal(raw)
			require.NoError(t, err)
			_, err = ParseDescription(b)
			require.Error(t, err)
			for _, s := range expect {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
	_, err = ParseDescription(make([]byte, MaxDescribeBytes+1))
	require.ErrorIs(t, err, ErrInvalidDescription)
	_, err = ParseDescription([]byte(`{"abi":{"major":1,"minor":0},"module":"m","kinds":["codec"],"codecs":[{"schema_id":"s","write_version":1,"readable_versions":[1]}]} {}`))
	require.ErrorIs(t, err, ErrInvalidDescription)
}
