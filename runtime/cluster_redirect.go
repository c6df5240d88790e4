package runtime

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/programs"
)

// This file owns how a Cluster lane client follows a -MOVED or -ASK reply.
//
// Such a reply proves the node did not run the command: it answered "not
// here" instead. Sending the command once more, to the node the reply names
// (after ASKING on that node for -ASK), is therefore safe, and it is what
// makes a slot migration invisible to callers. The runtime does it itself
// instead of giving go-redis ClusterOptions.MaxRedirects > 0, because
// go-redis v9.23.0's redirect loop (osscluster.go, process and
// processPipeline) uses the same attempt budget for other resends: a single
// command is sent again to the same node when shouldRetry (error.go) says so
// — EOF, reset connections, read timeouts of non-blocking commands, LOADING,
// CLUSTERDOWN, TRYAGAIN, MASTERDOWN, max clients — and after READONLY or a
// closed node client; a pipeline re-sends every command of a node whose
// connection failed. A command that timed out after it was written may have
// run, so any of those would send a write twice. MaxRedirects therefore stays
// -1 (one attempt, clients.go) and redirectHook follows the redirect:
//
//   - only a MOVED or ASK reply (a server error) is followed; every other
//     outcome is returned as go-redis produced it;
//   - exactly once: whatever the second node answers — a reply, another
//     MOVED/ASK, a refused dial (UNAVAILABLE_BEFORE_SEND), a timeout after
//     the write (INDETERMINATE) — is the call's outcome, never sent again;
//   - to the node client go-redis itself created for that address (it does
//     so for the target of every MOVED/ASK before it returns the reply), so
//     the follow goes through the same admission, guard and pool;
//   - when that node client is gone (closed by go-redis's node GC, or never
//     created) nothing is sent and the original MOVED/ASK is returned:
//     NOT_APPLIED, the caller decides;
//   - an EVALSHA the right node refuses with NOSCRIPT (it has not loaded
//     that catalog program yet) gets the catalog's one recovery there: SCRIPT
//     LOAD of the embedded source on that node, then one more send — NOSCRIPT
//     also proves nothing ran;
//   - pipelines: each command answered by MOVED/ASK is followed once, grouped
//     by target node into one pipeline per node (ASKING before each ASK'd
//     command, since ASKING covers only the next command); a MULTI/EXEC
//     transaction is never followed (a redirect inside it is returned).
//
// A multi-key call whose keys a migration has split (some already on the
// target, some still on the source) is answered -TRYAGAIN by the source
// (or by the target after ASK) before it runs. That is not followed either:
// the keys stay split until the operator moves the rest, so a resend in
// the same window would meet the same refusal. The call ends NOT_APPLIED
// with certainty.Error.Code "TRYAGAIN" — provably not executed, safe for
// the caller to repeat once the migration of the slot has finished — and
// the lane's slot map is refreshed (topology.go).
// TestClusterSplitProgramDuringMigrationIsNotApplied pins this with INFO
// commandstats on both primaries.
//
// The admission hook sees one top-level call and reports the certainty of
// the final outcome: the first node's NOT_APPLIED is superseded by what the
// right node answered. go-redis still reloads the slot map on MOVED/ASK, so
// the calls after a MOVED route directly.

// Redirect kinds, the bounded label of RedirectObserver.
const (
	RedirectMoved = "moved"
	RedirectAsk   = "ask"
)

// RedirectObserver is an optional extension of Observer: one that also
// implements it is told of every MOVED/ASK the runtime followed, and of
// those it could not follow (followed false: the target node client was
// gone, nothing was sent).
type RedirectObserver interface {
	ClusterRedirect(deployment string, lane policy.Lane, kind string, followed bool)
}

// nodeRegistry holds the node clients go-redis created for one Cluster lane
// client, by address (ClusterOptions.NewClient reports each one). A node
// that go-redis later drops is closed by go-redis; its entry stays until it
// is replaced by a new client for the same address or found closed.
type nodeRegistry struct {
	mu sync.RWMutex
	m  map[string]*redis.Client
}

func newNodeRegistry() *nodeRegistry { return &nodeRegistry{m: make(map[string]*redis.Client)} }

func (r *nodeRegistry) add(c *redis.Client) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.m[c.Options().Addr] = c
	r.mu.Unlock()
}

func (r *nodeRegistry) get(addr string) *redis.Client {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m[addr]
}

