package programs

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

func programIDs(c *Catalog) []string {
	var ids []string
	for _, p := range c.Programs() {
		ids = append(ids, p.ID())
	}
	return ids
}

// checkVerifyBeforeDeploy asserts that a fresh deployment verifies as not
// deployed in both modes, naming every primary.
func checkVerifyBeforeDeploy(t *testing.T, c *Catalog, admin redis.UniversalClient, primaries int) {
	ctx := context.Background()
	require.NoError(t, admin.ScriptFlush(ctx).Err())
	rep, err := Verify(ctx, c, policy.ProgramsEvalshaManaged, admin, admin)
	require.ErrorIs(t, err, ErrNotDeployed)
	require.Len(t, rep.Nodes, primaries)
	for _, n := range rep.Nodes {
		assert.Equal(t, programIDs(c), n.MissingScripts, n.Addr)
	}
	rep, err = Verify(ctx, c, policy.ProgramsFunctionsProvisioned, admin, admin)
	require.ErrorIs(t, err, ErrNotDeployed)
	require.Len(t, rep.Nodes, primaries)
	for _, n := range rep.Nodes {
		assert.False(t, n.LibraryPresent, n.Addr)
	}
}

// checkVerifyAfterDeploy deploys both ways and asserts Verify passes.
func checkVerifyAfterDeploy(t *testing.T, c *Catalog, admin redis.UniversalClient, primaries int) {
	ctx := context.Background()
	require.NoError(t, Deploy(ctx, c, admin))
	rep, err := Verify(ctx, c, policy.ProgramsFunctionsProvisioned, admin, admin)
	require.NoError(t, err)
	require.True(t, rep.OK())
	require.Len(t, rep.Nodes, primaries)
	_, _, digest := c.Library()
	for _, n := range rep.Nodes {
		assert.True(t, n.LibraryPresent && n.LibraryCodeMatches && n.InfoMatches, n.Addr)
		assert.Equal(t, "ca-redis-programs-v1", n.InfoSet)
		assert.Equal(t, int64(15), n.InfoVersion)
		assert.Equal(t, digest, n.InfoDigest)
	}
	require.NoError(t, LoadScripts(ctx, c, admin))
	rep, err = Verify(ctx, c, policy.ProgramsEvalshaManaged, admin, admin)
	require.NoError(t, err)
	require.Len(t, rep.Nodes, primaries)
	for _, n := range rep.Nodes {
		assert.Empty(t, n.MissingScripts, n.Addr)
	}
}

func TestDeployVerifyStandalone(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	c := mustCatalog(t)
	admin := s.Admin()
	checkVerifyBeforeDeploy(t, c, admin, 1)
	checkVerifyAfterDeploy(t, c, admin, 1)

	// Deploy is idempotent (FUNCTION LOAD REPLACE).
	require.NoError(t, Deploy(ctx, c, admin))

	// A library with the right name but other code (an old or foreign build)
	// is detected even though its info function claims the right digest.
	name, code, _ := c.Library()
	forged := strings.Replace(code, "if #KEYS ~= 1 or #ARGV ~= 1 then return {1, 5, 0, 0} end", "if #KEYS ~= 1 then return {1, 5, 0, 0} end", 1)
	require.NotEqual(t, code, forged)
	got, err := admin.FunctionLoadReplace(ctx, forged).Result()
	require.NoError(t, err)
	require.Equal(t, name, got)
	rep, err := Verify(ctx, c, policy.ProgramsFunctionsProvisioned, admin, admin)
	require.ErrorIs(t, err, ErrNotDeployed)
	require.Len(t, rep.Nodes, 1)
	assert.True(t, rep.Nodes[0].LibraryPresent)
	assert.False(t, rep.Nodes[0].LibraryCodeMatches)

	// A library of the previous set version (the same sources, set v14)
	// fails Verify twice over: its code names v14 in its header and its info
	// function reports v14. Deploying set 15 replaces it in place: the
	// library keeps its name (function names are global in Redis, so a
	// second library could not register them alongside).
	files := embeddedCopy(t)
	manifest := files["program-set.json"]
	manifest.Data = bytes.Replace(manifest.Data, []byte(`"setVersion": 15,`), []byte(`"setVersion": 14,`), 1)
	previous, err := loadFS(files)
	require.NoError(t, err)
	require.NoError(t, Deploy(ctx, previous, admin))
	rep, err = Verify(ctx, c, policy.ProgramsFunctionsProvisioned, admin, admin)
	require.ErrorIs(t, err, ErrNotDeployed)
	assert.False(t, rep.Nodes[0].LibraryCodeMatches)
	assert.False(t, rep.Nodes[0].InfoMatches)
	assert.Equal(t, int64(14), rep.Nodes[0].InfoVersion)
	require.NoError(t, Deploy(ctx, c, admin))
	_, err = Verify(ctx, c, policy.ProgramsFunctionsProvisioned, admin, admin)
	require.NoError(t, err)

	// Partial script cache: only the missing program is named.
	require.NoError(t, admin.ScriptFlush(ctx).Err())
	for _, p := range c.Programs() {
		if p.ID() != "compare-and-expire-v1" {
			require.NoError(t, admin.ScriptLoad(ctx, p.Source()).Err())
		}
	}
	rep, err = Verify(ctx, c, policy.ProgramsEvalshaManaged, admin, admin)
	require.ErrorIs(t, err, ErrNotDeployed)
	assert.Equal(t, []string{"compare-and-expire-v1"}, rep.Nodes[0].MissingScripts)

	_, err = Verify(ctx, c, "eval", admin, admin)
	require.ErrorIs(t, err, ErrMode)
}

func TestDeployRejectsUnsupportedClient(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, MaxRetries: -1})
	t.Cleanup(func() { _ = ring.Close() })
	c := mustCatalog(t)
	err := Deploy(context.Background(), c, ring)
	require.ErrorIs(t, err, ErrUnsupportedClient)
	_, err = Verify(context.Background(), c, policy.ProgramsFunctionsProvisioned, ring, ring)
	require.ErrorIs(t, err, ErrUnsupportedClient)
}
