package runtime

import (
	"context"
	"crypto/rand"
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
// evalsha-managed scripts that will be loaded on first use).
const (
	CheckOK     CheckStatus = "ok"
	CheckWarn   CheckStatus = "warn"
	CheckFailed CheckStatus = "failed"
)

// Probe check names, in the order they run (the runtime handshake of the
// configuration design: connection and auth, role and topology, version,
// cluster coverage, programs, an ephemeral write/read, role attestation).
const (
	CheckAuth            = "auth"
	CheckTopology        = "topology"
	CheckVersion         = "version"
	CheckClusterCoverage = "cluster-coverage"
	CheckPrograms        = "programs"
	CheckWriteRead       = "write-read"
	CheckEviction        = "eviction-policy"
)

// Check is one probe result. Detail is bounded operator text: lane names,
// server error codes, versions, policies — never credentials, keys or raw
// server messages.
type Check struct {
	Name   string      `json:"name"`
	Status CheckStatus `json:"status"`
	Detail string      `json:"detail"`
}

// DeploymentProbe is the probe of one deployment.
type DeploymentProbe struct {
	Deployment string              `json:"deployment"`
	Topology   policy.TopologyKind `json:"topology"`
	Roles      []policy.Role       `json:"roles"`
	Checks     []Check             `json:"checks"`
}

// Failed reports whether any check failed.
func (d DeploymentProbe) Failed() bool {
	for _, c := range d.Checks {
		if c.Status == CheckFailed {
			return true
		}
	}
	return false
}

// ProbeReport is the result of Probe, one entry per deployment (sorted by id).
type ProbeReport struct {
	Deployments []DeploymentProbe `json:"deployments"`
}

// ErrProbeFailed is matched by ProbeReport.Err when any check failed.
var ErrProbeFailed = errors.New("redis startup probe failed")

// Err returns nil when no check failed, otherwise an error naming every
// failed check (matching ErrProbeFailed).
func (p ProbeReport) Err() error {
	var failed []string
	for _, d := range p.Deployments {
		for _, c := range d.Checks {
			if c.Status == CheckFailed {
				failed = append(failed, d.Deployment+"/"+c.Name+": "+c.Detail)
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
// deleted through the guarded regular lane; and the maxmemory-policy matches
// what each role expects. Probe never mutates anything but its own
// short-lived probe key. It runs every check even after a failure, so one
// report lists every problem.
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
	add := func(name string, st CheckStatus, detail string) {
		if name == "" {
			return
		}
		dp.Checks = append(dp.Checks, Check{Name: name, Status: st, Detail: detail})
	}
	admin := d.client(policy.LaneAdmin)

	// 1. Every lane authenticates with its own credential.
	var bad []string
	for _, l := range policy.Lanes() {
		if err := d.client(l).Ping(ctx).Err(); err != nil {
			bad = append(bad, string(l)+" ("+errCode(err)+")")
		}
	}
	if len(bad) > 0 {
		add(CheckAuth, CheckFailed, "lanes failed PING: "+strings.Join(bad, ", "))
		// Nothing else can succeed without a connection; say so once.
		for _, n := range []string{CheckTopology, CheckVersion, CheckPrograms, CheckWriteRead, CheckEviction} {
			add(n, CheckFailed, "not checked: no connection")
		}
		return dp
	}
	add(CheckAuth, CheckOK, "all lanes authenticated (regular, script, blocking, pubsub, admin)")

	// 2. Role / topology, 3. version, 7. eviction: per primary.
	var (
		mu    sync.Mutex
		facts []nodeFacts
	)
	collect := func(ctx context.Context, c *redis.Client) error {
		f := nodeFacts{}
		if vals, err := c.Do(ctx, "ROLE").Slice(); err != nil {
			f.err = err
		} else if len(vals) > 0 {
			f.role, _ = vals[0].(string)
		}
		if info, err := c.Info(ctx, "server").Result(); err == nil {
			f.version = infoField(info, "redis_version")
		} else if f.err == nil {
			f.err = err
		}
		if m, err := c.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil {
			f.eviction = m["maxmemory-policy"]
		} else {
			f.eviction = "unreadable (" + errCode(err) + ")"
		}
		mu.Lock()
		facts = append(facts, f)
		mu.Unlock()
		return nil
	}
	var topoErr error
	switch c := admin.(type) {
	case *redis.ClusterClient:
		topoErr = c.ForEachMaster(ctx, collect)
	case *redis.Client:
		topoErr = collect(ctx, c)
	default:
		topoErr = fmt.Errorf("unsupported client %T", admin)
	}

	// Topology.
	switch {
	case topoErr != nil:
		add(CheckTopology, CheckFailed, "cannot reach every primary: "+errCode(topoErr))
	case len(facts) == 0:
		add(CheckTopology, CheckFailed, "no primary answered")
	default:
		var notPrimary int
		for _, f := range facts {
			if f.err != nil || f.role != "master" {
				notPrimary++
			}
		}
		if notPrimary > 0 {
			add(CheckTopology, CheckFailed, fmt.Sprintf("%d of %d nodes are not writable primaries (ROLE)", notPrimary, len(facts)))
		} else {
			add(CheckTopology, CheckOK, fmt.Sprintf("%s: %d writable primar%s", d.topology, len(facts), plural(len(facts), "y", "ies")))
		}
	}

	// Version.
	if len(facts) > 0 {
		var low, unknown []string
		for _, f := range facts {
			switch {
			case f.version == "":
				unknown = append(unknown, "?")
			case !versionAtLeast(f.version, MinRedisVersion):
				low = append(low, f.version)
			}
		}
		switch {
		case len(unknown) > 0:
			add(CheckVersion, CheckFailed, "server version unreadable (INFO server); caphost never guesses it")
		case len(low) > 0:
			add(CheckVersion, CheckFailed, "server version "+strings.Join(low, ", ")+" < "+MinRedisVersion)
		default:
			add(CheckVersion, CheckOK, "redis "+facts[0].version+" ≥ "+MinRedisVersion)
		}
	}

	// 4. Cluster coverage.
	if cc, ok := admin.(*redis.ClusterClient); ok {
		info, err := cc.ClusterInfo(ctx).Result()
		switch {
		case err != nil:
			add(CheckClusterCoverage, CheckFailed, "CLUSTER INFO: "+errCode(err))
		case infoField(info, "cluster_state") != "ok":
			add(CheckClusterCoverage, CheckFailed, "cluster_state is "+infoField(info, "cluster_state"))
		case infoField(info, "cluster_slots_ok") != "16384":
			add(CheckClusterCoverage, CheckFailed, "only "+infoField(info, "cluster_slots_ok")+" of 16384 slots are served")
		default:
			add(CheckClusterCoverage, CheckOK, "16384 slots served, cluster_state ok")
		}
	}

	// 5. Programs.
	prep, err := programs.Verify(ctx, r.progs, r.mode, admin, d.client(policy.LaneScript))
	switch {
	case err == nil:
		add(CheckPrograms, CheckOK, programsDetail(r.mode, prep))
	case errors.Is(err, programs.ErrNotDeployed) && r.mode == policy.ProgramsEvalshaManaged:
		// EVALSHA loads the embedded source on an exact NOSCRIPT, and the SHA
		// is the digest: a missing script is loaded, never a wrong one run.
		add(CheckPrograms, CheckWarn, programsDetail(r.mode, prep)+"; missing scripts load on first use (or run `caphost programs deploy`)")
	case errors.Is(err, programs.ErrNotDeployed):
		add(CheckPrograms, CheckFailed, programsDetail(r.mode, prep)+"; run `caphost programs deploy`")
	default:
		add(CheckPrograms, CheckFailed, "cannot verify programs: "+errCode(err))
	}

	// 6. Ephemeral write/read in the probe namespace on the regular lane,
	// through the guard, with the data user's ACL.
	add(r.writeRead(ctx, d))

	// 7. Eviction policy per role.
	if len(facts) > 0 {
		add(r.evictionCheck(dp.Roles, facts))
	}
	return dp
}

func (r *Runtime) writeRead(ctx context.Context, d *Deployment) (string, CheckStatus, string) {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	k, err := r.keys.Build(keys.Spec{Capability: keys.CapProbe, Region: "startup", KeyVersion: 1, Kind: "probe", Parts: [][]byte{nonce}})
	if err != nil {
		return CheckWriteRead, CheckFailed, "probe key: " + err.Error()
	}
	c := d.client(policy.LaneRegular)
	want := fmt.Sprintf("caphost-probe-%x", nonce)
	if err := c.Set(ctx, k.Redis(), want, 10*time.Second).Err(); err != nil {
		return CheckWriteRead, CheckFailed, "SET with TTL: " + errCode(err)
	}
	got, err := c.Get(ctx, k.Redis()).Result()
	if err != nil {
		return CheckWriteRead, CheckFailed, "GET: " + errCode(err)
	}
	if got != want {
		return CheckWriteRead, CheckFailed, "read back a different value"
	}
	if err := c.Del(ctx, k.Redis()).Err(); err != nil {
		return CheckWriteRead, CheckFailed, "DEL: " + errCode(err)
	}
	return CheckWriteRead, CheckOK, "SET PX / GET / DEL of an ephemeral " + r.keys.Namespace() + "probe key"
}

// nodeFacts is what the probe reads from one primary.
type nodeFacts struct {
	role, version, eviction string
	err                     error
}

// evictionCheck compares every primary's maxmemory-policy with what each
// role on the deployment expects. A correctness role on an evicting (or
// unverifiable) deployment fails: an unverifiable guarantee is never
// assumed. A cache role with an unexpected policy only warns.
func (r *Runtime) evictionCheck(roles []policy.Role, facts []nodeFacts) (string, CheckStatus, string) {
	status, details := CheckOK, []string(nil)
	for _, role := range roles {
		want := expectedEviction(role, r.bindings[role])
		for _, f := range facts {
			if slices.Contains(want, f.eviction) {
				continue
			}
			st := CheckWarn
			if role.Correctness() {
				st = CheckFailed
			}
			if st == CheckFailed || status == CheckOK {
				status = st
			}
			msg := fmt.Sprintf("role %s expects %s, a primary has %s", role, strings.Join(want, " or "), f.eviction)
			if strings.HasPrefix(f.eviction, "unreadable") {
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
		return CheckEviction, CheckOK, "maxmemory-policy " + strings.Join(policies, ", ") + " fits roles " + joinRoles(roles)
	}
	return CheckEviction, status, strings.Join(details, "; ")
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
