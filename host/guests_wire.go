package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/internal/module"
	"github.com/caphost/caphost/host/metrics"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/extism"
	"github.com/caphost/caphost/plugins/trust"
	"github.com/caphost/caphost/policy"
)

// Errors of the guest surface; match with errors.Is. A rejected candidate is
// a *plugins.SwapError whose cause is one of these (verify stage) or a
// plugins failure class.
var (
	// ErrNoGuests is returned by SwapGuest when no guest module is configured.
	ErrNoGuests = errors.New("caphost: no guest module is configured")
	// ErrSwapUnauthorized: a swap candidate carries no signature that a
	// trusted key verifies, and unsigned swaps are not allowed.
	ErrSwapUnauthorized = errors.New("caphost: guest swap not authorised")
	// ErrGuestKindChange: a candidate adds or removes a kind that an active
	// capability consumes (rate-policy for rate-limit); the host wires
	// capabilities at start-up, so that needs a restart.
	ErrGuestKindChange = errors.New("caphost: guest swap changes a kind a capability consumes")
	// ErrGuestPolicies: a capability refused the candidate's declarations —
	// for rate-limit, its rate policies do not compile together with the
	// configured ones, or the limiter would refuse them (for example a
	// changed policy under an unchanged revision).
	ErrGuestPolicies = errors.New("caphost: guest declarations rejected by a capability")
)

// GuestStatus describes one guest module for operators.
type GuestStatus struct {
	Name       string
	Generation uint64
	SHA256     string
	// Flavour is "native" or "extism" (plugins.Flavour).
	Flavour string
	Kinds   []string
	// Declared lists "kind:id" for every declaration, sorted.
	Declared []string
	// PreviousGeneration is the generation RollbackGuest restores (0:
	// none), PreviousSHA256 its module's digest.
	PreviousGeneration uint64
	PreviousSHA256     string
	LastSwapAt         time.Time
	LastSwapOK         bool
	LastSwapError      string
}

// guests wires the plugins engines (native and Extism: one Manager serves
// both flavours through the same stages) and the manager to configuration.
//
// Trust rule. The initial load of a module is authorised by its sha256 pin
// from configuration (plus its signature when one is configured, or
// required). A swapped module cannot match the old pin, so a swap — through
// the admin API or a watched file change — is authorised by signature: a
// valid ed25519 signature by a trusted key (the .sig document passed to
// SwapGuest, or for a watched file the configured signature file, re-read).
// With no trusted key configured, swaps are refused unless
// security.allow-unsigned-swaps is true.
type guests struct {
	log  *slog.Logger
	cfg  policy.GuestsConfig
	sec  policy.SecurityConfig
	keys trust.TrustedKeys
	eng  *plugins.Engine
	ext  *extism.Engine
	mgr  *plugins.Manager
	obs  *metrics.Guests

	mu      sync.Mutex
	loaded  map[string]bool                 // initial load done: later verifications are swaps
	pending map[pendingKey]*trust.Signature // signatures of admin swaps in progress
	kinds   map[string][]abi.Kind           // kinds each module declared at load (fixed at start-up)
	hooks   map[abi.Kind]module.GuestHook   // capabilities' swap hooks, by consumed kind
}

type pendingKey struct {
	name   string
	digest trust.Pin
}

