package runtime

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/internal/replwait"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// MinRedisVersion is the oldest server caphost runs against: Functions,
// ACL selectors and the command set the catalog assumes.
const MinRedisVersion = "7.0.0"

// CheckStatus is the result of one probe check.
type CheckStatus string

// Probe check results. Only Failed makes a probe fail; Warn marks something
// an operator should know that does not break a guarantee (for example
// evalsha-managed scripts that will be loaded on first use); Unknown means
// the probe could not find out (the admin user may not ask), which is never
// a failure.
const (
	CheckOK      CheckStatus = "ok"
	CheckWarn    CheckStatus = "warn"
	CheckUnknown CheckStatus = "unknown"
	CheckFailed  CheckStatus = "failed"
)

// Class says what kind of failure a failed check is, so that health
// reports and the startup policy can tell an operator's mistake from an
// outage. The set is closed.
type Class string

// Failure classes.
const (
	// ClassMisconfiguration: something an operator must change — a wrong
	// program digest or library version, a replica where a primary is
	// expected, a server version too old, NOPERM/WRONGPASS, a wrong
	// eviction policy, a TLS trust or hostname mismatch. Retrying alone
	// does not heal it.
	ClassMisconfiguration Class = "misconfiguration"
	// ClassOutage: the deployment is unavailable or busy — refused, timed
	// out, LOADING, BUSY, cluster down, failover in progress, OOM. It may
	// heal by itself.
	ClassOutage Class = "outage"
)

// Probe check names, in the order they run (the runtime handshake of the
// configuration design: connection and auth, role and topology, version,
// cluster coverage, programs, an ephemeral write/read, a capability's
// replica-wait profile — only when one is expected — and role attestation).
const (
	CheckAuth            = "auth"
	CheckTopology        = "topology"
	CheckVersion         = "version"
	CheckClusterCoverage = "cluster-coverage"
	CheckPrograms        = "programs"
	CheckWriteRead       = "write-read"
	CheckReplication     = "replication"
	CheckEviction        = "eviction-policy"
	CheckPersistence     = "persistence"
	CheckDefaultUser     = "default-user"
)

// Check is one probe result. Detail is bounded operator text: lane names,
// server error codes, versions, digests, policies — never endpoints,
// credentials, user names, keys or raw server messages. Class is set
// exactly when Status is CheckFailed.
type Check struct {
	Name   string      `json:"name"`
	Status CheckStatus `json:"status"`
	Class  Class       `json:"class,omitempty"`
	Detail string      `json:"detail"`
}

// DeploymentProbe is the probe of one deployment.
type DeploymentProbe struct {
	Deployment string              `json:"deployment"`
	Topology   policy.TopologyKind `json:"topology"`
	Roles      []policy.Role       `json:"roles"`
	Checks     []Check             `json:"checks"`
	// Identity is the run id of the primary the probe saw (standalone and
	// sentinel; "" on cluster or when unreadable). Live compares it, so a
	// restarted or replaced primary — which may have lost the Functions
	// library — is proven again instead of being trusted.
	Identity string `json:"-"`
}

// Failed reports whether any check failed.
func (d DeploymentProbe) Failed() bool { return d.Class() != "" }

// Class is the class of the probe's failure: ClassMisconfiguration when any
// failed check is one (an operator must act, whatever else is wrong),
// otherwise ClassOutage when any check failed, otherwise "".
func (d DeploymentProbe) Class() Class {
	var c Class
	for _, ch := range d.Checks {
		if ch.Status != CheckFailed {
			continue
		}
		if ch.Class == ClassMisconfiguration {
			return ClassMisconfiguration
		}
		c = ClassOutage
	}
	return c
}

// ProbeReport is the result of Probe, one entry per deployment (sorted by id).
type ProbeReport struct {
	Deployments []DeploymentProbe `json:"deployments"`
}

// ErrProbeFailed is matched by ProbeReport.Err when any check failed.
var ErrProbeFailed = errors.New("redis startup probe failed")

// errACLReply is an ACL GETUSER reply of a shape the probe does not know.
var errACLReply = errors.New("ACL GETUSER reply without flags")

// ErrUnknownDeployment is returned for a deployment id no selected role uses.
var ErrUnknownDeployment = errors.New("redis deployment is not selected")

// Err returns nil when no check failed, otherwise an error naming every
// failed check (matching ErrProbeFailed).
func (p ProbeReport) Err() error {
	var failed []string
	for _, d := range p.Deployments {
		for _, c := range d.Checks {
			if c.Status == CheckFailed {
				failed = append(failed, d.Deployment+"/"+c.Name+" ("+string(c.Class)+"): "+c.Detail)
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrProbeFailed, strings.Join(failed, "; "))
}

// Probe runs the startup checks against every selected deployment: every
// lane authenticates; the server is a writable primary (standalone,
// sentinel) or a covered cluster; its version is at least MinRedisVersion;
// the program catalog is present with the exact digests in the configured
// mode; an ephemeral key in the probe namespace can be written, read and
// deleted through the guarded regular lane; the maxmemory-policy matches
// what each role expects; when a capability on the deployment's roles
// sends WAIT (ExpectReplicaWait), the script lane's WAIT is admitted on
// every primary and enough replicas are online (too few warns, never
// fails: see replicationCheck); persistence is attested (warned, never
// failed: see persistenceCheck); and whether the server's default user is
// enabled is reported. Probe never mutates anything but its own
// short-lived probe key (WAIT writes nothing). It runs every check even
// after a failure, so one report lists every problem, and classifies every
// failure (Check.Class).
func (r *Runtime) Probe(ctx context.Context) ProbeReport {
	rep := ProbeReport{Deployments: make([]DeploymentProbe, len(r.deps))}
	var wg sync.WaitGroup
	for i, d := range r.deps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep.Deployments[i] = r.probeDeployment(ctx, d)
		}()
	}
	wg.Wait()
	return rep
}

