package runtime

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

// awaitRuns waits until the route has run more than n discoveries.
func awaitRuns(t *testing.T, route *sentinelRoute, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for route.runs.Load() <= n {
		if time.Now().After(deadline) {
			t.Fatalf("no discovery after run %d within 10 s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSentinelForgedSwitchMasterDoesNotSwitch: a +switch-master naming a
// replica — one Sentinel's claim — makes caphost ask all the Sentinels
// again; they still agree on the primary, so nothing moves.
func TestSentinelForgedSwitchMasterDoesNotSwitch(t *testing.T) {
	sen := redistest.StartSentinel(t)
	r := newRuntime(t, testConfig(sentinelTestDeployment(sen)))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	require.NoError(t, dep.Ping(ctxT(t, 5*time.Second)))
	route := r.sentinels[0]
	before := route.cur.Load()
	require.Equal(t, sen.Primary().Addr(), before.addr)

	replica := sen.Replicas()[0]
	runs := route.runs.Load()
	// A Sentinel accepts no PUBLISH from clients, so the forged message is
	// handed to the route's handler as its subscription would.
	route.onSwitchMaster(fmt.Sprintf("other 127.0.0.1 %d 127.0.0.1 %d", sen.Primary().Port(), replica.Port()))
	route.onSwitchMaster("garbage")
	assert.Equal(t, runs, route.runs.Load(), "another master's message and garbage are ignored")
	route.onSwitchMaster(fmt.Sprintf("%s 127.0.0.1 %d 127.0.0.1 %d", sen.MasterName(), sen.Primary().Port(), replica.Port()))
	awaitRuns(t, route, runs)
	v := route.last.Load()
	require.NotNil(t, v)
	assert.Equal(t, "agreed", v.Outcome.String())
	assert.Equal(t, before.addr, v.Primary)
	assert.Same(t, before, route.cur.Load(), "the primary did not move")
	assert.NotZero(t, route.lastSwitch.Load(), "the message was seen")
	require.NoError(t, dep.Ping(ctxT(t, 5*time.Second)))
}

// TestSentinelDiscoveryHasItsOwnCredential: the Sentinels know only their
// discovery user and the data nodes only the data users. Discovery with
// the discovery credential and data with the data credential work; a
// configuration that gives the Sentinels the data credential finds no
// primary, and the call fails before anything was sent.
func TestSentinelDiscoveryHasItsOwnCredential(t *testing.T) {
	app := redistest.ACLUser{Name: "app", Password: "app-secret-0123456789", Rules: []string{"~*", "&*", "+@all"}}
	sen := redistest.StartSentinel(t, redistest.WithACL(app))
	discUser, discPass := sen.DiscoveryUser()
	require.NotEmpty(t, discUser)

	deployment := func(sentinelUser, sentinelPass string) policy.Deployment {
		d := sentinelTestDeployment(sen)
		d.Topology = &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs(),
			Auth: policy.Credential{User: sentinelUser, Password: policy.NewSecret([]byte(sentinelPass))}}
		d.Default = policy.Credential{User: app.Name, Password: policy.NewSecret([]byte(app.Password))}
		return d
	}

	r := newRuntime(t, testConfig(deployment(discUser, discPass)))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	require.NoError(t, dep.Ping(ctxT(t, 5*time.Second)))

	wrong := newRuntime(t, testConfig(deployment(app.Name, app.Password)))
	dep, err = wrong.Role(policy.RoleCoordination)
	require.NoError(t, err)
	err = dep.Ping(ctxT(t, 5*time.Second))
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoPrimary)
	assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
	v := wrong.sentinels[0].last.Load()
	require.NotNil(t, v)
	assert.Zero(t, v.Responded, "every Sentinel refused the data credential")
	assert.GreaterOrEqual(t, v.Failed, 2, "settled once no quorum was possible")
	assert.Nil(t, wrong.sentinels[0].cur.Load())
}

// TestSentinelChannelsHaveTheirOwnTLS: every server speaks TLS only.
// Discovery uses the Sentinel TLS settings and data the data TLS settings:
// with both set the deployment works; with only the data channel's TLS the
// Sentinels cannot be asked, and with only the Sentinel channel's the agreed
// primary cannot be confirmed — in both cases no primary is installed and
// the call fails before anything was sent.
func TestSentinelChannelsHaveTheirOwnTLS(t *testing.T) {
	sen := redistest.StartSentinel(t, redistest.WithTLS())
	m := sen.TLS()
	on := policy.TLSConfig{Enabled: true, CAFile: m.CAFile, ServerName: m.ServerName,
		CertFile: m.ClientCertFile, KeyFile: m.ClientKeyFile}
	deployment := func(sentinelTLS, dataTLS policy.TLSConfig) policy.Deployment {
		d := sentinelTestDeployment(sen)
		d.Topology = &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs(), TLS: sentinelTLS}
		d.TLS = dataTLS
		return d
	}
	for _, tc := range []struct {
		name              string
		sentinel, data    policy.TLSConfig
		works             bool
		sentinelsAnswered bool
	}{
		{name: "both", sentinel: on, data: on, works: true, sentinelsAnswered: true},
		{name: "data only", sentinel: policy.TLSConfig{}, data: on},
		{name: "sentinel only", sentinel: on, data: policy.TLSConfig{}, sentinelsAnswered: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRuntime(t, testConfig(deployment(tc.sentinel, tc.data)))
			dep, err := r.Role(policy.RoleCoordination)
			require.NoError(t, err)
			err = dep.Ping(ctxT(t, 5*time.Second))
			v := r.sentinels[0].last.Load()
			require.NotNil(t, v)
			if tc.works {
				require.NoError(t, err)
				assert.Equal(t, sen.Primary().Addr(), r.sentinels[0].cur.Load().addr)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrNoPrimary)
			assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
			assert.Nil(t, r.sentinels[0].cur.Load())
			if tc.sentinelsAnswered {
				assert.Equal(t, "agreed", v.Outcome.String(), "the Sentinels agreed; ROLE could not confirm")
			} else {
				assert.Zero(t, v.Responded)
			}
		})
	}
}