// newGuests creates the engine and manager and loads every configured
// module, reporting every failure at once.
func newGuests(ctx context.Context, log *slog.Logger, cfg policy.GuestsConfig, sec policy.SecurityConfig, keys trust.TrustedKeys, reg prometheus.Registerer, onSwap func(module string, ok bool)) (*guests, error) {
	names := make([]string, 0, len(cfg.Modules))
	for n := range cfg.Modules {
		names = append(names, n)
	}
	sort.Strings(names)
	obs, err := metrics.NewGuests(reg, names)
	if err != nil {
		return nil, fmt.Errorf("caphost: guest metrics: %w", err)
	}
	// Both flavours' engines share the compilation cache directory, the
	// metrics and the logger: an Extism guest is observed like a native one.
	ecfg := plugins.Config{CacheDir: cfg.CompileCacheDir, Observer: obs, Logger: log, MaxModuleBytes: maxModuleBytes}
	eng, err := plugins.NewEngine(ecfg)
	if err != nil {
		return nil, fmt.Errorf("caphost: guest engine: %w", err)
	}
	ext, err := extism.NewEngine(ecfg)
	if err != nil {
		_ = eng.Close(ctx)
		return nil, fmt.Errorf("caphost: extism guest engine: %w", err)
	}
	g := &guests{log: log, cfg: cfg, sec: sec, keys: keys, eng: eng, ext: ext, obs: obs,
		loaded: map[string]bool{}, pending: map[pendingKey]*trust.Signature{},
		kinds: map[string][]abi.Kind{}, hooks: map[abi.Kind]module.GuestHook{}}
	g.mgr = plugins.NewManager(eng, plugins.ManagerOptions{
		Verify: g.verify, Extism: ext, Check: g.check, Logger: log,
		Observer: swapObserver{Guests: obs, onSwap: func(module string, ok bool) {
			if g.isLoaded(module) {
				onSwap(module, ok)
			}
		}},
	})
	var errs []error
	for _, n := range names {
		m := cfg.Modules[n]
		wasm, err := readModuleFile(m.Path)
		if err == nil {
			err = g.mgr.Load(ctx, n, wasm, limitsOf(m.Limits, m.Grants))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("guest %s: %w", n, err))
			continue
		}
		_ = g.mgr.Use(ctx, n, func(mod plugins.Guest) error {
			if d := mod.Description(); d != nil {
				g.mu.Lock()
				g.kinds[n] = slices.Clone(d.Kinds)
				g.mu.Unlock()
			}
			return nil
		})
		g.mu.Lock()
		g.loaded[n] = true
		g.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		g.close(ctx)
		return nil, fmt.Errorf("caphost: guests: %w", err)
	}
	return g, nil
}

