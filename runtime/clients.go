package runtime

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/caphost/caphost/policy"
)

// protocol is RESP2 on every client: RESP3 is what enables push frames and
// with them go-redis' maintenance notifications and connection hand-off
// (which re-route in-flight work); RESP2 also keeps reply shapes identical
// for programs on every server version.
const protocol = 2

// dialerRetries is 1: one dial attempt bounded by Timeouts.Connect. Dial
// retries are safe (nothing was sent) but would multiply the connect budget
// behind the caller's back.
const dialerRetries = 1

// maxRedirects is -1, which go-redis v9.23.0 normalises to 0: one attempt
// and no redirect loop. The Cluster loop (osscluster.go, process and
// processPipeline) re-sends a command not only on MOVED/ASK/READONLY but
// also whenever shouldRetry says so — EOF, non-dial network errors and read
// timeouts of non-blocking commands, LOADING, CLUSTERDOWN, TRYAGAIN — and a
// pipeline re-sends every command of a node whose connection failed, which
// would send a write that may already have been applied a second time.
// go-redis offers no way to keep the redirect and drop the other resends, so
// the runtime follows a MOVED/ASK reply itself, exactly once
// (cluster_redirect.go), and reloads the slot map on every topology-class
// failure (topology.go).
const maxRedirects = -1

func disabledMaint() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// netDialer is the TCP dialer of every connection the runtime dials itself
// (Sentinel's, and plain TCP through the idle-check dialer). Its keep-alive
// is go-redis's own default (options.go, defaultKeepAliveConfig: probe after
// 30 s idle, give up after 3 probes 5 s apart), so a connection finds a dead
// peer as fast whichever dialer made it.
func netDialer(connect time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: connect, KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3,
	}}
}

// laneTimeouts resolves the lane's command timeout (override or deployment default).
func laneTimeouts(d policy.Deployment, lc policy.LaneConfig) (cmd time.Duration) {
	if lc.CommandTimeout > 0 {
		return lc.CommandTimeout
	}
	return d.Timeouts.Command
}

// clientName bounds CLIENT SETNAME to "<client-name>-<lane>" (slugs only:
// validation rejects host names and user data in the prefix).
func clientName(d policy.Deployment, l policy.Lane) string {
	return d.ClientName + "-" + string(l)
}

// tlsConfig builds a *tls.Config from the model (nil when disabled).
// Hostname verification stays on unless SkipVerifyHostname, in which case
// the chain is still verified against the configured roots.
func tlsConfig(t policy.TLSConfig) (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("tls ca-file: no certificate found")
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if t.SkipVerifyHostname {
		roots := cfg.RootCAs
		// Chain verification without the name check: InsecureSkipVerify
		// only disables Go's built-in check, VerifyConnection redoes the
		// chain part.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: no server certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return cfg, nil
}

// standaloneOptions are the options every plain (and Cluster node) client shares.
func standaloneOptions(d policy.Deployment, l policy.Lane, tlsCfg *tls.Config) *redis.Options {
	lc := d.Lanes[l]
	cred := d.Credential(l)
	cmdTimeout := laneTimeouts(d, lc)
	o := &redis.Options{
		ClientName:               clientName(d, l),
		Protocol:                 protocol,
		Username:                 cred.User,
		Password:                 string(cred.Password.Reveal()),
		DB:                       d.Database,
		MaxRetries:               -1,
		DialTimeout:              d.Timeouts.Connect,
		DialerRetries:            dialerRetries,
		ReadTimeout:              cmdTimeout,
		WriteTimeout:             cmdTimeout,
		ContextTimeoutEnabled:    true,
		PoolSize:                 lc.PoolSize,
		PoolTimeout:              d.Timeouts.Acquire,
		MinIdleConns:             0,
		MaxIdleConns:             lc.PoolSize,
		MaxActiveConns:           lc.PoolSize,
		PipelinePoolSize:         -1, // pipelines share the lane's bounded pool
		TLSConfig:                tlsCfg,
		DisableIdentity:          true,
		MaintNotificationsConfig: disabledMaint(),
	}
	if tlsCfg == nil && d.Timeouts.IdleCheck > 0 {
		o.Dialer = idleCheckDialer(netDialer(d.Timeouts.Connect).DialContext, d.Timeouts.IdleCheck)
	}
	return o
}

// newClient builds the go-redis client of one lane for the deployment's
// topology. Hooks are added by the caller (and, for Cluster, by the node
// factory passed here as nodeHooks).
func newClient(d policy.Deployment, l policy.Lane, nodeHooks func(*redis.Client)) (redis.UniversalClient, error) {
	dataTLS, err := tlsConfig(d.TLS)
	if err != nil {
		return nil, err
	}
	switch t := d.Topology.(type) {
	case *policy.Standalone:
		o := standaloneOptions(d, l, dataTLS)
		o.Addr = t.Endpoint
		return redis.NewClient(o), nil
	case *policy.Sentinel:
		// Built by the deployment's sentinelRoute (sentinel.go), which
		// all of its lanes share.
		return nil, fmt.Errorf("%w: deployment %q: sentinel lanes are built by newLaneClient", ErrConfig, d.ID)
	case *policy.Cluster:
		return newCluster(d, l, t, dataTLS, nodeHooks), nil
	}
	return nil, fmt.Errorf("%w: deployment %q has no topology", ErrConfig, d.ID)
}

func newCluster(d policy.Deployment, l policy.Lane, t *policy.Cluster, dataTLS *tls.Config, nodeHooks func(*redis.Client)) *redis.ClusterClient {
	base := standaloneOptions(d, l, dataTLS)
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:      append([]string(nil), t.Seeds...),
		ClientName: base.ClientName,
		// Every node client — the seeds and any node learnt later from a
		// topology change — is built here, so it carries the admission hook
		// and the guard too (go-redis does not inherit ClusterClient hooks).
		// base.Dialer is the idle-check dialer (nil with TLS or IdleCheck 0).
		Dialer: base.Dialer,
		NewClient: func(opt *redis.Options) *redis.Client {
			opt.MaintNotificationsConfig = disabledMaint()
			c := redis.NewClient(opt)
			nodeHooks(c)
			return c
		},
		MaxRedirects:          maxRedirects,
		ReadOnly:              false,
		RouteByLatency:        false,
		RouteRandomly:         false,
		Protocol:              protocol,
		Username:              base.Username,
		Password:              base.Password,
		MaxRetries:            -1,
		DialTimeout:           base.DialTimeout,
		DialerRetries:         dialerRetries,
		ReadTimeout:           base.ReadTimeout,
		WriteTimeout:          base.WriteTimeout,
		ContextTimeoutEnabled: true,
		PoolSize:              base.PoolSize,
		PoolTimeout:           base.PoolTimeout,
		MinIdleConns:          0,
		MaxIdleConns:          base.MaxIdleConns,
		MaxActiveConns:        base.MaxActiveConns,
		PipelinePoolSize:      -1,
		TLSConfig:             dataTLS,
		DisableIdentity:       true,
		// The routing-policy layer may fan a command out to several shards
		// and aggregate; a partial failure there has no single certainty.
		// Legacy routing sends each command to exactly one node.
		DisableRoutingPolicies:   true,
		MaintNotificationsConfig: disabledMaint(),
		// The backstop for a stale slot map; topology-class failures
		// refresh it sooner (topology.go).
		ClusterStateReloadInterval: stateReloadInterval,
	})
}
