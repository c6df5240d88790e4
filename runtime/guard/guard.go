// Package guard owns caphost's command guard: a go-redis v9 hook that the
// runtime installs on every client it creates (Install), so that no command
// reaches the wire without passing the closed catalog (policy/commands),
// the lane, the namespace, the Cluster same-slot rule, the TTL duty, the
// program allowlist, the replica-wait grant and the request budget, and no
// reply reaches a caller without passing the reply budget.
//
// The admission order is fixed (see Guard) and must not be reordered here:
// tests pin it. A rejection is set on the command and returned without
// calling the next hook, so it provably never reaches the wire.
package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/commands"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/internal/hashslot"
	"github.com/caphost/caphost/runtime/internal/replwait"
)

// Reason is why the guard rejected a command. The set is closed (Reasons).
type Reason string

// The closed set of rejection reasons.
const (
	ReasonUnknownCommand   Reason = "unknown-command"
	ReasonBlocked          Reason = "blocked"
	ReasonWrongLane        Reason = "wrong-lane"
	ReasonNamespace        Reason = "namespace"
	ReasonMissingTTL       Reason = "missing-ttl"
	ReasonCrossSlot        Reason = "cross-slot"
	ReasonRequestTooLarge  Reason = "request-too-large"
	ReasonReplyTooLarge    Reason = "reply-too-large"
	ReasonScriptNotAllowed Reason = "script-not-allowed"
	ReasonMalformed        Reason = "malformed"
)

// Reasons lists every reason (metrics pre-registration).
func Reasons() []Reason {
	return []Reason{ReasonUnknownCommand, ReasonBlocked, ReasonWrongLane, ReasonNamespace, ReasonMissingTTL,
		ReasonCrossSlot, ReasonRequestTooLarge, ReasonReplyTooLarge, ReasonScriptNotAllowed, ReasonMalformed}
}

// UnknownCommand is the Observer label for commands outside the catalog
// (their names are caller-controlled, so they never become labels).
const UnknownCommand = "unknown"

// ErrRejected is matched (errors.Is) by every *Rejection.
var ErrRejected = errors.New("command rejected by the guard")

// Rejection is the error the guard sets on a rejected command. Detail never
// contains key bytes, values or credentials.
type Rejection struct {
	Deployment string
	Lane       policy.Lane
	// Command is the catalog name, or "unknown".
	Command string
	Reason  Reason
	Detail  string
	// Sent is true only for reply-too-large after the command ran: the
	// server executed it and the guard withheld the reply.
	Sent bool
	// ReadOnly is the catalog's read-only flag (false for unknown commands).
	ReadOnly bool
}

// Error names deployment, lane, command and reason; never keys or values.
func (r *Rejection) Error() string {
	s := fmt.Sprintf("caphost guard: %s rejected on %s/%s: %s", r.Command, r.Deployment, r.Lane, r.Reason)
	if r.Detail != "" {
		s += " (" + r.Detail + ")"
	}
	return s
}

// Is makes errors.Is(rejection, ErrRejected) true.
func (r *Rejection) Is(target error) bool { return target == ErrRejected }

// CertaintyOutcome is Rejected for every pre-send rejection (the command
// never left the process). A reply-too-large rejection happens after the
// server executed the command: for a read that is still Rejected (nothing
// changed, the value is withheld), but for a write it is Indeterminate —
// the effect was applied and only the confirmation was discarded, so a
// caller must not treat it as "not applied".
func (r *Rejection) CertaintyOutcome() certainty.Outcome {
	if r.Sent && !r.ReadOnly {
		return certainty.Indeterminate
	}
	return certainty.Rejected
}

// ScriptAllowlist admits catalog programs; implemented by the program catalog.
type ScriptAllowlist interface {
	AllowSHA(sha1 string) bool
	AllowFunction(name string) bool
}

// Observer receives guard decisions. command is a catalog name or "unknown"
// (bounded label sets). Implementations must be safe for concurrent use and
// fast: they run on the command path.
type Observer interface {
	Admitted(lane policy.Lane, command string)
	Rejected(lane policy.Lane, command string, reason Reason)
	ReplyBytes(lane policy.Lane, n int)
}