// watch starts the file watchers (guests.watch). New calls it last, once
// the capabilities that react to swaps are wired, so a change landing
// during start-up cannot bypass the policy rebuild.
func (g *guests) watch(ctx context.Context) error {
	if !g.cfg.Watch {
		return nil
	}
	names := make([]string, 0, len(g.cfg.Modules))
	for n := range g.cfg.Modules {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		// The watchers outlive New's context: they stop when the manager closes.
		if err := g.mgr.Watch(context.WithoutCancel(ctx), n, g.cfg.Modules[n].Path); err != nil {
			errs = append(errs, fmt.Errorf("guest %s: watch: %w", n, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("caphost: guests: %w", err)
	}
	return nil
}

// maxModuleBytes matches host/config's bound on module files.
const maxModuleBytes = 64 << 20

func readModuleFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxModuleBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxModuleBytes {
		return nil, fmt.Errorf("%s exceeds %d MiB", path, maxModuleBytes>>20)
	}
	return b, nil
}

// limitsOf maps configured limits (validated against policy's caps, which
// are within plugins' hard caps) and grants (validated by policy's
// guests.grants rule) to engine limits; InitTimeout keeps the engine
// default.
func limitsOf(l policy.GuestLimits, grants []string) plugins.Limits {
	return plugins.Limits{
		Grants:         plugins.GrantsOf(grants...),
		MemoryPages:    uint32(max(l.MemoryPages, 0)),
		CallTimeout:    l.CallTimeout,
		MaxInputBytes:  l.MaxInputBytes,
		MaxOutputBytes: l.MaxOutputBytes,
		MaxHostCalls:   l.MaxHostCalls,
		PoolSize:       l.PoolSize,
		RecycleAfter:   uint64(max(l.RecycleAfter, 0)),
		MaxStackBytes:  l.MaxStackBytes,
	}
}

func (g *guests) isLoaded(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.loaded[name]
}

// Manager implements module.Guests.
func (g *guests) Manager() *plugins.Manager { return g.mgr }

// ModulesOfKind implements module.Guests: the modules that declared kind
// when they were loaded, sorted.
func (g *guests) ModulesOfKind(kind abi.Kind) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for n, ks := range g.kinds {
		if slices.Contains(ks, kind) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Hook implements module.Guests.
func (g *guests) Hook(kind abi.Kind, h module.GuestHook) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hooks[kind] = h
}

// notifySwapped tells the capabilities consuming a kind the module declares
// that it was swapped.
func (g *guests) notifySwapped(name string) {
	g.mu.Lock()
	var fns []func(string)
	for _, k := range g.kinds[name] {
		if h, ok := g.hooks[k]; ok && h.Swapped != nil {
			fns = append(fns, h.Swapped)
		}
	}
	g.mu.Unlock()
	for _, f := range fns {
		f(name)
	}
}

// verify is the manager's Verifier (see the trust rule on guests).
func (g *guests) verify(name string, wasm []byte) error {
	m, ok := g.cfg.Modules[name]
	if !ok {
		return fmt.Errorf("%w: %s", plugins.ErrUnknownModule, name)
	}
	digest := trust.Digest(wasm)
	g.mu.Lock()
	swap := g.loaded[name]
	sig := g.pending[pendingKey{name, digest}]
	g.mu.Unlock()
	if !swap {
		pin, err := trust.ParsePin(m.SHA256)
		if err != nil {
			return err
		}
		var cfgSig *trust.Signature
		if m.Signature != "" {
			if cfgSig, err = trust.ReadSignatureFile(m.Signature); err != nil {
				return err
			}
		}
		_, err = trust.Verify(wasm, pin, cfgSig, g.keys, g.sec.RequireSignedGuests)
		return err
	}
	if sig == nil && m.Signature != "" {
		// A watched change: the operator replaces the module and its
		// signature file together. A stale signature names the old digest
		// and fails below.
		if s, err := trust.ReadSignatureFile(m.Signature); err == nil {
			sig = s
		}
	}
	switch {
	case g.keys.Len() > 0:
		if sig == nil {
			return fmt.Errorf("%w: a signature by a trusted key is required", ErrSwapUnauthorized)
		}
		if _, err := trust.Verify(wasm, digest, sig, g.keys, true); err != nil {
			return fmt.Errorf("%w: %w", ErrSwapUnauthorized, err)
		}
	case !g.sec.AllowUnsignedSwaps:
		return fmt.Errorf("%w: no trusted key is configured and security.allow-unsigned-swaps is false", ErrSwapUnauthorized)
	}
	return nil
}

// check is the manager's capability stage, run on a verified, tested
// candidate (and on the generation a rollback restores): it refuses a
// change of any kind a capability consumes, and runs those capabilities'
// checks (the rate capability refuses policies its limiter would not
// accept), so the capability's own swap after the guest swap cannot fail.
// It reads the loaded candidate's description: nothing is instantiated
// again.
func (g *guests) check(ctx context.Context, name string, candidate plugins.Guest) error {
	d := candidate.Description()
	g.mu.Lock()
	was, loaded := g.kinds[name], g.loaded[name]
	hooked := make([]abi.Kind, 0, len(g.hooks))
	for k := range g.hooks {
		hooked = append(hooked, k)
	}
	hooks := maps.Clone(g.hooks)
	g.mu.Unlock()
	if !loaded {
		return nil // the initial load: capabilities are wired after it
	}
	slices.Sort(hooked)
	for _, k := range hooked {
		is := d != nil && slices.Contains(d.Kinds, k)
		if is != slices.Contains(was, k) {
			return fmt.Errorf("%w: module %s, kind %s", ErrGuestKindChange, name, k)
		}
		if is && hooks[k].Check != nil {
			if err := hooks[k].Check(ctx, name, d); err != nil {
				return fmt.Errorf("%w: %w", ErrGuestPolicies, err)
			}
		}
	}
	return nil
}

// swap runs an admin swap with its signature document (nil: unsigned).
func (g *guests) swap(ctx context.Context, name string, wasm, signature []byte) error {
	if _, ok := g.cfg.Modules[name]; !ok {
		return fmt.Errorf("%w: %s", plugins.ErrUnknownModule, name)
	}
	key := pendingKey{name, trust.Digest(wasm)}
	if signature != nil {
		sig, err := trust.ParseSignature(signature)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrSwapUnauthorized, err)
		}
		g.mu.Lock()
		g.pending[key] = sig
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			delete(g.pending, key)
			g.mu.Unlock()
		}()
	}
	_, err := g.mgr.Swap(ctx, name, wasm)
	return err
}