// forget drops addr's entry if it is still c.
func (r *nodeRegistry) forget(addr string, c *redis.Client) {
	r.mu.Lock()
	if r.m[addr] == c {
		delete(r.m, addr)
	}
	r.mu.Unlock()
}

// redirect is a parsed MOVED/ASK reply.
type redirect struct {
	ask  bool
	addr string // normalised like go-redis's node keys
}

func (rd redirect) kind() string {
	if rd.ask {
		return RedirectAsk
	}
	return RedirectMoved
}

// redirectOf reports whether err is a MOVED or ASK reply and where it points.
func redirectOf(err error) (redirect, bool) {
	if err == nil {
		return redirect{}, false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return redirect{}, false // only a server reply proves "not run"
	}
	if addr, ok := redis.IsMovedError(rerr); ok {
		return redirect{addr: nodeAddr(addr)}, true
	}
	if addr, ok := redis.IsAskError(rerr); ok {
		return redirect{ask: true, addr: nodeAddr(addr)}, true
	}
	return redirect{}, false
}

// nodeAddr normalises a redirect's address the way go-redis keys its node
// clients (internal.GetAddr): IPv4 and bracketed IPv6 as given, a bare IPv6
// host bracketed; "" when it is not a host:port at all (nothing is sent
// to such a redirect).
func nodeAddr(addr string) string {
	i := strings.LastIndexByte(addr, ':')
	if i <= 0 {
		return ""
	}
	out := addr
	if strings.IndexByte(addr, '.') < 0 && addr[0] != '[' {
		out = net.JoinHostPort(addr[:i], addr[i+1:])
	}
	if _, _, err := net.SplitHostPort(out); err != nil {
		return ""
	}
	return out
}

// redirectHook is the innermost hook of a Cluster lane client (inside
// refreshHook): it follows one MOVED/ASK per command, as described above.
type redirectHook struct {
	deployment string
	lane       policy.Lane
	nodes      *nodeRegistry
	scripts    map[string]string // lower-case SHA1 → source of the catalog's programs
	obs        RedirectObserver  // nil: nobody counts
	log        *slog.Logger
}

var _ redis.Hook = (*redirectHook)(nil)

func newRedirectHook(deployment string, l policy.Lane, nodes *nodeRegistry, progs *programs.Catalog, obs Observer, log *slog.Logger) *redirectHook {
	ro, _ := obs.(RedirectObserver)
	h := &redirectHook{deployment: deployment, lane: l, nodes: nodes, obs: ro, log: log, scripts: map[string]string{}}
	if progs != nil {
		for _, p := range progs.Programs() {
			h.scripts[strings.ToLower(p.SHA1())] = p.Source()
		}
	}
	return h
}

func (h *redirectHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *redirectHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		rd, ok := redirectOf(err)
		if !ok {
			return err
		}
		node := h.target(rd)
		if node == nil {
			return err
		}
		ferr := send(ctx, node, rd, cmd)
		if h.closed(rd, node, ferr) {
			cmd.SetErr(err)
			return err
		}
		h.followed(rd)
		if src, ok := h.noScript(cmd, ferr); ok {
			ferr = h.loadAndResend(ctx, node, rd, cmd, src, ferr)
		}
		return ferr
	}
}

// send sends cmd once to node (after ASKING for an ASK redirect) and
// returns its outcome. The first node's reply is cleared first so the
// outcome — including an error go-redis only sets on commands without
// one — is the command's own.
func send(ctx context.Context, node *redis.Client, rd redirect, cmd redis.Cmder) error {
	cmd.SetErr(nil)
	if !rd.ask {
		return node.Process(ctx, cmd)
	}
	pipe := node.Pipeline()
	_ = pipe.Process(ctx, redis.NewStatusCmd(ctx, "asking"))
	_ = pipe.Process(ctx, cmd)
	_, _ = pipe.Exec(ctx)
	return cmd.Err()
}

// noScript reports whether a followed EVALSHA of a catalog program was
// refused with NOSCRIPT, and the program's source. The catalog's rule (an
// exact NOSCRIPT ran nothing: SCRIPT LOAD and send once more) has to be
// applied here, on the node the redirect named: the executor would load the
// script where its slot map routes, which during a migration is the source
// node, and the target would answer NOSCRIPT again.
func (h *redirectHook) noScript(cmd redis.Cmder, err error) (string, bool) {
	if err == nil || len(h.scripts) == 0 || cmd.Name() != "evalsha" {
		return "", false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Error(), "NOSCRIPT") {
		return "", false
	}
	args := cmd.Args()
	if len(args) < 2 {
		return "", false
	}
	sha, _ := args[1].(string)
	src, ok := h.scripts[strings.ToLower(sha)]
	return src, ok
}