// Config configures one Guard (one per deployment and lane).
type Config struct {
	Deployment string
	Lane       policy.Lane
	Catalog    *commands.Catalog
	// Namespace is the prefix every key and channel must start with, e.g.
	// "ca:demo:dev:".
	Namespace string
	// Cluster enables the same-slot pre-check for multi-key commands.
	Cluster bool
	// Budgets bound the request (sum of argument bytes) and every decoded
	// reply. Both must be positive.
	Budgets policy.Budgets
	// Scripts admits EVALSHA SHAs and FCALL functions; nil admits none.
	Scripts ScriptAllowlist
	// Observer is told about every decision; nil means no-op.
	Observer Observer
}

// ErrConfig is matched by every error New returns.
var ErrConfig = errors.New("invalid guard config")

// Guard is a redis.Hook. It is immutable and safe for concurrent use.
//
// Admission order: catalog lookup (unknown → reject) → blocked/support →
// lane → argument count → key positions → namespace on every key and
// channel → Cluster same slot → TTL duty → program allowlist → replica-wait
// grant (WAIT only) → request bytes (and a range-bounded reply) → send →
// reply bytes.
type Guard struct {
	deployment string
	lane       policy.Lane
	catalog    *commands.Catalog
	namespace  string
	cluster    bool
	maxReq     int
	maxReply   int
	scripts    ScriptAllowlist
	obs        Observer
}

var _ redis.Hook = (*Guard)(nil)

// New validates cfg and returns a Guard.
func New(cfg Config) (*Guard, error) {
	var errs []error
	if cfg.Deployment == "" {
		errs = append(errs, errors.New("deployment is empty"))
	}
	if !cfg.Lane.Valid() {
		errs = append(errs, fmt.Errorf("lane %q is not valid", cfg.Lane))
	}
	if cfg.Catalog == nil {
		errs = append(errs, errors.New("catalog is nil"))
	}
	// A namespace must end with the separator so that "ca:a" cannot admit
	// keys of "ca:ab:...", and must not contain glob characters so that a
	// PSUBSCRIBE pattern starting with it cannot escape it.
	if cfg.Namespace == "" || !strings.HasSuffix(cfg.Namespace, ":") || strings.ContainsAny(cfg.Namespace, "*?[]\\{}") {
		errs = append(errs, errors.New("namespace must be non-empty, end with ':' and contain no glob or hash-tag characters"))
	}
	if cfg.Budgets.MaxRequestBytes <= 0 || cfg.Budgets.MaxReplyBytes <= 0 {
		errs = append(errs, errors.New("budgets must be positive"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	obs := cfg.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	return &Guard{
		deployment: cfg.Deployment, lane: cfg.Lane, catalog: cfg.Catalog, namespace: cfg.Namespace,
		cluster: cfg.Cluster, maxReq: cfg.Budgets.MaxRequestBytes, maxReply: cfg.Budgets.MaxReplyBytes,
		scripts: cfg.Scripts, obs: obs,
	}, nil
}

type nopObserver struct{}

func (nopObserver) Admitted(policy.Lane, string)         {}
func (nopObserver) Rejected(policy.Lane, string, Reason) {}
func (nopObserver) ReplyBytes(policy.Lane, int)          {}

// DialHook passes dialing through unchanged.
func (g *Guard) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook checks one command before next and its reply after.
func (g *Guard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if g.admittedBefore(ctx, cmd) {
			// Already admitted by this guard at the cluster level: this is
			// the node client carrying (or redirecting) the same command.
			return next(ctx, cmd)
		}
		// e is the catalog's own entry, never copied (and never written).
		e, rej := g.check(ctx, cmd.Args())
		if rej != nil {
			g.obs.Rejected(g.lane, rej.Command, rej.Reason)
			cmd.SetErr(rej)
			return rej
		}
		g.obs.Admitted(g.lane, e.Name)
		if g.cluster {
			ctx = context.WithValue(ctx, admittedKey{g}, &admission{one: cmd})
		}
		err := next(ctx, cmd)
		if rej := g.checkReply(e, cmd); rej != nil {
			return rej
		}
		return err
	}
}

// ProcessPipelineHook checks every command of a pipeline (or MULTI/EXEC
// transaction) before any is sent: one rejection sends none.
func (g *Guard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if g.cluster && len(cmds) > 0 && g.admittedAll(ctx, cmds) {
			return next(ctx, cmds)
		}
		entries := make([]*commands.Entry, len(cmds))
		var first *Rejection
		bad := -1
		for i, cmd := range cmds {
			e, rej := g.check(ctx, cmd.Args())
			if rej != nil {
				first, bad = rej, i
				break
			}
			entries[i] = e
		}
		if first != nil {
			g.obs.Rejected(g.lane, first.Command, first.Reason)
			for i, cmd := range cmds {
				if i == bad {
					cmd.SetErr(first)
					continue
				}
				// Collateral commands carry the cause; nothing was sent.
				// Commands after the bad one were not checked: label them by
				// lookup only (still a bounded catalog name or "unknown").
				label := commandLabel(entries[i])
				if i > bad {
					e, _ := g.catalog.Lookup(cmd.Args())
					label = commandLabel(e)
				}
				cmd.SetErr(&Rejection{Deployment: g.deployment, Lane: g.lane, Command: label,
					Reason: first.Reason, Detail: fmt.Sprintf("pipeline command %d (%s) was rejected; none sent", bad, first.Command)})
			}
			return first
		}
		for _, e := range entries {
			g.obs.Admitted(g.lane, e.Name)
		}
		if g.cluster {
			ctx = context.WithValue(ctx, admittedKey{g}, &admission{many: cmds})
		}
		err := next(ctx, cmds)
		var replyErr error
		for i, cmd := range cmds {
			if rej := g.checkReply(entries[i], cmd); rej != nil && replyErr == nil {
				replyErr = rej
			}
		}
		if replyErr != nil {
			return replyErr
		}
		return err
	}
}

// RefusedWhole reports a pipeline the guard refused before sending any of
// it: every command carries a pre-send *Rejection. ProcessPipelineHook
// refuses a pipeline whole for one refused command, so a caller that
// batched independent calls into one pipeline sends them again one by one
// when this is true: each call is then refused only for its own command.
func RefusedWhole(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		var rej *Rejection
		if !errors.As(cmd.Err(), &rej) || rej.Sent {
			return false
		}
	}
	return len(cmds) > 0
}

