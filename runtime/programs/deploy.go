package programs

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
)

// forEachPrimary runs fn on every primary reachable through client: each
// master of a Cluster, or the single server of a standalone/failover client.
// Unlike ClusterClient.ForEachMaster's first-error-wins, every node's error
// is kept so a report names each failing primary.
func forEachPrimary(ctx context.Context, client redis.UniversalClient, fn func(ctx context.Context, node *redis.Client) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		var (
			mu   sync.Mutex
			errs []string
		)
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			if err := fn(ctx, node); err != nil {
				mu.Lock()
				errs = append(errs, node.Options().Addr+": "+err.Error())
				mu.Unlock()
				return err
			}
			return nil
		})
		if len(errs) > 0 {
			sort.Strings(errs)
			return fmt.Errorf("%s: %w", strings.Join(errs, "; "), err)
		}
		return err
	case *redis.Client:
		return fn(ctx, c)
	default:
		return fmt.Errorf("%w: %T", ErrUnsupportedClient, client)
	}
}

// Deploy installs the generated Functions library on every primary with
// FUNCTION LOAD REPLACE (an atomic whole-library replacement per node). It
// is an operator action on the admin lane, never part of the request path.
func Deploy(ctx context.Context, c *Catalog, admin redis.UniversalClient) error {
	name, code, _ := c.Library()
	err := forEachPrimary(ctx, admin, func(ctx context.Context, node *redis.Client) error {
		got, err := node.FunctionLoadReplace(ctx, code).Result()
		if err != nil {
			return err
		}
		if got != name {
			return fmt.Errorf("FUNCTION LOAD returned library %q, want %q", got, name)
		}
		return nil
	})
	if err != nil {
		return &Error{Program: "deploy", Err: err}
	}
	return nil
}

// LoadScripts eagerly SCRIPT LOADs every program source on every primary
// and checks each returned sha1 (evalsha-managed mode; loading is otherwise
// lazy, on NOSCRIPT).
func LoadScripts(ctx context.Context, c *Catalog, admin redis.UniversalClient) error {
	err := forEachPrimary(ctx, admin, func(ctx context.Context, node *redis.Client) error {
		for _, p := range c.programs {
			sha, err := node.ScriptLoad(ctx, p.source).Result()
			if err != nil {
				return fmt.Errorf("%s: %w", p.spec.ID, err)
			}
			if !strings.EqualFold(sha, p.spec.SHA1) {
				return fmt.Errorf("%s: %w: got %q", p.spec.ID, ErrSHAMismatch, sha)
			}
		}
		return nil
	})
	if err != nil {
		return &Error{Program: "load-scripts", Err: err}
	}
	return nil
}

// Report is the result of Verify: one entry per primary, sorted by address.
type Report struct {
	Mode  policy.ProgramMode
	Nodes []NodeReport
}

// NodeReport describes what one primary holds.
type NodeReport struct {
	// Addr is the primary's host:port (no credentials).
	Addr string
	// MissingScripts lists the ids of programs whose sha1 the node's script
	// cache lacks (evalsha-managed).
	MissingScripts []string
	// LibraryPresent, LibraryCodeMatches and the info fields describe the
	// Functions library (functions-provisioned).
	LibraryPresent     bool
	LibraryCodeMatches bool
	InfoSet            string
	InfoVersion        int64
	InfoDigest         string
	// InfoMatches reports that the info function named this catalog's set,
	// version and digest.
	InfoMatches bool
}

// OK reports whether every primary holds the complete, exact program set
// for the report's mode.
func (r Report) OK() bool {
	if len(r.Nodes) == 0 {
		return false
	}
	for _, n := range r.Nodes {
		if r.Mode == policy.ProgramsEvalshaManaged && len(n.MissingScripts) > 0 {
			return false
		}
		if r.Mode == policy.ProgramsFunctionsProvisioned && (!n.LibraryPresent || !n.LibraryCodeMatches || !n.InfoMatches) {
			return false
		}
	}
	return true
}

// Verify checks every primary. In functions-provisioned mode the library
// must be present with exactly the generated code, and its info function
// must report this set's name, version and digest. In evalsha-managed mode
// it reports, per primary, the programs missing from the script cache
// (LoadScripts loads them). A node that cannot be asked is an *Error; a
// mismatch returns the report together with an error matching
// ErrNotDeployed, so a caller that ignores the report still fails closed.
func Verify(ctx context.Context, c *Catalog, mode policy.ProgramMode, admin redis.UniversalClient) (Report, error) {
	rep := Report{Mode: mode}
	var mu sync.Mutex
	var check func(ctx context.Context, node *redis.Client) (NodeReport, error)
	switch mode {
	case policy.ProgramsEvalshaManaged:
		check = c.verifyScripts
	case policy.ProgramsFunctionsProvisioned:
		check = c.verifyLibrary
	default:
		return rep, fmt.Errorf("%w: %q", ErrMode, mode)
	}
	err := forEachPrimary(ctx, admin, func(ctx context.Context, node *redis.Client) error {
		n, err := check(ctx, node)
		if err != nil {
			return err
		}
		mu.Lock()
		rep.Nodes = append(rep.Nodes, n)
		mu.Unlock()
		return nil
	})
	sort.Slice(rep.Nodes, func(i, j int) bool { return rep.Nodes[i].Addr < rep.Nodes[j].Addr })
	if err != nil {
		return rep, &Error{Program: "verify", Err: err}
	}
	if !rep.OK() {
		return rep, fmt.Errorf("%w (mode %s)", ErrNotDeployed, mode)
	}
	return rep, nil
}

func (c *Catalog) verifyScripts(ctx context.Context, node *redis.Client) (NodeReport, error) {
	n := NodeReport{Addr: node.Options().Addr}
	shas := make([]string, len(c.programs))
	for i, p := range c.programs {
		shas[i] = p.spec.SHA1
	}
	exists, err := node.ScriptExists(ctx, shas...).Result()
	if err != nil {
		return n, err
	}
	if len(exists) != len(shas) {
		return n, fmt.Errorf("SCRIPT EXISTS answered %d flags for %d scripts", len(exists), len(shas))
	}
	for i, ok := range exists {
		if !ok {
			n.MissingScripts = append(n.MissingScripts, c.programs[i].spec.ID)
		}
	}
	return n, nil
}

func (c *Catalog) verifyLibrary(ctx context.Context, node *redis.Client) (NodeReport, error) {
	n := NodeReport{Addr: node.Options().Addr}
	name, code, digest := c.Library()
	libs, err := node.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name, WithCode: true}).Result()
	if err != nil {
		return n, err
	}
	for _, l := range libs {
		if l.Name == name {
			n.LibraryPresent = true
			n.LibraryCodeMatches = l.Code == code
		}
	}
	if !n.LibraryPresent {
		return n, nil
	}
	v, err := node.FCallRO(ctx, c.manifest.Library.InfoFunction, nil).Result()
	if err != nil {
		return n, err
	}
	info, ok := v.([]any)
	if !ok || len(info) != 3 {
		return n, &CompatibilityError{Program: c.manifest.Library.InfoFunction, Reason: fmt.Sprintf("info reply %T", v)}
	}
	n.InfoSet, _ = info[0].(string)
	n.InfoVersion, _ = info[1].(int64)
	n.InfoDigest, _ = info[2].(string)
	setName, setVersion := c.ProgramSet()
	n.InfoMatches = n.InfoSet == setName && n.InfoVersion == int64(setVersion) && n.InfoDigest == digest
	return n, nil
}