// loadAndResend loads src on node and, when the server returns the SHA the
// command names, sends the command once more; otherwise the NOSCRIPT
// refusal stands.
func (h *redirectHook) loadAndResend(ctx context.Context, node *redis.Client, rd redirect, cmd redis.Cmder, src string, refused error) error {
	sha, err := node.ScriptLoad(ctx, src).Result()
	if want, _ := cmd.Args()[1].(string); err != nil || !strings.EqualFold(sha, want) {
		cmd.SetErr(refused)
		return refused
	}
	return send(ctx, node, rd, cmd)
}

func (h *redirectHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil || isTransaction(cmds) {
			return err
		}
		var groups map[string][]redis.Cmder
		kinds := map[redis.Cmder]redirect{}
		for _, c := range cmds {
			if rd, ok := redirectOf(c.Err()); ok {
				if groups == nil {
					groups = map[string][]redis.Cmder{}
				}
				groups[rd.addr] = append(groups[rd.addr], c)
				kinds[c] = rd
			}
		}
		if groups == nil {
			return err
		}
		addrs := make([]string, 0, len(groups))
		for a := range groups {
			addrs = append(addrs, a)
		}
		slices.Sort(addrs)
		for _, addr := range addrs {
			h.followPipeline(ctx, groups[addr], kinds)
		}
		return firstErr(cmds)
	}
}

// followPipeline sends the commands redirected to addr once more, in one
// pipeline on that node.
func (h *redirectHook) followPipeline(ctx context.Context, cmds []redis.Cmder, kinds map[redis.Cmder]redirect) {
	node := h.target(kinds[cmds[0]])
	if node == nil {
		return
	}
	orig := make([]error, len(cmds))
	pipe := node.Pipeline()
	for i, c := range cmds {
		orig[i] = c.Err()
		c.SetErr(nil)
		if kinds[c].ask {
			_ = pipe.Process(ctx, redis.NewStatusCmd(ctx, "asking"))
		}
		_ = pipe.Process(ctx, c)
	}
	_, perr := pipe.Exec(ctx)
	if h.closed(kinds[cmds[0]], node, perr) {
		for i, c := range cmds {
			c.SetErr(orig[i])
		}
		return
	}
	for _, c := range cmds {
		h.followed(kinds[c])
	}
}

// target returns the node client for rd's address, or nil (reported) when
// there is none: then nothing is sent.
func (h *redirectHook) target(rd redirect) *redis.Client {
	if rd.addr != "" {
		if node := h.nodes.get(rd.addr); node != nil {
			return node
		}
	}
	h.unfollowed(rd)
	return nil
}

// closed reports whether the follow failed because go-redis had closed the
// node client: its pool refuses before anything is written.
func (h *redirectHook) closed(rd redirect, node *redis.Client, err error) bool {
	if err == nil || !errors.Is(err, redis.ErrClosed) {
		return false
	}
	h.nodes.forget(rd.addr, node)
	h.unfollowed(rd)
	return true
}

func (h *redirectHook) followed(rd redirect) {
	if h.obs != nil {
		h.obs.ClusterRedirect(h.deployment, h.lane, rd.kind(), true)
	}
	h.log.Debug("redis cluster: followed a redirect once", "deployment", h.deployment,
		"lane", string(h.lane), "redirect", rd.kind())
}

func (h *redirectHook) unfollowed(rd redirect) {
	if h.obs != nil {
		h.obs.ClusterRedirect(h.deployment, h.lane, rd.kind(), false)
	}
	h.log.Debug("redis cluster: redirect not followed, target node unknown", "deployment", h.deployment,
		"lane", string(h.lane), "redirect", rd.kind())
}

// isTransaction reports a MULTI/EXEC pipeline (go-redis wraps the queued
// commands in MULTI ... EXEC before the hooks see them).
func isTransaction(cmds []redis.Cmder) bool {
	return len(cmds) > 0 && cmds[0].Name() == "multi"
}

// firstErr is go-redis's pipeline result: the first command error.
func firstErr(cmds []redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}