// commandLabel is e's name, or UnknownCommand for nil (not in the catalog).
func commandLabel(e *commands.Entry) string {
	if e == nil {
		return UnknownCommand
	}
	return e.Name
}

// reject builds a rejection of e (nil: not in the catalog).
func (g *Guard) reject(e *commands.Entry, reason Reason, format string, a ...any) *Rejection {
	return &Rejection{Deployment: g.deployment, Lane: g.lane, Command: commandLabel(e), Reason: reason,
		Detail: fmt.Sprintf(format, a...), ReadOnly: e != nil && e.ReadOnly}
}

// Check runs the pre-send admission on args (go-redis cmd.Args()) without
// sending anything; it returns nil when the command would be admitted. It
// is the gate for traffic go-redis writes without hooks: PubSub's
// SUBSCRIBE, SSUBSCRIBE, PSUBSCRIBE and their UNSUBSCRIBEs go straight to
// the connection, so the runtime's pub/sub facade (runtime/pubsub.go)
// Checks each one before sending it. Check carries no replica-wait grant:
// it refuses WAIT.
func (g *Guard) Check(args []any) error {
	if _, rej := g.check(context.Background(), args); rej != nil {
		return rej
	}
	return nil
}

// check is the admission order. Keep it in the documented order. It
// returns the catalog's entry for args (nil for an unknown command; shared,
// never to be written) and the rejection, if any. ctx is read only for WAIT
// (its replica-wait grant).
func (g *Guard) check(ctx context.Context, args []any) (*commands.Entry, *Rejection) {
	// 1. catalog lookup: unknown → reject (default-deny).
	e, ok := g.catalog.Lookup(args)
	if !ok {
		return nil, g.reject(nil, ReasonUnknownCommand, "not in the command catalog")
	}
	return e, g.checkEntry(ctx, e, args)
}

