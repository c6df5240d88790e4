package config

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

func TestServerAdminToken(t *testing.T) {
	cfg, err := loadFixture(t, "server/admin-token.yaml", nil)
	require.NoError(t, err)
	assert.Equal(t, "admin-token-from-file-0123456789", string(cfg.Server.AdminToken.Reveal()), "trailing newline trimmed")
	assert.Equal(t, "secret://file/../secrets/admin-token", cfg.Server.AdminTokenRef.String())
	assert.NotContains(t, fmt.Sprintf("%v %+v", cfg.Server, cfg), "admin-token-from-file")

	// The environment override replaces the reference, like every secret.
	cfg, err = loadFixture(t, "server/admin-token.yaml", map[string]string{
		"CAPHOST_SERVER__ADMIN_TOKEN": "secret://env/ADMIN_TOKEN", "ADMIN_TOKEN": "token-from-env-0123456789",
	})
	require.NoError(t, err)
	assert.Equal(t, "token-from-env-0123456789", string(cfg.Server.AdminToken.Reveal()))

	// No token configured: zero, so the admin endpoints are not served.
	cfg, err = loadFixture(t, "valid/cluster.yaml", nil)
	require.NoError(t, err)
	assert.True(t, cfg.Server.AdminToken.IsZero())

	// A literal is rejected like any other secret, without echoing it.
	_, err = loadFixture(t, "server/admin-token.yaml", map[string]string{"CAPHOST_SERVER__ADMIN_TOKEN": "plain-text-password"})
	ps := problems(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, "server.admin-token", ps[0].Path)
	assert.Equal(t, policy.RuleSecretLiteral, ps[0].Rule)
	assert.NotContains(t, err.Error(), "plain-text-password")
}