// ProbeDeployment runs Probe's checks against one selected deployment (the
// per-deployment startup handshake), or returns ErrUnknownDeployment.
func (r *Runtime) ProbeDeployment(ctx context.Context, id string) (DeploymentProbe, error) {
	d, err := r.deployment(id)
	if err != nil {
		return DeploymentProbe{}, err
	}
	return r.probeDeployment(ctx, d), nil
}

func (r *Runtime) deployment(id string) (*Deployment, error) {
	for _, d := range r.deps {
		if d.id == id {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownDeployment, id)
}

func (r *Runtime) rolesOf(d *Deployment) []policy.Role {
	var out []policy.Role
	for _, role := range r.Roles() {
		if r.roles[role] == d {
			out = append(out, role)
		}
	}
	return out
}

func (r *Runtime) probeDeployment(ctx context.Context, d *Deployment) DeploymentProbe {
	dp := DeploymentProbe{Deployment: d.id, Topology: d.topology, Roles: r.rolesOf(d)}
	add := func(name string, st CheckStatus, class Class, detail string) {
		if st != CheckFailed {
			class = ""
		} else if class == "" {
			class = ClassOutage // a failure is never unclassified
		}
		dp.Checks = append(dp.Checks, Check{Name: name, Status: st, Class: class, Detail: detail})
	}
	admin := d.client(policy.LaneAdmin)

	// 1. Every lane authenticates with its own credential.
	var (
		bad      []string
		badClass Class
	)
	for _, l := range policy.Lanes() {
		if err := pingLane(ctx, d.client(l)); err != nil {
			bad = append(bad, string(l)+" ("+errCode(err)+")")
			badClass = worse(badClass, classOf(err, d.topology))
		}
	}
	if len(bad) > 0 {
		add(CheckAuth, CheckFailed, badClass, "lanes failed PING: "+strings.Join(bad, ", "))
		// Nothing else can succeed without a connection; say so once.
		for _, n := range []string{CheckTopology, CheckVersion, CheckPrograms, CheckWriteRead, CheckEviction} {
			add(n, CheckFailed, badClass, "not checked: lanes cannot connect")
		}
		if _, ok := r.waits.forRoles(dp.Roles); ok {
			add(CheckReplication, CheckFailed, badClass, "not checked: lanes cannot connect")
		}
		for _, n := range []string{CheckPersistence, CheckDefaultUser} {
			add(n, CheckUnknown, "", "not checked: lanes cannot connect")
		}
		return dp
	}
	add(CheckAuth, CheckOK, "", "all lanes authenticated (regular, script, blocking, pubsub, admin)")

	// 2. Role / topology, 3. version, 8. attestation: per primary.
	facts, topoErr := r.collectFacts(ctx, admin)
	if d.topology != policy.TopologyCluster && len(facts) == 1 {
		dp.Identity = facts[0].runID
	}

	// Topology.
	switch {
	case topoErr != nil:
		add(CheckTopology, CheckFailed, classOf(topoErr, d.topology), "cannot reach every primary: "+errCode(topoErr))
	case len(facts) == 0:
		add(CheckTopology, CheckFailed, ClassOutage, "no primary answered")
	default:
		add(topologyCheck(d.topology, facts))
	}

	// Version.
	if len(facts) > 0 {
		add(versionCheck(facts))
	}

	// 4. Cluster coverage.
	// Per primary of the slot map (cluster_coverage.go).
	if cc, ok := admin.(*redis.ClusterClient); ok {
		if cov := checkCoverage(ctx, cc); cov.ok() {
			add(CheckClusterCoverage, CheckOK, "", cov.detail())
		} else {
			add(CheckClusterCoverage, CheckFailed, cov.class(d.topology), cov.detail())
		}
	}

	// 5.–6. Programs: availability and digests.
	add(r.programsCheck(ctx, d, admin))

	// 7. Ephemeral write/read in the probe namespace on the regular lane,
	// through the guard, with the data user's ACL.
	add(r.writeRead(ctx, d))

	// 7b. The replica-wait profile of a capability on these roles: WAIT
	// admitted on the script lane of every primary, and enough replicas.
	if p, ok := r.waits.forRoles(dp.Roles); ok {
		add(replicationCheck(p, facts, waitOnPrimaries(ctx, d.client(policy.LaneScript), p), d.topology))
	}

	// 8. Role attestation: eviction policy, persistence; and the default user.
	if len(facts) > 0 {
		add(r.evictionCheck(dp.Roles, facts))
		add(persistenceCheck(dp.Roles, facts))
		add(defaultUserCheck(facts))
	}
	return dp
}

// collectFacts reads ROLE, INFO, CONFIG GET and ACL GETUSER default from
// every primary on the admin lane. The per-node sequences run one at a
// time: the admin lane's in-flight bound is usually 1, and concurrent
// callbacks would queue on admission with its short acquire timeout
// instead of on this mutex.
func (r *Runtime) collectFacts(ctx context.Context, admin redis.UniversalClient) ([]nodeFacts, error) {
	var (
		mu    sync.Mutex
		seq   sync.Mutex
		facts []nodeFacts
	)
	collect := func(ctx context.Context, c *redis.Client) error {
		seq.Lock()
		defer seq.Unlock()
		f := readFacts(ctx, c)
		mu.Lock()
		facts = append(facts, f)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := admin.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, collect)
	case *redis.Client:
		err = collect(ctx, c)
	default:
		err = fmt.Errorf("unsupported client %T", admin)
	}
	return facts, err
}