// checkEntry is check's steps 2 onwards for the known entry e.
func (g *Guard) checkEntry(ctx context.Context, e *commands.Entry, args []any) *Rejection {
	// 2. blocked / support.
	if e.Blocked() {
		return g.reject(e, ReasonBlocked, "blocked by the catalog")
	}
	// 3. lane.
	if !e.AllowsLane(g.lane) {
		return g.reject(e, ReasonWrongLane, "not allowed on this lane")
	}
	if len(args) > e.MaxArgs {
		return g.reject(e, ReasonMalformed, "%d arguments, at most %d", len(args), e.MaxArgs)
	}
	// 4. key positions, 5. namespace on every key (and channel).
	var buf [8]int
	keys, err := e.AppendKeyPositions(buf[:0], args)
	if err != nil {
		return g.reject(e, ReasonMalformed, "key positions: %s", argsReason(err))
	}
	var chans []int
	if e.Channels.Kind != commands.KeysNone { // only Pub/Sub commands have channels
		chans, err = e.ChannelPositions(args)
		if err != nil {
			return g.reject(e, ReasonMalformed, "channel positions: %s", argsReason(err))
		}
		for _, i := range chans {
			if !g.inNamespace(args[i]) {
				return g.reject(e, ReasonNamespace, "channel argument %d is outside the namespace", i)
			}
		}
	}
	for _, i := range keys {
		if !g.inNamespace(args[i]) {
			return g.reject(e, ReasonNamespace, "key argument %d is outside the namespace", i)
		}
	}
	// 6. Cluster: one slot for multi-key commands, and for the channels of
	// sharded Pub/Sub, which hash to slots like keys.
	if g.cluster && len(keys) > 1 && !sameSlot(args, keys) {
		return g.reject(e, ReasonCrossSlot, "keys span more than one hash slot")
	}
	if g.cluster && len(chans) > 1 && shardedChannels(e) && !sameSlot(args, chans) {
		return g.reject(e, ReasonCrossSlot, "shard channels span more than one hash slot")
	}
	// 7. TTL duty for key-creating writes.
	switch e.CreatesKey {
	case commands.CreatesProgramOnly:
		return g.reject(e, ReasonMissingTTL, "creates keys without a TTL: only inside catalog programs")
	case commands.CreatesWithTTL:
		if reason := ttlProblem(e, args); reason != "" {
			return g.reject(e, ReasonMissingTTL, "%s", reason)
		}
	}
	// 8. programs: EVALSHA SHA / FCALL function in the allowlist.
	if rej := g.checkProgram(e, args); rej != nil {
		return rej
	}
	// 8b. WAIT: only under a replica-wait grant, within its bounds.
	if e.Name == "WAIT" {
		if rej := g.checkWait(ctx, e, args); rej != nil {
			return rej
		}
	}
	// 9. request bytes (and a request-declared reply size).
	n, ok := requestBytes(args, g.maxReq)
	if !ok {
		return g.reject(e, ReasonMalformed, "argument of an unsupported type")
	}
	if n > g.maxReq {
		return g.reject(e, ReasonRequestTooLarge, "request exceeds %d bytes", g.maxReq)
	}
	if e.Reply == commands.ReplyRangeBounded {
		if rej := g.checkRange(e, args); rej != nil {
			return rej
		}
	}
	return nil
}

// sameSlot reports whether the arguments at positions hash to one Cluster slot.
func sameSlot(args []any, positions []int) bool {
	first := hashslot.Of(argString(args[positions[0]]))
	for _, i := range positions[1:] {
		if hashslot.Of(argString(args[i])) != first {
			return false
		}
	}
	return true
}

