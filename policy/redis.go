package policy

import "time"

// RedisConfig is the validated model of the `redis:` configuration block.
// It is produced by host/config (YAML + CAPHOST_ environment overrides,
// strict decoding, secrets resolved) and consumed by runtime.New. Only the
// deployments that a selected role references are present: an unselected
// deployment is never decoded and creates no client.
type RedisConfig struct {
	// Deployments by id (a bounded slug).
	Deployments map[string]Deployment
	// Roles binds each selected role to a deployment.
	Roles map[Role]RoleBinding
	// AllowUnsafeColocation permits a correctness role to share a deployment
	// with the cache role; readiness then reports the downgrade.
	AllowUnsafeColocation bool
	// Programs selects how catalog programs reach the server.
	Programs ProgramsConfig
	// Keys configures the key builder (namespace and digest material).
	Keys KeysConfig
	// Startup says what the host does while a role's startup handshake
	// fails (redis.startup). The zero value means the defaults of
	// StartupPolicy.WithDefaults.
	Startup StartupPolicy
}

// StartupOnFailure is what a failed startup handshake of a deployment that
// serves a required role does to startup.
type StartupOnFailure string

// Startup failure policies. Whatever the policy, readiness stays DOWN for
// the roles of a deployment whose handshake has not passed; the policy only
// decides whether startup also ends.
const (
	// StartupRetry keeps the process up and not ready, retrying with bounded
	// exponential backoff until the handshake passes (the default: an
	// outage at boot heals without a restart, and a restart loop would only
	// add a connection storm).
	StartupRetry StartupOnFailure = "retry"
	// StartupFailOnMisconfiguration ends startup on the first handshake that
	// finds a misconfiguration (wrong program digest, wrong topology, version
	// too old, NOPERM/WRONGPASS, wrong eviction policy) and retries outages.
	StartupFailOnMisconfiguration StartupOnFailure = "fail-on-misconfiguration"
	// StartupFail ends startup on the first failed handshake, whatever the
	// cause.
	StartupFail StartupOnFailure = "fail"
)

// StartupOnFailures lists the policies in documentation order.
func StartupOnFailures() []StartupOnFailure {
	return []StartupOnFailure{StartupRetry, StartupFailOnMisconfiguration, StartupFail}
}

// StartupPolicy configures the startup handshake (redis.startup).
type StartupPolicy struct {
	// OnFailure is the policy for deployments serving a required role.
	// Optional roles never end startup: they are DEGRADED until their
	// handshake passes.
	OnFailure StartupOnFailure
	// RetryInitial is the wait after the first failed attempt; each further
	// failure doubles it, up to RetryMax.
	RetryInitial time.Duration
	RetryMax     time.Duration
	// AttemptTimeout bounds one handshake attempt of one deployment.
	AttemptTimeout time.Duration
}

// Startup defaults, used for every zero field of a StartupPolicy.
const (
	DefaultStartupRetryInitial   = 500 * time.Millisecond
	DefaultStartupRetryMax       = 30 * time.Second
	DefaultStartupAttemptTimeout = 10 * time.Second
)

// WithDefaults returns p with every zero field set to its default.
func (p StartupPolicy) WithDefaults() StartupPolicy {
	if p.OnFailure == "" {
		p.OnFailure = StartupRetry
	}
	if p.RetryInitial == 0 {
		p.RetryInitial = DefaultStartupRetryInitial
	}
	if p.RetryMax == 0 {
		p.RetryMax = max(DefaultStartupRetryMax, p.RetryInitial)
	}
	if p.AttemptTimeout == 0 {
		p.AttemptTimeout = DefaultStartupAttemptTimeout
	}
	return p
}

// RoleBinding binds a role to a deployment.
type RoleBinding struct {
	Deployment string
	// Required roles make readiness DOWN when unavailable; optional ones
	// (typically cache) make it DEGRADED.
	Required bool
	// ExpectedEviction is the maxmemory-policy the startup probe expects
	// (e.g. "noeviction", "allkeys-lfu"). Empty means the role's default.
	ExpectedEviction string
}

// Deployment is one Redis deployment: a topology, credentials per lane,
// transport security, timeouts, lanes and budgets.
type Deployment struct {
	ID       string
	Topology Topology
	// Database is the logical DB (always 0 on Cluster).
	Database int
	// ClientName is the bounded CLIENT SETNAME prefix (no host names, no user data).
	ClientName string
	// Auth holds the credential per lane. A lane without an entry uses
	// Default; for the admin lane validation allows that (and any other way
	// of sharing a data lane's ACL user) only with AdminShared.
	Auth    map[Lane]Credential
	Default Credential
	// AdminShared is the operator's explicit statement (auth.admin-shared)
	// that the admin lane — CONFIG GET, FUNCTION LOAD, ACL GETUSER — may
	// authenticate as the same ACL user as a data lane, including the
	// server's default user when there is no auth at all. Without it such a
	// deployment fails validation (auth.admin-shared): the data user would
	// silently hold the admin privileges, or the admin lane would silently
	// run with the data user's.
	AdminShared bool
	TLS         TLSConfig
	Timeouts    Timeouts
	Lanes       map[Lane]LaneConfig
	Budgets     Budgets
}