// nodeFacts is what the probe reads from one primary. Every string is
// bounded by the reader (server-controlled text never reaches a detail).
type nodeFacts struct {
	role                string
	roleErr             error
	version, runID      string
	infoErr             error
	aof                 bool
	rdbStatus, aofWrite string // "ok", "err" or ""
	replicas            string // connected_slaves
	online              int    // replicas in state online (the ones WAIT counts)
	eviction, fsync     string
	save                string // the save points, "" when RDB snapshots are off
	configErr           error
	defaultUser         string // "off", "on", "on-nopass", "absent"; "" when aclErr
	aclErr              error
}

func readFacts(ctx context.Context, c *redis.Client) nodeFacts {
	var f nodeFacts
	if vals, err := c.Do(ctx, "ROLE").Slice(); err != nil {
		f.roleErr = err
	} else if len(vals) > 0 {
		s, _ := vals[0].(string)
		f.role = boundedWord(s)
	}
	if info, err := c.Info(ctx, "server", "persistence", "replication").Result(); err != nil {
		f.infoErr = err
	} else {
		f.version = boundedWord(infoField(info, "redis_version"))
		f.runID = boundedWord(infoField(info, "run_id"))
		f.aof = infoField(info, "aof_enabled") == "1"
		f.rdbStatus = boundedWord(infoField(info, "rdb_last_bgsave_status"))
		f.aofWrite = boundedWord(infoField(info, "aof_last_write_status"))
		f.replicas = boundedWord(infoField(info, "connected_slaves"))
		f.online = onlineReplicas(info)
	}
	cfg := redis.NewMapStringStringCmd(ctx, "config", "get", "maxmemory-policy", "appendfsync", "save")
	if err := c.Process(ctx, cfg); err != nil {
		f.configErr = err
	} else {
		m := cfg.Val()
		f.eviction = boundedWord(m["maxmemory-policy"])
		f.fsync = boundedWord(m["appendfsync"])
		f.save = savePoints(m["save"])
	}
	f.defaultUser, f.aclErr = defaultUserState(ctx, c)
	return f
}

// defaultUserState asks ACL GETUSER default and reduces the reply to its
// enabled flag; the rest of the reply (password hashes, rules) is dropped
// unread.
func defaultUserState(ctx context.Context, c *redis.Client) (string, error) {
	v, err := c.Do(ctx, "acl", "getuser", "default").Result()
	if errors.Is(err, redis.Nil) {
		return "absent", nil
	}
	if err != nil {
		return "", err
	}
	var flags any
	switch m := v.(type) {
	case map[any]any: // RESP3
		flags = m["flags"]
	case map[string]any:
		flags = m["flags"]
	case []any: // RESP2: field, value, ...
		for i := 0; i+1 < len(m); i += 2 {
			if k, _ := m[i].(string); k == "flags" {
				flags = m[i+1]
			}
		}
	}
	list, ok := flags.([]any)
	if !ok {
		return "", errACLReply
	}
	on, nopass := false, false
	for _, x := range list {
		switch s, _ := x.(string); s {
		case "on":
			on = true
		case "nopass":
			nopass = true
		}
	}
	switch {
	case !on:
		return "off", nil
	case nopass:
		return "on-nopass", nil
	}
	return "on", nil
}

func topologyCheck(topo policy.TopologyKind, facts []nodeFacts) (string, CheckStatus, Class, string) {
	var (
		notPrimary int
		errClass   Class
		codes      []string
	)
	for _, f := range facts {
		switch {
		case f.roleErr != nil:
			errClass = worse(errClass, classOf(f.roleErr, topo))
			if c := errCode(f.roleErr); !slices.Contains(codes, c) {
				codes = append(codes, c)
			}
		case f.role != "master":
			notPrimary++
		}
	}
	switch {
	case errClass != "":
		return CheckTopology, CheckFailed, errClass, "ROLE: " + strings.Join(codes, ", ")
	case notPrimary > 0:
		// A standalone endpoint that is a replica is a configuration error;
		// on sentinel and cluster a non-primary in the primary set is a
		// failover in progress.
		class := ClassOutage
		if topo == policy.TopologyStandalone {
			class = ClassMisconfiguration
		}
		return CheckTopology, CheckFailed, class, fmt.Sprintf("%d of %d nodes are not writable primaries (ROLE)", notPrimary, len(facts))
	}
	return CheckTopology, CheckOK, "", fmt.Sprintf("%s: %d writable primar%s", topo, len(facts), plural(len(facts), "y", "ies"))
}

func versionCheck(facts []nodeFacts) (string, CheckStatus, Class, string) {
	var (
		low     []string
		unknown Class
	)
	for _, f := range facts {
		switch {
		case f.infoErr != nil:
			unknown = worse(unknown, classOf(f.infoErr, ""))
		case f.version == "":
			unknown = worse(unknown, ClassMisconfiguration)
		case !versionAtLeast(f.version, MinRedisVersion):
			low = append(low, f.version)
		}
	}
	switch {
	case unknown != "":
		return CheckVersion, CheckFailed, unknown, "server version unreadable (INFO server; grant +info to the admin lane user); caphost never guesses it"
	case len(low) > 0:
		return CheckVersion, CheckFailed, ClassMisconfiguration, "server version " + strings.Join(low, ", ") + " < " + MinRedisVersion
	}
	return CheckVersion, CheckOK, "", "redis " + facts[0].version + " ≥ " + MinRedisVersion
}