// shardedChannels reports whether e is sharded Pub/Sub (Redis 7.0): its
// channels belong to the slot they hash to, and one SSUBSCRIBE spanning two
// slots would be refused by the server with CROSSSLOT after it was sent.
func shardedChannels(e *commands.Entry) bool {
	switch e.Name {
	case "SPUBLISH", "SSUBSCRIBE", "SUNSUBSCRIBE":
		return true
	}
	return false
}

func argsReason(err error) string {
	var ae *commands.ArgsError
	if errors.As(err, &ae) {
		return ae.Reason
	}
	return "malformed"
}

func (g *Guard) inNamespace(a any) bool {
	switch v := a.(type) {
	case string:
		return len(v) > len(g.namespace) && strings.HasPrefix(v, g.namespace)
	case []byte:
		return len(v) > len(g.namespace) && string(v[:len(g.namespace)]) == g.namespace
	}
	return false // keys are strings; anything else cannot carry the namespace
}

func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// ttlProblem checks SET-shaped options: exactly one positive expiry, and
// KEEPTTL only with XX (KEEPTTL on a missing key would create an immortal one).
func ttlProblem(e *commands.Entry, args []any) string {
	var found, keep, xx bool
	for i := e.OptionsFrom; i < len(args); i++ {
		tok := argString(args[i])
		switch {
		case tokenIs(tok, "XX"):
			xx = true
		case tokenIs(tok, "KEEPTTL") && contains(e.TTLOptions, "KEEPTTL"):
			keep, found = true, true
		case containsToken(e.TTLOptions, tok):
			if i+1 >= len(args) {
				return "expiry option without a value"
			}
			v, ok := intArg(args[i+1])
			if !ok || v <= 0 {
				return "expiry must be a positive integer"
			}
			if found {
				return "more than one expiry option"
			}
			found = true
			i++
		}
	}
	if !found {
		return "a key-creating write must carry an expiry option"
	}
	if keep && !xx {
		return "KEEPTTL may create a key without TTL unless combined with XX"
	}
	return ""
}

// tokenIs compares an option token with an upper-case option name the way
// Redis does (ASCII case-insensitive, like strcasecmp), without allocating:
// non-ASCII letters never fold into option names.
func tokenIs(tok, upper string) bool {
	if len(tok) != len(upper) {
		return false
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[i] {
			return false
		}
	}
	return true
}

// containsToken reports whether tok names one of the upper-case options.
func containsToken(options []string, tok string) bool {
	for _, o := range options {
		if tokenIs(tok, o) {
			return true
		}
	}
	return false
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func intArg(a any) (int64, bool) {
	switch v := a.(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case uint32:
		return int64(v), true
	case string, []byte:
		s := argString(v)
		var n int64
		if s == "" || len(s) > 18 {
			return 0, false
		}
		neg := s[0] == '-'
		if neg {
			s = s[1:]
		}
		if s == "" {
			return 0, false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, false
			}
			n = n*10 + int64(s[i]-'0')
		}
		if neg {
			n = -n
		}
		return n, true
	}
	return 0, false
}

func (g *Guard) checkProgram(e *commands.Entry, args []any) *Rejection {
	switch e.Name {
	case "EVALSHA", "EVALSHA_RO":
		sha := argString(args[1])
		if g.scripts == nil || len(sha) != 40 || !g.scripts.AllowSHA(strings.ToLower(sha)) {
			return g.reject(e, ReasonScriptNotAllowed, "script SHA is not in the program catalog")
		}
	case "FCALL", "FCALL_RO":
		fn := argString(args[1])
		if g.scripts == nil || fn == "" || !g.scripts.AllowFunction(fn) {
			return g.reject(e, ReasonScriptNotAllowed, "function is not in the program catalog")
		}
	}
	return nil
}