// Credential returns the credential a lane authenticates with: its own
// entry, or Default.
func (d Deployment) Credential(l Lane) Credential {
	if c, ok := d.Auth[l]; ok {
		return c
	}
	return d.Default
}

// Topology is a sum type: exactly one of *Standalone, *Sentinel, *Cluster.
// The unexported method closes the set.
type Topology interface {
	TopologyKind() TopologyKind
	isTopology()
}

// TopologyKind names a topology variant.
type TopologyKind string

// Topology variants.
const (
	TopologyStandalone TopologyKind = "standalone"
	TopologySentinel   TopologyKind = "sentinel"
	TopologyCluster    TopologyKind = "cluster"
)

// Standalone is a single endpoint.
type Standalone struct {
	Endpoint string // host:port
}

// Sentinel discovers the primary of MasterName through sentinels, which have
// their own discovery credential and TLS settings.
type Sentinel struct {
	MasterName string
	Endpoints  []string
	Auth       Credential
	TLS        TLSConfig
}

// Cluster is a Redis Cluster reached through seed endpoints (DB 0 only).
type Cluster struct {
	Seeds []string
}

func (*Standalone) TopologyKind() TopologyKind { return TopologyStandalone }
func (*Sentinel) TopologyKind() TopologyKind   { return TopologySentinel }
func (*Cluster) TopologyKind() TopologyKind    { return TopologyCluster }
func (*Standalone) isTopology()                {}
func (*Sentinel) isTopology()                  {}
func (*Cluster) isTopology()                   {}

// TLSConfig is transport security for one channel. Hostname verification is
// on unless explicitly disabled.
type TLSConfig struct {
	Enabled bool
	// SkipVerifyHostname disables hostname checks (the certificate chain is
	// still verified). Defaults to false: verify.
	SkipVerifyHostname bool
	ServerName         string
	CAFile             string
	CertFile           string
	KeyFile            string
}

// Timeouts are finite bounds; none but IdleCheck may be zero after
// validation.
type Timeouts struct {
	Connect  time.Duration
	Command  time.Duration // read/write timeout for a command
	Acquire  time.Duration // pool / in-flight admission wait
	Shutdown time.Duration // drain timeout
	// IdleCheck is how long a pooled plain-TCP connection must have gone
	// without reading a reply before it is checked for a server-side close
	// (one non-blocking peek) on reuse; a connection used more recently is
	// reused unchecked, saving a system call per command. Zero checks on
	// every reuse (go-redis's own behaviour). At most MaxIdleCheck; the
	// config file's default is DefaultIdleCheck. A closed connection reused
	// inside the window fails one command Indeterminate, as a close during
	// that command would.
	IdleCheck time.Duration
}

// DefaultIdleCheck is the IdleCheck a config file gets when it sets none:
// a connection in steady use skips the check, one idle for a millisecond
// is checked.
const DefaultIdleCheck = time.Millisecond

// LaneConfig bounds one lane.
type LaneConfig struct {
	PoolSize    int
	MaxInFlight int
	// CommandTimeout overrides Timeouts.Command for this lane when > 0
	// (blocking lanes need longer ones).
	CommandTimeout time.Duration
}

// Budgets bound request and reply sizes on every command.
type Budgets struct {
	MaxRequestBytes int
	MaxReplyBytes   int
}

// ProgramMode selects how catalog programs are deployed. There is never an
// automatic fallback between modes.
type ProgramMode string

// Program modes.
const (
	ProgramsEvalshaManaged       ProgramMode = "evalsha-managed"
	ProgramsFunctionsProvisioned ProgramMode = "functions-provisioned"
)

// ProgramsConfig configures the program catalog.
type ProgramsConfig struct {
	Mode ProgramMode
}

// KeysConfig configures the key builder.
type KeysConfig struct {
	App string
	Env string
	// HMAC holds the versioned key-digest material.
	HMAC KeyMaterial
}

// KeyMaterial is versioned HMAC key material: one write version and a
// bounded set of readable versions.
type KeyMaterial struct {
	WriteVersion int
	Versions     map[int]Secret
}
