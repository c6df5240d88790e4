// Package module is the lifecycle every caphost capability implements, the
// host's side of Caddy's module model: strict decode of the capability's own
// configuration block → provision on the host's resources → validate the
// provisioned whole → serve (HTTP routes, the capability's API) → close,
// with a failed provision cleaning up after itself.
//
// A capability is one package that exports an Info (its id, card, HTTP
// patterns and a constructor); the host's registration list
// (host/internal/builtin) names every Info explicitly, in a fixed order.
// Nothing registers itself: there are no init() side effects, and the order
// of the list is the order of provisioning (and the reverse, of closing).
//
// What may change here: the Env as capabilities need more host resources
// (always narrow, typed handles — never a raw client). What must not: the
// order of the lifecycle, and that Decode does no I/O, so `caphost check`
// runs exactly the code `caphost serve` runs without touching Redis.
package module

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// Info registers one capability with the host.
type Info struct {
	// ID is the capability id: the block name under `capabilities` and the
	// Capability of its descriptor.
	ID string
	// Readiness is the level the implementation claims, the package's own
	// constant; every Descriptor the module returns carries it.
	Readiness capability.Readiness
	// Providers lists the provider ids the capability implements (besides
	// "disabled").
	Providers []string
	// Card is the capability card (markdown; see capability.ParseCard).
	Card []byte
	// Example is a minimal valid block for the capability (YAML, as it
	// would stand under capabilities.<ID>); tests derive their hostile
	// variants from it and documentation shows it.
	Example string
	// Routes lists the net/http ServeMux patterns the capability serves
	// when active ("POST /v1/ratelimit/evaluate"), so the daemon can answer
	// them with 503 capability-disabled when it is not.
	Routes []string
	// New returns a fresh, unconfigured module.
	New func() Module
}

// Block is a capability's configuration block as host/config read it: the
// envelope every block shares (provider, redis-role) and the capability's
// own keys, which only the capability interprets.
type Block struct {
	// Path is the block's configuration path ("capabilities.rate-limit").
	Path     string
	Provider string
	// Role is the redis-role of the block ("" when absent), and
	// RoleRequired that role's `required` flag (redis.roles.<role>).
	Role         policy.Role
	RoleRequired bool
	// Raw holds every key but provider and redis-role.
	Raw map[string]any
	// GuestModules names the configured guest modules, sorted (their kinds
	// are known only once they are loaded, in Provision).
	GuestModules []string
	// Dir is the directory a relative file path in the block resolves
	// against: the configuration file's ("" when there is none, and then
	// the working directory).
	Dir string
}

// Module is one capability instance. The host calls, in order and at most
// once each: Decode; then, if the whole configuration decoded, Provision,
// Validate, Routes; and Close once, whenever Provision was called (also
// after a failed Provision or Validate, and in reverse registration
// order). Routes and the capability's own API are served between Validate
// and Close.
type Module interface {
	// Decode reads the block strictly: unknown keys, wrong types and bad
	// values fail, every problem is added to ps, and nothing is done
	// beyond decoding (no I/O, no goroutine).
	Decode(b Block, ps *policy.Problems)
	// Descriptor describes the decoded capability.
	Descriptor() capability.Descriptor
	// Provision builds the capability on env. Whatever it built before
	// failing is released by Close.
	Provision(ctx context.Context, env Env) error
	// Validate checks the provisioned capability as a whole (for example
	// the policies guests declare against the configured ones).
	Validate(ctx context.Context) error
	// Routes returns the HTTP handlers of the capability's sidecar API,
	// keyed by exactly the patterns of its Info.Routes.
	Routes() map[string]http.Handler
	// Guests lists the guest modules plugged into the capability, sorted.
	Guests() []string
	// Close releases everything Provision built. It must be safe after a
	// partial Provision.
	Close(ctx context.Context) error
}

// Env is what a capability may use while it provisions and serves. Every
// handle is narrow and owned by the host: a capability never closes them.
type Env struct {
	Log        *slog.Logger
	Registerer prometheus.Registerer
	// Runtime is the Redis runtime; it serves every role the configuration
	// selected, including the capability's own.
	Runtime *runtime.Runtime
	// Guests is nil when no guest module is configured.
	Guests Guests
}

// Guests is the host's guest surface as a capability sees it.
type Guests interface {
	// Manager serves calls into the loaded modules.
	Manager() *plugins.Manager
	// ModulesOfKind lists the loaded modules that declare kind, sorted.
	ModulesOfKind(kind abi.Kind) []string
	// Hook subscribes to swaps of the modules declaring kind. One hook per
	// kind; a second Hook for the same kind replaces the first.
	Hook(kind abi.Kind, h GuestHook)
}

// GuestHook is a capability's part in a guest swap.
type GuestHook struct {
	// Check runs before a candidate of a hooked kind is swapped in, with
	// its description; an error refuses the swap and the serving
	// generation keeps serving.
	Check func(ctx context.Context, module string, d *abi.Description) error
	// Swapped runs after a successful swap of such a module.
	Swapped func(module string)
}

// AddDecodeError appends what a block decoder returned to ps: the problems
// of a *policy.ValidationError as they are, any other error as one
// config.type problem at the block's path.
func (b Block) AddDecodeError(ps *policy.Problems, err error) {
	var verr *policy.ValidationError
	switch {
	case errors.As(err, &verr):
		*ps = append(*ps, verr.Problems...)
	case err != nil:
		ps.Add(b.Path, policy.RuleType, "%v", err)
	}
}

// RoleOr returns decoded when the decoder set it, else the block's
// redis-role, else def.
func (b Block) RoleOr(decoded, def policy.Role) policy.Role {
	switch {
	case decoded != "":
		return decoded
	case b.Role != "":
		return b.Role
	}
	return def
}

// Impact is a capability's impact on readiness: required exactly when
// its Redis role is.
func Impact(roleRequired bool) capability.Impact {
	if roleRequired {
		return capability.ImpactRequired
	}
	return capability.ImpactOptional
}
