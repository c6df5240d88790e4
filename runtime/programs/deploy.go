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
// lazy, on NOSCRIPT). It runs on the script lane: SCRIPT LOAD is a
// script-lane command, authorised for the identity that runs programs.
func LoadScripts(ctx context.Context, c *Catalog, script redis.UniversalClient) error {
	err := forEachPrimary(ctx, script, func(ctx context.Context, node *redis.Client) error {
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
// must be present with exactly the generated code (FUNCTION LIST on the admin
// lane), and its info function must report this set's name, version and
// digest (FCALL_RO on the script lane, the lane and credential that run
// programs). In evalsha-managed mode it reports, per primary, the programs
// missing from the script cache (SCRIPT EXISTS on the script lane;
// LoadScripts loads them). Lanes stay pure: admin commands on admin, script
// commands on script. A node that cannot be asked is an *Error; a mismatch
// returns the report together with an error matching ErrNotDeployed, so a
// caller that ignores the report still fails closed.
func Verify(ctx context.Context, c *Catalog, mode policy.ProgramMode, admin, script redis.UniversalClient) (Report, error) {
	rep := Report{Mode: mode}
	var mu sync.Mutex
	byAddr := map[string]*NodeReport{}
	node := func(addr string) *NodeReport {
		mu.Lock()
		defer mu.Unlock()
		if n, ok := byAddr[addr]; ok {
			return n
		}
		n := &NodeReport{Addr: addr}
		byAddr[addr] = n
		return n
	}
	var err error
	switch mode {
	case policy.ProgramsEvalshaManaged:
		err = forEachPrimary(ctx, script, func(ctx context.Context, cl *redis.Client) error {
			missing, err := c.missingScripts(ctx, cl)
			if err != nil {
				return err
			}
			n := node(cl.Options().Addr)
			mu.Lock()
			n.MissingScripts = missing
			mu.Unlock()
			return nil
		})
	case policy.ProgramsFunctionsProvisioned:
		err = forEachPrimary(ctx, admin, func(ctx context.Context, cl *redis.Client) error {
			present, matches, err := c.listLibrary(ctx, cl)
			if err != nil {
				return err
			}
			n := node(cl.Options().Addr)
			mu.Lock()
			n.LibraryPresent, n.LibraryCodeMatches = present, matches
			mu.Unlock()
			return nil
		})
		if err == nil {
			err = forEachPrimary(ctx, script, func(ctx context.Context, cl *redis.Client) error {
				n := node(cl.Options().Addr)
				if !n.LibraryPresent {
					return nil
				}
				return c.libraryInfo(ctx, cl, n)
			})
		}
	default:
		return rep, fmt.Errorf("%w: %q", ErrMode, mode)
	}
	for _, n := range byAddr {
		rep.Nodes = append(rep.Nodes, *n)
	}
	sort.Slice(rep.Nodes, func(i, j int) bool { return rep.Nodes[i].Addr < rep.Nodes[j].Addr })
	if err != nil {
		return rep, &Error{Program: "verify", Err: err}
	}
	if !rep.OK() {
		return rep, fmt.Errorf("%w (mode %s)", ErrNotDeployed, mode)
	}
	return rep, nil
}

func (c *Catalog) missingScripts(ctx context.Context, node *redis.Client) ([]string, error) {
	shas := make([]string, len(c.programs))
	for i, p := range c.programs {
		shas[i] = p.spec.SHA1
	}
	exists, err := node.ScriptExists(ctx, shas...).Result()
	if err != nil {
		return nil, err
	}
	if len(exists) != len(shas) {
		return nil, fmt.Errorf("SCRIPT EXISTS answered %d flags for %d scripts", len(exists), len(shas))
	}
	var missing []string
	for i, ok := range exists {
		if !ok {
			missing = append(missing, c.programs[i].spec.ID)
		}
	}
	return missing, nil
}

func (c *Catalog) listLibrary(ctx context.Context, node *redis.Client) (present, matches bool, err error) {
	name, code, _ := c.Library()
	libs, err := node.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name, WithCode: true}).Result()
	if err != nil {
		return false, false, err
	}
	for _, l := range libs {
		if l.Name == name {
			present, matches = true, l.Code == code
		}
	}
	return present, matches, nil
}

func (c *Catalog) libraryInfo(ctx context.Context, node *redis.Client, n *NodeReport) error {
	_, _, digest := c.Library()
	v, err := node.FCallRO(ctx, c.manifest.Library.InfoFunction, nil).Result()
	if err != nil {
		return err
	}
	info, ok := v.([]any)
	if !ok || len(info) != 3 {
		return &CompatibilityError{Program: c.manifest.Library.InfoFunction, Reason: fmt.Sprintf("info reply %T", v)}
	}
	n.InfoSet, _ = info[0].(string)
	n.InfoVersion, _ = info[1].(int64)
	n.InfoDigest, _ = info[2].(string)
	setName, setVersion := c.ProgramSet()
	n.InfoMatches = n.InfoSet == setName && n.InfoVersion == int64(setVersion) && n.InfoDigest == digest
	return nil
}
