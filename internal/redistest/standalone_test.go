package redistest

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func plainClient(t *testing.T, addr string, mod func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}
	if mod != nil {
		mod(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestBinary(t *testing.T) {
	assert.NotEmpty(t, Binary(t))
}

func TestBinaryMissingHasInstallHint(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := lookBinary()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "redis-server not found: install it with `apt-get install -y redis-server`")
}

func TestStandaloneLifecycle(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := StartStandalone(t, WithConfig("maxmemory-policy", "allkeys-lfu"))
	require.NotEqual(t, "127.0.0.1:6379", s.Addr())
	assert.Nil(t, s.TLS())
	user, pass := s.AdminUser()
	assert.Empty(t, user)
	assert.Empty(t, pass)

	policy, err := s.Admin().ConfigGet(ctx, "maxmemory-policy").Result()
	require.NoError(t, err)
	assert.Equal(t, "allkeys-lfu", policy["maxmemory-policy"])

	// CommandCalls and ConnectedClients see a test client but not the harness.
	assert.Equal(t, 0, s.ConnectedClients(t))
	c := plainClient(t, s.Addr(), nil)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	assert.Equal(t, int64(0), s.CommandCalls(t, "keys"))
	assert.Equal(t, int64(1), s.CommandCalls(t, "set"))
	assert.Equal(t, 1, s.ConnectedClients(t))
	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	assert.Equal(t, int64(1), s.CommandCalls(t, "config|set"))

	// Pause: commands time out; Resume: they work again.
	s.Pause()
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = c.Ping(pctx).Err()
	cancel()
	require.Error(t, err)
	s.Resume()
	require.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 5*time.Second, 20*time.Millisecond)

	// A CONFIG REWRITE survives Restart: the config file on disk is reused.
	require.NoError(t, s.Admin().ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err())
	require.NoError(t, s.Admin().ConfigRewrite(ctx).Err())

	// Kill: refused; Restart: same address, empty dataset (no persistence).
	addr := s.Addr()
	s.Kill()
	require.Error(t, c.Ping(ctx).Err())
	s.Restart(t)
	assert.Equal(t, addr, s.Addr())
	require.NoError(t, c.Ping(ctx).Err())
	assert.Equal(t, redis.Nil, c.Get(ctx, "k").Err())
	assert.Equal(t, "volatile-ttl", s.Admin().ConfigGet(ctx, "maxmemory-policy").Val()["maxmemory-policy"])
	assert.Contains(t, s.LogTail(), "Ready to accept connections")
}

func TestACLDefaultUserOff(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := StartStandalone(t, WithACL(ACLUser{Name: "app", Password: "apppw", Rules: []string{"~ca:*", "+@all", "-@dangerous"}}))
	user, pass := s.AdminUser()
	assert.Equal(t, "admin", user)
	assert.NotEmpty(t, pass)

	err := plainClient(t, s.Addr(), nil).Ping(ctx).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NOAUTH")

	app := plainClient(t, s.Addr(), func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	require.NoError(t, app.Set(ctx, "ca:x", "1", 0).Err())
	err = app.Set(ctx, "other", "1", 0).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NOPERM")
	err = app.FlushAll(ctx).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NOPERM")
	// A rejected command still counts: it reached the server.
	assert.Equal(t, int64(1), s.CommandCalls(t, "flushall"))
	require.NoError(t, s.Admin().Ping(ctx).Err())
}

func TestInvalidOptionsRejected(t *testing.T) {
	o := buildOptions([]Option{WithConfig("maxmemory", "1\nuser x on")})
	assert.Error(t, o.validate())
	o = buildOptions([]Option{WithACL(ACLUser{Name: "admin"})})
	assert.Error(t, o.validate())
	o = buildOptions([]Option{WithACL(ACLUser{Name: "u", Rules: []string{"+@all ~*"}})})
	assert.Error(t, o.validate())
	o = buildOptions([]Option{WithACL(ACLUser{Name: "u", Rules: []string{"+@all"}})})
	assert.NoError(t, o.validate())
}

func TestTLS(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := StartStandalone(t, WithTLS(), WithACL())
	m := s.TLS()
	require.NotNil(t, m)
	assert.FileExists(t, m.CAFile)
	assert.FileExists(t, m.ClientCertFile)
	assert.FileExists(t, m.ClientKeyFile)
	user, pass := s.AdminUser()

	c := plainClient(t, s.Addr(), func(o *redis.Options) {
		o.Username, o.Password, o.TLSConfig = user, pass, m.Config()
	})
	require.NoError(t, c.Ping(ctx).Err())
	require.NoError(t, s.Admin().Ping(ctx).Err())

	// Verification by IP address works too.
	byIP := plainClient(t, s.Addr(), func(o *redis.Options) {
		cfg := m.Config()
		cfg.ServerName = "127.0.0.1"
		o.Username, o.Password, o.TLSConfig = user, pass, cfg
	})
	require.NoError(t, byIP.Ping(ctx).Err())

	plain := plainClient(t, s.Addr(), func(o *redis.Options) { o.Username, o.Password = user, pass })
	assert.Error(t, plain.Ping(ctx).Err(), "plaintext must fail on the TLS port")

	untrusted := plainClient(t, s.Addr(), func(o *redis.Options) {
		o.Username, o.Password = user, pass
		o.TLSConfig = &tls.Config{ServerName: "localhost", MinVersion: tls.VersionTLS12}
	})
	assert.Error(t, untrusted.Ping(ctx).Err(), "a client that does not trust the CA must fail")
}

func TestParseCommandCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_set:calls=3,usec=10,usec_per_call=3.33,rejected_calls=2,failed_calls=1\r\ncmdstat_config|set:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n"
	n, err := parseCommandCalls(info, "SET")
	require.NoError(t, err)
	assert.Equal(t, int64(5), n)
	n, err = parseCommandCalls(info, "config|set")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	n, err = parseCommandCalls(info, "keys")
	require.NoError(t, err)
	assert.Equal(t, int64(0), n)
	_, err = parseCommandCalls("cmdstat_get:calls=x\r\n", "get")
	assert.Error(t, err)
}

func TestCountClients(t *testing.T) {
	list := "id=1 addr=127.0.0.1:1 name=redistest-admin flags=N cmd=client|list\n" +
		"id=2 addr=127.0.0.1:2 name= flags=N cmd=get\n" +
		"id=3 addr=127.0.0.1:3 name= flags=S cmd=replconf\n" +
		"id=4 addr=127.0.0.1:4 name=sentinel-abc-cmd flags=N cmd=ping\n" +
		"id=5 addr=127.0.0.1:5 name=app flags=P cmd=subscribe\n"
	assert.Equal(t, 2, countClients(list))
}