// programsCheck verifies the catalog on every primary. In
// functions-provisioned mode a library that differs from the catalog is
// named by the set, version and digest it reports against the ones
// expected; that is a misconfiguration however the verification ended.
func (r *Runtime) programsCheck(ctx context.Context, d *Deployment, admin redis.UniversalClient) (string, CheckStatus, Class, string) {
	prep, err := programs.Verify(ctx, r.progs, r.mode, admin, d.client(policy.LaneScript))
	if r.mode == policy.ProgramsFunctionsProvisioned {
		if msg := libraryMismatch(r.progs, prep); msg != "" {
			return CheckPrograms, CheckFailed, ClassMisconfiguration, msg + "; run `caphost programs deploy`"
		}
	}
	switch {
	case err == nil:
		return CheckPrograms, CheckOK, "", programsDetail(r.mode, prep)
	case errors.Is(err, programs.ErrNotDeployed) && r.mode == policy.ProgramsEvalshaManaged:
		// EVALSHA loads the embedded source on an exact NOSCRIPT, and the SHA
		// is the digest: a missing script is loaded, never a wrong one run.
		return CheckPrograms, CheckWarn, "", programsDetail(r.mode, prep) + "; missing scripts load on first use (or run `caphost programs deploy`)"
	case errors.Is(err, programs.ErrNotDeployed):
		return CheckPrograms, CheckFailed, ClassMisconfiguration, programsDetail(r.mode, prep) + "; run `caphost programs deploy`"
	}
	return CheckPrograms, CheckFailed, classOf(err, d.topology), "cannot verify programs: " + errCode(err)
}

// libraryMismatch describes a deployed Functions library that is present
// but not the catalog's, or "" when there is none.
func libraryMismatch(cat *programs.Catalog, rep programs.Report) string {
	name, _, digest := cat.Library()
	set, version := cat.ProgramSet()
	var (
		wrong, tampered int
		seen            string
	)
	for _, n := range rep.Nodes {
		switch {
		case !n.LibraryPresent:
		case n.InfoSet != "" && !n.InfoMatches:
			wrong++
			if seen == "" {
				seen = fmt.Sprintf("set %s v%d digest %s", boundedWord(n.InfoSet), n.InfoVersion, boundedWord(n.InfoDigest))
			}
		case !n.LibraryCodeMatches:
			tampered++
		}
	}
	want := fmt.Sprintf("set %s v%d digest %s", set, version, digest)
	switch {
	case wrong > 0:
		return fmt.Sprintf("library %s on %d of %d primaries reports %s, want %s", name, wrong, len(rep.Nodes), seen, want)
	case tampered > 0:
		return fmt.Sprintf("library %s on %d of %d primaries differs from the catalog's code (want %s)", name, tampered, len(rep.Nodes), want)
	}
	return ""
}

func (r *Runtime) writeRead(ctx context.Context, d *Deployment) (string, CheckStatus, Class, string) {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	k, err := r.keys.Build(keys.Spec{Capability: keys.CapProbe, Region: "startup", KeyVersion: 1, Kind: "probe", Parts: [][]byte{nonce}})
	if err != nil {
		return CheckWriteRead, CheckFailed, ClassMisconfiguration, "probe key: " + err.Error()
	}
	c := d.client(policy.LaneRegular)
	want := fmt.Sprintf("caphost-probe-%x", nonce)
	if err := c.Set(ctx, k.Redis(), want, 10*time.Second).Err(); err != nil {
		return CheckWriteRead, CheckFailed, classOf(err, d.topology), "SET with TTL: " + errCode(err)
	}
	got, err := c.Get(ctx, k.Redis()).Result()
	if err != nil {
		return CheckWriteRead, CheckFailed, classOf(err, d.topology), "GET: " + errCode(err)
	}
	if got != want {
		return CheckWriteRead, CheckFailed, ClassMisconfiguration, "read back a different value"
	}
	if err := c.Del(ctx, k.Redis()).Err(); err != nil {
		return CheckWriteRead, CheckFailed, classOf(err, d.topology), "DEL: " + errCode(err)
	}
	return CheckWriteRead, CheckOK, "", "SET PX / GET / DEL of an ephemeral " + r.keys.Namespace() + "probe key"
}

// evictionCheck compares every primary's maxmemory-policy with what each
// role on the deployment expects. A correctness role on an evicting (or
// unverifiable) deployment fails: an unverifiable guarantee is never
// assumed. A cache role with an unexpected policy only warns.
func (r *Runtime) evictionCheck(roles []policy.Role, facts []nodeFacts) (string, CheckStatus, Class, string) {
	status, class, details := CheckOK, Class(""), []string(nil)
	for _, role := range roles {
		want := expectedEviction(role, r.bindings[role])
		for _, f := range facts {
			if f.configErr == nil && slices.Contains(want, f.eviction) {
				continue
			}
			have := f.eviction
			if f.configErr != nil {
				have = "unreadable (" + errCode(f.configErr) + ")"
			}
			st := CheckWarn
			if role.Correctness() {
				st = CheckFailed
				c := ClassMisconfiguration
				if f.configErr != nil {
					c = classOf(f.configErr, "")
				}
				class = worse(class, c)
			}
			if st == CheckFailed || status == CheckOK {
				status = st
			}
			msg := fmt.Sprintf("role %s expects %s, a primary has %s", role, strings.Join(want, " or "), have)
			if f.configErr != nil {
				msg += " (grant +config|get to the admin lane user)"
			}
			if !slices.Contains(details, msg) {
				details = append(details, msg)
			}
		}
	}
	if status == CheckOK {
		policies := []string{}
		for _, f := range facts {
			if !slices.Contains(policies, f.eviction) {
				policies = append(policies, f.eviction)
			}
		}
		return CheckEviction, CheckOK, "", "maxmemory-policy " + strings.Join(policies, ", ") + " fits roles " + joinRoles(roles)
	}
	return CheckEviction, status, class, strings.Join(details, "; ")
}

