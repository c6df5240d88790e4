package render

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

func TestCheckTemplates(t *testing.T) {
	mgr := newManager(t, generous, [2]string{"renderer", "renderer"}, [2]string{"bad", "badrenderer"})
	describe := func(module string) *abi.Description {
		var d *abi.Description
		require.NoError(t, mgr.Use(context.Background(), module, func(g plugins.Guest) error {
			d = g.Description()
			return nil
		}))
		return d
	}
	assert.NoError(t, CheckTemplates(describe("renderer"), Limits{}), "the reference guest is servable")
	// The reference guest bounds names to 128 bytes: a host configured
	// below that could not serve every value the guest accepts.
	err := CheckTemplates(describe("renderer"), Limits{ParamBytes: 100})
	require.ErrorIs(t, err, ErrUnservableTemplate)
	assert.Contains(t, err.Error(), "template welcome v1: parameter name: max_bytes 128 above the host's 100")
	assert.Contains(t, err.Error(), "template export-row v1: parameter name: max_bytes 128 above the host's 100")

	err = CheckTemplates(describe("bad"), Limits{})
	require.ErrorIs(t, err, ErrUnservableTemplate)
	assert.Contains(t, err.Error(), `module badrenderer template bad v1: channel "fax" has no host output rules`)

	d := &abi.Description{Module: "m", Templates: []abi.TemplateDecl{{ID: "t", Version: 1,
		Locales: []string{"en", "en_US", "ada@example.com"}, Channels: []string{"text"}, Params: []string{"Name"}}}}
	err = CheckTemplates(d, Limits{})
	require.ErrorIs(t, err, ErrUnservableTemplate)
	assert.Contains(t, err.Error(), `locale "en_US" is not a language tag`)
	assert.Contains(t, err.Error(), `locale "" is not a language tag`, "a non-id is not printed")
	assert.NotContains(t, err.Error(), "ada@example.com")
	assert.Contains(t, err.Error(), "a parameter name is not an id")
}
