package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

func TestTLS(t *testing.T) {
	srv := redistest.StartStandalone(t, redistest.WithTLS())
	m := srv.TLS()
	good := policy.TLSConfig{Enabled: true, CAFile: m.CAFile, CertFile: m.ClientCertFile, KeyFile: m.ClientKeyFile}

	t.Run("verified", func(t *testing.T) {
		c, _ := regular(t, srv.Addr(), func(d *policy.Deployment) { d.TLS = good })
		require.NoError(t, c.Ping(ctxT(t, 5*time.Second)).Err())
	})

	t.Run("wrong host name fails before send", func(t *testing.T) {
		bad := good
		bad.ServerName = "not-the-server.example"
		c, _ := regular(t, srv.Addr(), func(d *policy.Deployment) { d.TLS = bad })
		err := c.Ping(ctxT(t, 5*time.Second)).Err()
		assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
	})

	t.Run("skip hostname still verifies the chain", func(t *testing.T) {
		skip := good
		skip.ServerName = "not-the-server.example"
		skip.SkipVerifyHostname = true
		c, _ := regular(t, srv.Addr(), func(d *policy.Deployment) { d.TLS = skip })
		require.NoError(t, c.Ping(ctxT(t, 5*time.Second)).Err())

		untrusted := skip
		untrusted.CAFile = ""
		c, _ = regular(t, srv.Addr(), func(d *policy.Deployment) { d.TLS = untrusted })
		err := c.Ping(ctxT(t, 5*time.Second)).Err()
		assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
	})

	t.Run("plaintext to a TLS port fails", func(t *testing.T) {
		c, _ := regular(t, srv.Addr(), nil)
		err := c.Ping(ctxT(t, 5*time.Second)).Err()
		require.Error(t, err)
		assert.False(t, outcomeOf(t, err) == certainty.Applied)
	})

	t.Run("unreadable material fails at New", func(t *testing.T) {
		d := testDeployment("main", standalone(srv.Addr()))
		d.TLS = policy.TLSConfig{Enabled: true, CAFile: "/nonexistent/ca.pem"}
		_, err := New(ctxT(t, time.Second), testConfig(d))
		require.ErrorIs(t, err, ErrConfig)
	})
}