// persistenceCheck attests what the correctness roles need from
// persistence (reference §4: coordination and session expect AOF with an
// RPO the operator states; cache needs none) and reports it. It warns and
// never fails: the host cannot know the product's RPO, asynchronous
// replication loses acknowledged writes whatever is configured, so no
// setting makes those roles loss-free, and failing readiness over a
// durability risk would turn it into an outage of every instance. A save
// that is failing right now warns too; when it makes the server refuse
// writes (MISCONF), the write/read check and the live check fail instead.
func persistenceCheck(roles []policy.Role, facts []nodeFacts) (string, CheckStatus, Class, string) {
	correctness := []string(nil)
	for _, r := range roles {
		if r.Correctness() {
			correctness = append(correctness, string(r))
		}
	}
	var (
		unreadable        bool
		noAOF, failing    int
		fsyncs, saves     []string
		replicas          []string
		anyRDB, anyNoSave bool
	)
	for _, f := range facts {
		if f.infoErr != nil || f.configErr != nil {
			unreadable = true
			continue
		}
		if f.rdbStatus == "err" || f.aofWrite == "err" {
			failing++
		}
		if f.aof {
			if !slices.Contains(fsyncs, f.fsync) {
				fsyncs = append(fsyncs, f.fsync)
			}
		} else {
			noAOF++
		}
		if f.save == "" {
			anyNoSave = true
		} else {
			anyRDB = true
			if !slices.Contains(saves, f.save) {
				saves = append(saves, f.save)
			}
		}
		if !slices.Contains(replicas, f.replicas) {
			replicas = append(replicas, f.replicas)
		}
	}
	if unreadable {
		return CheckPersistence, CheckUnknown, "", "INFO persistence or CONFIG GET appendonly/save unreadable (grant +info and +config|get to the admin lane user)"
	}
	facts1 := []string{}
	if len(fsyncs) > 0 {
		facts1 = append(facts1, "aof on "+strconv.Itoa(len(facts)-noAOF)+" of "+strconv.Itoa(len(facts))+" primaries (appendfsync "+strings.Join(fsyncs, ", ")+")")
	} else {
		facts1 = append(facts1, "aof off")
	}
	switch {
	case anyRDB && anyNoSave:
		facts1 = append(facts1, "rdb snapshots on some primaries only")
	case anyRDB:
		facts1 = append(facts1, "rdb save "+strings.Join(saves, " | "))
	default:
		facts1 = append(facts1, "no rdb snapshots")
	}
	facts1 = append(facts1, "replicas per primary: "+strings.Join(replicas, ", "))
	summary := strings.Join(facts1, "; ")
	var warns []string
	if failing > 0 {
		warns = append(warns, fmt.Sprintf("%d of %d primaries report a failing save (rdb_last_bgsave_status or aof_last_write_status err)", failing, len(facts)))
	}
	if len(correctness) > 0 && noAOF > 0 {
		loss := "a restart loses every record of roles " + strings.Join(correctness, ", ")
		if anyRDB {
			loss = "a restart loses the writes since the last snapshot"
		}
		warns = append(warns, fmt.Sprintf("roles %s expect AOF and %d of %d primaries run without it: %s", strings.Join(correctness, ", "), noAOF, len(facts), loss))
	}
	if len(warns) > 0 {
		return CheckPersistence, CheckWarn, "", strings.Join(warns, "; ") + " (" + summary + ")"
	}
	if len(correctness) == 0 {
		return CheckPersistence, CheckOK, "", "cache needs no persistence (" + summary + ")"
	}
	return CheckPersistence, CheckOK, "", summary
}

// defaultUserCheck reports whether the server's default user is enabled
// (reference §10: disabled in production). Enabled warns; an admin user
// that may not ask (NOPERM, or the lane's guard) is unknown, not a failure.
func defaultUserCheck(facts []nodeFacts) (string, CheckStatus, Class, string) {
	var on, nopass, unknown int
	code := ""
	for _, f := range facts {
		switch {
		case f.aclErr != nil:
			unknown++
			code = errCode(f.aclErr)
		case f.defaultUser == "on":
			on++
		case f.defaultUser == "on-nopass":
			on++
			nopass++
		}
	}
	n := len(facts)
	switch {
	case unknown > 0:
		return CheckDefaultUser, CheckUnknown, "", fmt.Sprintf("ACL GETUSER default refused on %d of %d primaries (%s); grant +acl|getuser to the admin lane user to find out", unknown, n, code)
	case nopass > 0:
		return CheckDefaultUser, CheckWarn, "", fmt.Sprintf("the default user is enabled without a password on %d of %d primaries: any connection gets its permissions; disable it (ACL SETUSER default off)", nopass, n)
	case on > 0:
		return CheckDefaultUser, CheckWarn, "", fmt.Sprintf("the default user is enabled (with a password) on %d of %d primaries; disable it in production (ACL SETUSER default off)", on, n)
	}
	return CheckDefaultUser, CheckOK, "", "the default user is disabled"
}

// ReplicaWaitProfile is a capability's replica-acknowledgement profile: its
// programs on Role are followed by WAIT Acks Timeout on the script lane
// (the fenced lease's capabilities.fenced-lease.replication). The startup
// probe proves it on the deployment serving Role (CheckReplication).
type ReplicaWaitProfile struct {
	Role    policy.Role
	Acks    int
	Timeout time.Duration
}

