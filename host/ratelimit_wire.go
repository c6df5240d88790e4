package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/metrics"
	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
)

// ErrCapabilityDisabled is returned by a capability accessor when the
// configuration does not activate that capability.
var ErrCapabilityDisabled = errors.New("caphost: capability is not active")

// rateCapability is the name of the rate-limit block under capabilities.
const rateCapability = "rate-limit"

// rateWire holds the rate-limit capability: the limiter, the selector and
// the rebuild of the policy set when a rate-policy guest is swapped.
type rateWire struct {
	log     *slog.Logger
	cfg     ratelimit.Config
	lim     *ratelimit.Limiter
	conc    *ratelimit.ConcurrencyLimiter
	sel     ratelimit.Selector
	g       *guests // nil without guest modules
	mods    []string
	reloads *metrics.RatePolicyReloads

	// mu serialises rebuilds so two swaps cannot install sets out of order.
	mu sync.Mutex
}

// newRate decodes the capability block and builds the limiter on the
// runtime. The policy set is the configured policies plus those declared by
// the rate-policy guests, compiled together (duplicate ids fail). With a
// rate-policy guest the guest selects; otherwise the configured routes do
// (StaticSelector).
func (h *Host) newRate(ctx context.Context, c config.Capability) (*rateWire, error) {
	if h.rt == nil {
		return nil, fmt.Errorf("caphost: rate-limit: %w", ErrNoRuntime)
	}
	w := &rateWire{log: h.log, g: h.guests}
	if h.guests != nil {
		w.mods = h.guests.rateModules()
	}
	raw := c.Raw
	if _, ok := raw["policies"]; !ok && len(w.mods) > 0 {
		// The guests declare the policies; the block may then omit its own.
		raw = maps.Clone(raw)
		if raw == nil {
			raw = map[string]any{}
		}
		raw["policies"] = map[string]any{}
	}
	cfg, err := ratelimit.Decode(c.Provider, c.RedisRole, raw)
	if err != nil {
		return nil, err
	}
	w.cfg = cfg
	decls, err := w.guestDecls(ctx, "", nil)
	if err != nil {
		return nil, err
	}
	set, err := cfg.CompileWithGuests(decls)
	if err != nil {
		return nil, err
	}
	if w.lim, err = ratelimit.New(h.rt, cfg, set, ratelimit.WithLogger(h.log), ratelimit.WithRegisterer(h.reg)); err != nil {
		return nil, err
	}
	if w.conc, err = ratelimit.NewConcurrencyLimiter(w.lim, ratelimit.WithLogger(h.log), ratelimit.WithRegisterer(h.reg)); err != nil {
		return nil, err
	}
	if w.reloads, err = metrics.NewRatePolicyReloads(h.reg); err != nil {
		return nil, err
	}
	if len(w.mods) > 0 {
		if len(cfg.Routes) > 0 {
			h.log.Warn("rate-limit routes are ignored: a rate-policy guest selects policies", "guests", w.mods)
		}
		w.sel = ratelimit.NewGuestSelector(h.guests.mgr, w.mods...)
		h.guests.mu.Lock()
		h.guests.check = w.checkCandidate
		h.guests.mu.Unlock()
	} else {
		w.sel = ratelimit.NewStaticSelector(cfg.Routes)
	}
	return w, nil
}

// guestDecls collects the declared policies of every rate-policy guest from
// its serving generation; for module `candidate`, decls (the candidate's)
// are used instead.
func (w *rateWire) guestDecls(ctx context.Context, candidate string, decls []policy.RatePolicyDecl) (map[string][]policy.RatePolicyDecl, error) {
	out := make(map[string][]policy.RatePolicyDecl, len(w.mods))
	for _, n := range w.mods {
		if n == candidate {
			out[n] = decls
			continue
		}
		err := w.g.mgr.Use(ctx, n, func(m *plugins.Module) error {
			out[n] = ratelimit.GuestPolicyDecls(m.Description())
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("caphost: rate-policy guest %s: %w", n, err)
		}
	}
	return out, nil
}

// checkCandidate is the pre-swap check of a rate-policy guest candidate:
// its policies must compile with the configured ones and the other guests',
// and the limiter must accept the resulting set.
func (w *rateWire) checkCandidate(name string, d *abi.Description) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	decls, err := w.guestDecls(context.Background(), name, ratelimit.GuestPolicyDecls(d))
	if err != nil {
		return err
	}
	set, err := w.cfg.CompileWithGuests(decls)
	if err != nil {
		return err
	}
	return w.lim.CheckSwap(set)
}

// reload rebuilds the policy set from the serving generations after a
// rate-policy guest swap. The candidate's policies were checked before the
// swap, so a failure here means a concurrent change: it is logged and
// counted, and the previous set keeps serving (Limiter.Swap is atomic).
//
// Between the guest swap and this rebuild (microseconds) the new generation
// may select against the previous set: selections name policy ids only, so
// such a request is evaluated under the previous revision, or answered 503
// if it names a policy the previous set lacks — never allowed unchecked.
func (w *rateWire) reload(module string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	decls, err := w.guestDecls(context.Background(), "", nil)
	var set *policy.RatePolicySet
	if err == nil {
		set, err = w.cfg.CompileWithGuests(decls)
	}
	if err == nil {
		err = w.lim.Swap(set)
	}
	w.reloads.Record(err == nil)
	if err != nil {
		w.log.Error("rate policy set not rebuilt after guest swap; the previous set keeps serving", "module", module, "error", err)
		return
	}
	w.log.Info("rate policy set rebuilt after guest swap", "module", module, "policies", set.Len(), "digest", set.Digest())
}

// RateLimit returns the rate limiter and the selector the configuration
// wires (a rate-policy guest, else the configured routes), or
// ErrCapabilityDisabled.
func (h *Host) RateLimit() (*ratelimit.Limiter, ratelimit.Selector, error) {
	w := h.rate.Load()
	if w == nil {
		return nil, nil, ErrCapabilityDisabled
	}
	return w.lim, w.sel, nil
}