// rollback restores the module's previous verified generation (see
// plugins.Manager.Rollback); no signature is asked for: the module was
// authorised when it was first swapped in.
func (g *guests) rollback(ctx context.Context, name string) error {
	if _, ok := g.cfg.Modules[name]; !ok {
		return fmt.Errorf("%w: %s", plugins.ErrUnknownModule, name)
	}
	_, err := g.mgr.Rollback(ctx, name)
	return err
}

func (g *guests) status() []GuestStatus {
	st := g.mgr.Status()
	out := make([]GuestStatus, 0, len(st))
	for _, s := range st {
		gs := GuestStatus{Name: s.Name, Generation: s.Generation, SHA256: s.SHA256, Flavour: string(s.Flavour), Declared: s.Declared,
			PreviousGeneration: s.Previous, PreviousSHA256: s.PreviousSHA256,
			LastSwapAt: s.LastSwap.At, LastSwapOK: s.LastSwap.OK, LastSwapError: s.LastSwap.Error}
		for _, k := range s.Kinds {
			gs.Kinds = append(gs.Kinds, string(k))
		}
		out = append(out, gs)
	}
	return out
}

// closeManager stops the watchers and drains the generations: in-flight
// guest calls finish, no swap can start.
func (g *guests) closeManager(ctx context.Context) error { return g.mgr.Close(ctx) }

// closeEngine closes both engines and their compilation caches.
func (g *guests) closeEngine(ctx context.Context) error {
	return errors.Join(g.eng.Close(ctx), g.ext.Close(ctx))
}

func (g *guests) close(ctx context.Context) {
	_ = g.closeManager(ctx)
	_ = g.closeEngine(ctx)
}

// swapObserver forwards swap metrics and tells the host about swaps of
// loaded modules (initial loads are wired by New itself).
type swapObserver struct {
	*metrics.Guests
	onSwap func(module string, ok bool)
}

// Swapped implements plugins.SwapObserver.
func (o swapObserver) Swapped(module string, generation uint64, ok bool, class string) {
	o.Guests.Swapped(module, generation, ok, class)
	o.onSwap(module, ok)
}

// RollbackGuest makes the named guest's previous verified generation serve
// again (DESIGN §7), without an upload: the module kept from before the
// last swap is checked by the capabilities again (the policy set may have
// moved on) and installed as a new generation. On any failure the serving
// generation keeps serving and the error is a *plugins.SwapError
// (errors.Is: ErrGuestPolicies, plugins.ErrDuplicateID, ...);
// plugins.ErrNoPrevious when nothing was kept, plugins.ErrUnknownModule for
// an unknown name, ErrNoGuests without guests.
func (h *Host) RollbackGuest(ctx context.Context, name string) (GuestStatus, error) {
	if h.guests == nil {
		return GuestStatus{}, ErrNoGuests
	}
	err := h.guests.rollback(ctx, name)
	for _, s := range h.guests.status() {
		if s.Name == name {
			return s, err
		}
	}
	return GuestStatus{}, err
}