// ErrReplicaWaitProfile is matched by ExpectReplicaWait's error for a
// profile out of the hard bounds (1..16 replicas, 1ms..5s).
var ErrReplicaWaitProfile = errors.New("replica-wait profile out of bounds")

// ExpectReplicaWait makes every later Probe and ProbeDeployment of the
// deployment serving p.Role run CheckReplication: the script lane's WAIT
// admitted on every primary (through the guard, under the grant the
// capability's calls carry, as its ACL user) and the online replicas of
// each primary compared with p.Acks. The host calls it for a capability
// whose configuration asks for replica acknowledgements before the
// startup handshake starts; fenced.New calls it too, so an embedder's
// later probes prove the profile. The same profile twice counts once. An
// unselected role is a *RoleError; a profile out of bounds matches
// ErrReplicaWaitProfile.
func (r *Runtime) ExpectReplicaWait(p ReplicaWaitProfile) error {
	if _, err := r.Role(p.Role); err != nil {
		return err
	}
	if g := (replwait.Grant{Acks: p.Acks, Timeout: p.Timeout}); !g.Valid() || p.Timeout%time.Millisecond != 0 {
		return fmt.Errorf("%w: acks %d, timeout %s", ErrReplicaWaitProfile, p.Acks, p.Timeout)
	}
	r.waits.add(p)
	return nil
}

// replicaWaits are the profiles the probe proves.
type replicaWaits struct {
	mu sync.Mutex
	ps []ReplicaWaitProfile
}

func (w *replicaWaits) add(p ReplicaWaitProfile) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Contains(w.ps, p) {
		w.ps = append(w.ps, p)
	}
}

// forRoles returns the profile to prove on a deployment serving roles: the
// one asking for the most replicas (the strictest; every profile uses the
// same script lane), or false when none applies.
func (w *replicaWaits) forRoles(roles []policy.Role) (ReplicaWaitProfile, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var (
		best ReplicaWaitProfile
		ok   bool
	)
	for _, p := range w.ps {
		if slices.Contains(roles, p.Role) && (!ok || p.Acks > best.Acks) {
			best, ok = p, true
		}
	}
	return best, ok
}

// probeWaitTimeout is the timeout of the probe's WAIT: the shortest the
// guard admits (0 would block forever), so the probe answers at once when
// the wanted replicas have caught up with the connection and within the
// server's timer resolution (about 100 ms at hz 10) when they have not.
const probeWaitTimeout = time.Millisecond

// waitResult is one primary's answer to the probe's WAIT.
type waitResult struct {
	n   int64
	err error
}

// waitOnPrimaries sends WAIT p.Acks 1 on the script lane to every primary
// (the lane client on standalone and Sentinel, each primary's node client
// on Cluster), under the grant p's capability calls carry: the same ACL
// user, lane, guard and grant as a replicated program call, so a missing
// +wait shows here as it would on the first acquire. WAIT writes nothing.
// The calls run one at a time (the lane's in-flight bound).
func waitOnPrimaries(ctx context.Context, script redis.UniversalClient, p ReplicaWaitProfile) []waitResult {
	gctx := replwait.With(ctx, replwait.Grant{Acks: p.Acks, Timeout: p.Timeout})
	var (
		mu  sync.Mutex
		out []waitResult
	)
	wait := func(ctx context.Context, c *redis.Client) error {
		n, err := c.Wait(ctx, p.Acks, probeWaitTimeout).Result()
		mu.Lock()
		out = append(out, waitResult{n: n, err: err})
		mu.Unlock()
		return nil
	}
	var err error
	switch c := script.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(gctx, wait)
	case *redis.Client:
		err = wait(gctx, c)
	default:
		err = fmt.Errorf("unsupported client %T", script)
	}
	if err != nil {
		out = append(out, waitResult{err: err})
	}
	return out
}