// checkWait admits WAIT numreplicas timeout only when ctx carries a
// replica-wait grant (runtime/internal/replwait), which the program
// executor attaches to one program-then-WAIT pipeline of a capability that
// configured replica acknowledgements: no grant is blocked (any other
// caller, any other path), and numreplicas above the grant, a timeout of 0
// (WAIT would block the pooled connection forever) or above the grant is
// malformed. Nothing is sent in either case.
func (g *Guard) checkWait(ctx context.Context, e *commands.Entry, args []any) *Rejection {
	grant, ok := replwait.From(ctx)
	if !ok || !grant.Valid() {
		return g.reject(e, ReasonBlocked, "WAIT only under a replica-wait grant (the fenced lease's replication profile)")
	}
	if len(args) != 3 {
		return g.reject(e, ReasonMalformed, "WAIT needs numreplicas and timeout")
	}
	n, ok1 := intArg(args[1])
	ms, ok2 := intArg(args[2])
	switch {
	case !ok1 || !ok2:
		return g.reject(e, ReasonMalformed, "WAIT numreplicas and timeout must be integers")
	case n < 1 || n > int64(grant.Acks):
		return g.reject(e, ReasonMalformed, "WAIT numreplicas must be within 1..%d (the grant)", grant.Acks)
	case ms < 1 || ms > grant.Timeout.Milliseconds():
		return g.reject(e, ReasonMalformed, "WAIT timeout must be within 1..%d ms (the grant; 0 blocks forever)", grant.Timeout.Milliseconds())
	}
	return nil
}

// checkRange bounds GETRANGE key start end before sending: a non-negative
// range larger than the reply budget would be withheld anyway, so it is
// refused without touching the server. Negative offsets (from the end)
// cannot be bounded here; the reply check catches them.
func (g *Guard) checkRange(e *commands.Entry, args []any) *Rejection {
	if len(args) != 4 {
		return g.reject(e, ReasonMalformed, "range needs start and end")
	}
	start, ok1 := intArg(args[2])
	end, ok2 := intArg(args[3])
	if !ok1 || !ok2 {
		return g.reject(e, ReasonMalformed, "range start and end must be integers")
	}
	if start >= 0 && end >= start && end-start+1 > int64(g.maxReply) {
		return g.reject(e, ReasonReplyTooLarge, "requested range exceeds the %d-byte reply budget", g.maxReply)
	}
	return nil
}

// checkReply measures the decoded reply; over budget it withholds the value
// (zeroes it) and replaces the result with a Rejection.
func (g *Guard) checkReply(e *commands.Entry, cmd redis.Cmder) *Rejection {
	if cmd.Err() != nil && !errors.Is(cmd.Err(), redis.Nil) {
		return nil
	}
	n := replyBytes(cmd, g.maxReply)
	g.obs.ReplyBytes(g.lane, n)
	if n <= g.maxReply {
		return nil
	}
	clearReply(cmd)
	rej := g.reject(e, ReasonReplyTooLarge, "reply exceeds %d bytes", g.maxReply)
	rej.Sent = true
	g.obs.Rejected(g.lane, rej.Command, rej.Reason)
	cmd.SetErr(rej)
	return rej
}

type admittedKey struct{ g *Guard }

// admittedBefore reports whether this guard already admitted cmd further up
// the same call (cluster client → node client). Only cluster guards mark
// contexts: standalone and sentinel clients have a single hook level.
func (g *Guard) admittedBefore(ctx context.Context, cmd redis.Cmder) bool {
	if !g.cluster {
		return false
	}
	a, ok := ctx.Value(admittedKey{g}).(*admission)
	return ok && a.contains(cmd)
}

func (g *Guard) admittedAll(ctx context.Context, cmds []redis.Cmder) bool {
	a, ok := ctx.Value(admittedKey{g}).(*admission)
	return ok && a.containsAll(cmds)
}

// admission records the exact commands a guard admitted, so the same guard
// installed on cluster node clients lets them (and their MOVED/ASK
// re-sends) through without re-checking or double counting, while any
// other command on that context is still checked in full.
type admission struct {
	one  redis.Cmder
	many []redis.Cmder
}

func (a *admission) contains(cmd redis.Cmder) bool {
	if a.one != nil {
		return sameCmd(a.one, cmd)
	}
	for _, c := range a.many {
		if sameCmd(c, cmd) {
			return true
		}
	}
	return false
}

func (a *admission) containsAll(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if !a.contains(c) {
			return false
		}
	}
	return len(cmds) > 0
}