// replicationCheck judges the probe's WAIT answers and every primary's
// online replicas against profile p (docs/replication.md, "Proven at
// start-up"). A WAIT refused — NOPERM (the script lane's ACL user lacks
// +wait) or caphost's guard — fails as a misconfiguration: every
// replicated call would fail closed, and retrying never heals it; a WAIT
// that did not answer fails as an outage. Fewer online replicas than acks
// on a primary warns and never fails: the configuration does not say how
// many replicas a deployment has, so a shortage is the deployment's state
// (a replica restarting, a failover not yet healed) and not provably a
// mistake; the capability fails closed by itself (NOT_REPLICATED) while
// it lasts, and failing the handshake would take readiness from every
// capability on the role for it. The replica count is INFO replication's
// replicas in state online (the ones WAIT counts), or the WAIT's own count
// when INFO is unreadable.
func replicationCheck(p ReplicaWaitProfile, facts []nodeFacts, waits []waitResult, topo policy.TopologyKind) (string, CheckStatus, Class, string) {
	var (
		refused, lost int
		class         Class
		codes         []string
	)
	for _, w := range waits {
		if w.err == nil {
			continue
		}
		class = worse(class, classOf(w.err, topo))
		if classOf(w.err, topo) == ClassMisconfiguration {
			refused++
		} else {
			lost++
		}
		if c := errCode(w.err); !slices.Contains(codes, c) {
			codes = append(codes, c)
		}
	}
	n := len(waits)
	switch {
	case refused > 0:
		fix := "the command guard refused it"
		if slices.Contains(codes, "NOPERM") {
			fix = "grant +wait to the script lane's data user"
		}
		return CheckReplication, CheckFailed, ClassMisconfiguration, fmt.Sprintf(
			"WAIT refused on the script lane of %d of %d primar%s (%s): %s; replication acks %d sends WAIT after "+
				"every fenced acquire and counter provision, which fail closed (NOT_REPLICATED) until then",
			refused, n, plural(n, "y", "ies"), strings.Join(codes, ", "), fix, p.Acks)
	case lost > 0:
		return CheckReplication, CheckFailed, class, fmt.Sprintf("WAIT on the script lane failed on %d of %d primar%s (%s)",
			lost, n, plural(n, "y", "ies"), strings.Join(codes, ", "))
	}
	counts, source := make([]int, 0, len(facts)), "online replicas"
	for _, f := range facts {
		if f.infoErr != nil {
			counts = counts[:0]
			break
		}
		counts = append(counts, f.online)
	}
	if len(counts) == 0 {
		source = "replicas acknowledging WAIT (INFO replication unreadable)"
		for _, w := range waits {
			counts = append(counts, int(w.n))
		}
	}
	short, seen := 0, []string{}
	for _, c := range counts {
		if c < p.Acks {
			short++
		}
		if s := strconv.Itoa(c); !slices.Contains(seen, s) {
			seen = append(seen, s)
		}
	}
	if short > 0 {
		return CheckReplication, CheckWarn, "", fmt.Sprintf(
			"replication acks %d, but %d of %d primar%s ha%s fewer %s (per primary: %s): every fenced acquire and counter provision there "+
				"answers NOT_REPLICATED after %s until %d replica%s online; WAIT admitted on the script lane",
			p.Acks, short, len(counts), plural(len(counts), "y", "ies"), plural(short, "s", "ve"), source, strings.Join(seen, ", "),
			p.Timeout, p.Acks, plural(p.Acks, " is", "s are"))
	}
	return CheckReplication, CheckOK, "", fmt.Sprintf("WAIT admitted on the script lane of %d primar%s; %s per primary: %s ≥ acks %d",
		n, plural(n, "y", "ies"), source, strings.Join(seen, ", "), p.Acks)
}

// onlineReplicas counts INFO replication's replica lines in state online
// ("slave0:ip=…,port=…,state=online,offset=…,lag=…"): the replicas WAIT
// counts. Nothing else of those lines is kept.
func onlineReplicas(info string) int {
	n := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		id, isReplica := strings.CutPrefix(name, "slave")
		if !ok || !isReplica || id == "" || strings.Trim(id, "0123456789") != "" {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if kv == "state=online" {
				n++
				break
			}
		}
	}
	return n
}

func joinRoles(roles []policy.Role) string {
	s := make([]string, len(roles))
	for i, r := range roles {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

func expectedEviction(role policy.Role, b policy.RoleBinding) []string {
	if b.ExpectedEviction != "" {
		return []string{b.ExpectedEviction}
	}
	if role.Correctness() {
		return []string{"noeviction"}
	}
	return []string{"allkeys-lfu", "allkeys-lru"}
}

func programsDetail(mode policy.ProgramMode, rep programs.Report) string {
	var missing int
	for _, n := range rep.Nodes {
		missing += len(n.MissingScripts)
	}
	switch mode {
	case policy.ProgramsEvalshaManaged:
		if missing == 0 {
			return fmt.Sprintf("evalsha-managed: every script cached on %d primar%s", len(rep.Nodes), plural(len(rep.Nodes), "y", "ies"))
		}
		return fmt.Sprintf("evalsha-managed: %d script(s) not yet cached across %d primar%s", missing, len(rep.Nodes), plural(len(rep.Nodes), "y", "ies"))
	default:
		ok := 0
		for _, n := range rep.Nodes {
			if n.LibraryPresent && n.LibraryCodeMatches && n.InfoMatches {
				ok++
			}
		}
		return fmt.Sprintf("functions-provisioned: exact library on %d of %d primaries", ok, len(rep.Nodes))
	}
}

// classOf classifies the error of one Redis call. A server reply that says
// the identity, its permissions or the node's role is wrong is a
// misconfiguration (READONLY only on a standalone endpoint: elsewhere it
// is a failover in progress); so are a TLS trust or hostname failure and a
// refusal by caphost's own command guard. Everything else — refused,
// timeout, reset, LOADING, BUSY, CLUSTERDOWN, MASTERDOWN, OOM, MISCONF, an
// unknown code — is an outage: an unrecognised failure never becomes a
// reason to stop retrying.
func classOf(err error, topo policy.TopologyKind) Class {
	if err == nil {
		return ""
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		switch certainty.ServerCode(rerr.Error()) {
		case "NOPERM", "NOAUTH", "WRONGPASS", "NOUSER", "UNAUTHORIZED", "WRONGTYPE", "CROSSSLOT":
			return ClassMisconfiguration
		case "READONLY":
			if topo == policy.TopologyStandalone {
				return ClassMisconfiguration
			}
		}
		return ClassOutage
	}
	if certainty.Classify(err, false) == certainty.Rejected || trustFailure(err) {
		return ClassMisconfiguration
	}
	return ClassOutage
}

// trustFailure reports a TLS failure that configuration causes: an
// unknown authority, a hostname mismatch, an invalid certificate.
func trustFailure(err error) bool {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
	)
	return errors.As(err, &verr) || errors.As(err, &uerr) || errors.As(err, &herr) || errors.As(err, &cerr)
}

// worse returns the class an operator must look at first.
func worse(a, b Class) Class {
	if a == ClassMisconfiguration || b == ClassMisconfiguration {
		return ClassMisconfiguration
	}
	if a == ClassOutage || b == ClassOutage {
		return ClassOutage
	}
	return ""
}

// errCode reduces an error to a bounded word: a server error code, an
// outcome, or a context error. Raw messages can carry key fragments.
func errCode(err error) string {
	if err == nil {
		return "ok"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return certainty.ServerCode(rerr.Error())
	}
	return strings.ToLower(certainty.Classify(err, false).String())
}

func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// boundedWord keeps a server-provided value only when it is a short word of
// [A-Za-z0-9._-] (versions, policies, statuses, digests); anything else
// becomes "?" so server-controlled text never reaches a report.
func boundedWord(s string) string {
	if len(s) > 64 {
		return "?"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "?"
		}
	}
	return s
}

// savePoints bounds the `save` configuration ("3600 1 300 100"): digits and
// single spaces only, at most 64 bytes; anything else is reported as
// "custom".
func savePoints(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if len(s) > 64 {
		return "custom"
	}
	for _, f := range strings.Fields(s) {
		if _, err := strconv.ParseUint(f, 10, 32); err != nil {
			return "custom"
		}
	}
	return strings.Join(strings.Fields(s), " ")
}

// versionAtLeast compares dotted numeric versions.
func versionAtLeast(have, want string) bool {
	h, w := strings.Split(have, "."), strings.Split(want, ".")
	for i := 0; i < len(w); i++ {
		var hv, wv int
		if i < len(h) {
			hv, _ = strconv.Atoi(h[i])
		}
		wv, _ = strconv.Atoi(w[i])
		if hv != wv {
			return hv > wv
		}
	}
	return true
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// LiveError is a failed live check (Runtime.Live): its class and a bounded
// reason word, with the cause kept for errors.Is/As. Its message carries no
// endpoint, user or server text.
type LiveError struct {
	Deployment string
	Class      Class
	// Reason is one of "timeout", "unreachable", "overloaded",
	// "shutting-down", "rejected", "connection-lost", "not-primary",
	// "node-changed", "cluster-down", "slots-uncovered", or a lower-case server error code ("noperm",
	// "wrongpass", "loading", "oom", "readonly", "misconf", "unknown", ...).
	Reason string
	Err    error
}

func (e *LiveError) Error() string {
	return "redis " + e.Deployment + ": live check failed (" + string(e.Class) + ": " + e.Reason + ")"
}

func (e *LiveError) Unwrap() error { return e.Err }

// Live is the cheap check readiness runs against a deployment whose
// handshake passed: a SET with a short TTL of one fixed probe-namespace key
// on the regular lane (connection, auth, the data user's permission and a
// writable primary in one command; OOM and MISCONF refusals show here),
// then on the admin lane INFO server and replication (the node is still
// the primary, and — when identity is not "" — still the one the handshake
// proved: a restarted or failed-over primary fails with reason
// "node-changed", so its programs are verified again) or, on cluster,
// the slot coverage of cluster_coverage.go: every primary of a freshly read
// slot map answers ROLE master and CLUSTER INFO cluster_state ok with 16384
// slots served (one CLUSTER SLOTS and one two-command pipeline per primary).
// Callers cache the result. A failure is a *LiveError. An admin lane that
// is busy (its in-flight bound is full, e.g. while programs are deployed)
// skips the second step rather than failing readiness for it.
func (r *Runtime) Live(ctx context.Context, id, identity string) error {
	d, err := r.deployment(id)
	if err != nil {
		return err
	}
	fail := func(class Class, reason string, err error) error {
		return &LiveError{Deployment: d.id, Class: class, Reason: reason, Err: err}
	}
	k, err := r.keys.Build(keys.Spec{Capability: keys.CapProbe, Region: "live", KeyVersion: 1, Kind: "probe", Parts: [][]byte{[]byte(d.id)}})
	if err != nil {
		return fail(ClassMisconfiguration, "rejected", err)
	}
	if err := d.client(policy.LaneRegular).Set(ctx, k.Redis(), "1", 10*time.Second).Err(); err != nil {
		return fail(classOf(err, d.topology), reasonWord(err), err)
	}
	admin := d.client(policy.LaneAdmin)
	if cc, ok := admin.(*redis.ClusterClient); ok {
		// Per primary of the slot map (cluster_coverage.go).
		cov := checkCoverage(ctx, cc)
		switch {
		case cov.ok(), errors.Is(cov.err, ErrOverloaded):
			return nil
		}
		return fail(cov.class(d.topology), cov.liveReason(), cov.err)
	}
	info, err := admin.Info(ctx, "server", "replication").Result()
	switch {
	case errors.Is(err, ErrOverloaded):
		return nil
	case err != nil:
		return fail(classOf(err, d.topology), reasonWord(err), err)
	}
	if infoField(info, "role") != "master" {
		class := ClassOutage // sentinel: a failover in progress
		if d.topology == policy.TopologyStandalone {
			class = ClassMisconfiguration
		}
		return fail(class, "not-primary", nil)
	}
	if identity != "" && boundedWord(infoField(info, "run_id")) != identity {
		return fail(ClassOutage, "node-changed", nil)
	}
	return nil
}

// reasonWord reduces a call error to the bounded reason of a LiveError.
func reasonWord(err error) string {
	var rerr redis.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrLaneClosed):
		return "shutting-down"
	case errors.As(err, &rerr):
		return strings.ToLower(certainty.ServerCode(rerr.Error()))
	}
	switch certainty.Classify(err, false) {
	case certainty.OverloadedBeforeSend:
		return "overloaded"
	case certainty.UnavailableBeforeSend:
		return "unreachable"
	case certainty.Rejected:
		return "rejected"
	}
	if certainty.Reason(err, false) == "timeout" {
		return "timeout"
	}
	return "connection-lost"
}
