package cache

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// Guests is the guest surface the cache uses: the manager that serves
// calls and the loaded modules of a kind. host/internal/module.Guests
// implements it.
type Guests interface {
	Manager() *plugins.Manager
	ModulesOfKind(kind abi.Kind) []string
}

// Options configure New.
type Options struct {
	// Log receives the cache's log lines (default slog.Default()).
	Log *slog.Logger
	// Registerer receives the cache's instruments (nil: none registered).
	Registerer prometheus.Registerer
	// Clock is the host's clock (default time.Now). Every freshness and
	// expiry judgement reads it, so tests move time explicitly.
	Clock func() time.Time
	// Guests serves the codec and cache-region guests (nil: none).
	Guests Guests
}

// Cache is the cache capability: the regions of the current policy set on
// one Redis deployment. It is safe for concurrent use; Close ends it.
type Cache struct {
	log    *slog.Logger
	clock  func() time.Time
	dep    *runtime.Deployment
	reads  *runtime.ScopedReader // the lookups' L2 reads, batched under load
	exec   *programs.Executor
	keys   *keys.Builder
	guests Guests
	cfg    Config
	m      *metrics
	hints  *hints // nil: no hint channel (no region uses L1)
	// waiters are the callers waiting for a refresh lease holder's write.
	waiters waiters
	// instance identifies this Cache in hints (a host ignores its own) and
	// prefixes its refresh-lease owners.
	instance [16]byte
	// tokenKey authenticates refresh tokens (claim.go).
	tokenKey [32]byte

	state atomic.Pointer[state]
	// mu serialises policy rebuilds so two swaps cannot install sets out of
	// order.
	mu       sync.Mutex
	bg       sync.WaitGroup // background rewrites and verifications
	rewrites chan struct{}  // rewrite slots (maxRewrites)
	verifier *verifier      // codec deadlines judged on CPU (verify.go)
	closed   atomic.Bool
}

// state is one policy set and the regions built for it.
type state struct {
	set     *policy.CacheRegionSet
	regions map[string]*region
}

// New builds the cache on dep (the deployment of cfg.Role) with the
// regions of cfg and of the loaded guests. A region the compiler refuses,
// or a codec no guest declares, fails New with every problem.
func New(ctx context.Context, dep *runtime.Deployment, kb *keys.Builder, cfg Config, o Options) (*Cache, error) {
	if dep == nil || kb == nil {
		return nil, errors.New("cache: New needs a deployment and a key builder")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	c := &Cache{log: o.Log, clock: o.Clock, dep: dep, reads: dep.NewScopedReader(batchFlights, batchSize),
		exec: dep.Programs().Batched(batchFlights, batchSize), keys: kb, guests: o.Guests, cfg: cfg,
		rewrites: make(chan struct{}, maxRewrites), verifier: newVerifier()}
	_, _ = rand.Read(c.instance[:])
	if cfg.HintSecret.IsZero() {
		_, _ = rand.Read(c.tokenKey[:])
	} else {
		m := hmac.New(sha256.New, cfg.HintSecret.Reveal())
		m.Write([]byte("caphost/cache/refresh-token-key/v1"))
		copy(c.tokenKey[:], m.Sum(nil))
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	c.m = m
	if o.Registerer != nil {
		if err := o.Registerer.Register(newCollector(c)); err != nil {
			return nil, fmt.Errorf("cache: metrics: %w", err)
		}
	}
	cp, err := c.compile(ctx, "", nil)
	if err != nil {
		return nil, err
	}
	st, err := c.build(cp, nil)
	if err != nil {
		return nil, err
	}
	c.state.Store(st)
	c.logClamps(st, nil)
	// With a hint secret the channel runs whether or not a region uses L1
	// yet: a guest swap may turn L1 on.
	if !cfg.HintSecret.IsZero() {
		if err := c.startHints(ctx); err != nil {
			c.closeState(st)
			return nil, err
		}
	}
	return c, nil
}

// Region returns a handle on region id. The handle resolves the region's
// current policy on every call, so it stays valid across guest swaps (a
// call on a region a swap removed fails with ErrUnknownRegion).
func (c *Cache) Region(id string) (*Region, error) {
	if _, ok := c.state.Load().regions[id]; !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRegion, boundedID(id))
	}
	return &Region{c: c, id: id}, nil
}

// Regions lists the current region policies, sorted by id.
func (c *Cache) Regions() []policy.CacheRegionPolicy {
	st := c.state.Load()
	out := make([]policy.CacheRegionPolicy, 0, len(st.regions))
	for _, id := range st.set.IDs() {
		out = append(out, st.regions[id].pol)
	}
	return out
}

// Region is a handle on one region of a Cache.
type Region struct {
	c  *Cache
	id string
	// view is the region's runtime under the last policy set a call saw,
	// so that a call under the same set skips the map lookup.
	view atomic.Pointer[regionView]
}

// regionView is a region's runtime under one policy set.
type regionView struct {
	st *state
	rg *region
}

// ID returns the region id.
func (r *Region) ID() string { return r.id }

// current returns the region's runtime under the current policy set.
func (r *Region) current() (*region, error) {
	if r.c.closed.Load() {
		return nil, ErrClosed
	}
	st := r.c.state.Load()
	if v := r.view.Load(); v != nil && v.st == st {
		return v.rg, nil
	}
	rg, ok := st.regions[r.id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRegion, boundedID(r.id))
	}
	r.view.Store(&regionView{st: st, rg: rg})
	return rg, nil
}

// Close stops the hint subscription, cancels running loads and a running
// codec verification, waits for them and for background rewrites, and
// releases every L1. The deployment is the
// runtime's and stays open.
func (c *Cache) Close(ctx context.Context) error {
	if c.closed.Swap(true) {
		return nil
	}
	var errs []error
	if c.hints != nil {
		errs = append(errs, c.hints.close())
	}
	c.verifier.close()
	// Closing a region cancels its loads and waits for them; a loader that
	// ignores its context must not hold the host's shutdown beyond ctx.
	done := make(chan struct{})
	go func() {
		c.closeState(c.state.Load())
		c.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("cache: close: loads or rewrites still running: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

func (c *Cache) closeState(st *state) {
	for _, r := range st.regions {
		r.close()
	}
}

// compile compiles the configured regions with those the cache-region
// guests declare, against the codecs the codec guests declare. For module
// candidate (a swap candidate), cand is used instead of its serving
// generation's description.
func (c *Cache) compile(ctx context.Context, candidate string, cand *abi.Description) (*compiled, error) {
	codecs := map[string]policy.CacheCodecInfo{policy.CacheBuiltinCodec: BuiltinCodecInfo()}
	out := &compiled{codecModule: map[string]string{}}
	decls := slices.Clone(c.cfg.Regions)
	if c.guests != nil {
		descs, err := c.descriptions(ctx, candidate, cand)
		if err != nil {
			return nil, err
		}
		for _, mod := range c.guests.ModulesOfKind(abi.KindCodec) {
			for _, cd := range descs[mod].Codecs {
				if _, dup := codecs[cd.SchemaID]; dup {
					return nil, fmt.Errorf("cache: codec %q is declared twice (guest %s)", cd.SchemaID, mod)
				}
				codecs[cd.SchemaID] = policy.CacheCodecInfo{Source: "guest:" + mod, WriteVersion: cd.WriteVersion,
					Readable: slices.Clone(cd.ReadableVersions)}
				out.codecModule[cd.SchemaID] = mod
			}
		}
		for _, mod := range c.guests.ModulesOfKind(abi.KindCacheRegion) {
			for _, rd := range descs[mod].Regions {
				decls = append(decls, guestRegion(mod, rd))
			}
		}
	}
	set, err := policy.CompileCacheRegions(decls, c.cfg.compileOptions(codecs))
	if err != nil {
		return nil, err
	}
	if set.UsesL1() && c.cfg.HintSecret.IsZero() {
		return nil, fmt.Errorf("cache: a region uses L1 but %s.hints.hmac is not configured: invalidation hints need it", capPath)
	}
	if err := c.checkBudgets(set); err != nil {
		return nil, err
	}
	out.set = set
	return out, nil
}

// batchFlights and batchSize bound the batching of the lookups' L2 reads
// (runtime.ScopedReader) and of the program calls (writes, claims,
// generation creation; programs.Executor.Batched): calls that arrive
// while batchFlights are in flight leave together when one completes, at
// most batchSize in one pipeline, so 32 concurrent lookups pay a few
// write and read syscalls instead of 32 of each.
const (
	batchFlights = 4
	batchSize    = 32
)

// putOverhead bounds what a cache-put-v2 call sends besides the value:
// two keys, the generation, the TTL, condition and observation arguments
// and the RESP framing.
const putOverhead = 2048

// checkBudgets refuses a region whose largest value could not pass the
// deployment's guard: the bounded read asks for its read bound + 1 bytes,
// a write sends the value with the call's other arguments.
func (c *Cache) checkBudgets(set *policy.CacheRegionSet) error {
	b := c.dep.Budgets()
	var errs []error
	for _, id := range set.IDs() {
		p, _ := set.Lookup(id)
		read := max(p.MaxStoredBytes(), observedPrefix) + 1
		if b.MaxReplyBytes > 0 && read > b.MaxReplyBytes {
			errs = append(errs, fmt.Errorf("cache: region %s reads up to %d bytes, over the deployment's budgets.max-reply-bytes %d: lower max-bytes or raise the budget", id, read, b.MaxReplyBytes))
		}
		if write := p.MaxStoredBytes() + putOverhead; b.MaxRequestBytes > 0 && write > b.MaxRequestBytes {
			errs = append(errs, fmt.Errorf("cache: region %s writes up to %d bytes, over the deployment's budgets.max-request-bytes %d: lower max-bytes or raise the budget", id, write, b.MaxRequestBytes))
		}
	}
	return errors.Join(errs...)
}

// compiled is a compiled region set with the module serving each guest
// codec.
type compiled struct {
	set         *policy.CacheRegionSet
	codecModule map[string]string
}

// descriptions returns the description of every codec and cache-region
// module, the candidate's for candidate.
func (c *Cache) descriptions(ctx context.Context, candidate string, cand *abi.Description) (map[string]*abi.Description, error) {
	out := map[string]*abi.Description{}
	for _, kind := range []abi.Kind{abi.KindCodec, abi.KindCacheRegion} {
		for _, mod := range c.guests.ModulesOfKind(kind) {
			if _, ok := out[mod]; ok {
				continue
			}
			if mod == candidate {
				out[mod] = cand
				continue
			}
			err := c.guests.Manager().Use(ctx, mod, func(g plugins.Guest) error {
				out[mod] = g.Description()
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("cache: guest %s: %w", mod, err)
			}
		}
	}
	return out, nil
}

// guestRegion turns a cache-region guest's declaration into a region
// declaration; the compiler clamps it into the operator's bounds.
func guestRegion(mod string, d abi.RegionDecl) policy.CacheRegionDecl {
	return policy.CacheRegionDecl{
		ID: d.ID, Source: "guest:" + mod, KeyVersion: int(d.KeyVersion), Codec: d.Codec,
		SoftTTL: time.Duration(d.SoftTTLMs) * time.Millisecond, HardTTL: time.Duration(d.HardTTLMs) * time.Millisecond,
		NegativeTTL: time.Duration(d.NegativeTTLMs) * time.Millisecond, Jitter: float64(d.JitterPercent) / 100,
		StaleIfError: d.StaleIfError, L1: d.L1, MaxBytes: int(min(d.MaxBytes, int64(policy.CacheMaxValueBytes+1))),
		Consistency: policy.CacheConsistency(d.Consistency), Stampede: policy.CacheStampede(d.Stampede),
		Admit: true, Canonicalize: true,
	}
}

// build builds the regions of set. A region whose policy digest is
// unchanged from prev keeps its runtime (L1, single-flight, bulkhead); a
// region with a new policy gets a new runtime and keeps only the
// generation view of an unchanged key layout.
func (c *Cache) build(cp *compiled, prev *state) (*state, error) {
	set := cp.set
	st := &state{set: set, regions: make(map[string]*region, set.Len())}
	for _, id := range set.IDs() {
		p, _ := set.Lookup(id)
		if prev != nil {
			if old, ok := prev.regions[id]; ok && old.pol.Digest == p.Digest {
				st.regions[id] = old
				continue
			}
		}
		var gens *generations
		if prev != nil {
			if old, ok := prev.regions[id]; ok && layoutID(old.pol) == layoutID(p) {
				gens = old.gens
			}
		}
		var cd codec = bytesCodec{}
		if p.Codec != policy.CacheBuiltinCodec {
			cd = guestCodec{call: c.guestCall, module: cp.codecModule[p.Codec], schema: p.Codec, region: id}
		}
		var rg regionGuest
		if mod, ok := guestModule(p.Source); ok {
			rg = regionGuest{call: c.guestCall, module: mod, region: id}
		}
		r, err := newRegion(c.keys, p, gens, cd, rg, c.clock, c.m.region(id))
		if err != nil {
			for _, built := range st.regions {
				if prev == nil || prev.regions[built.pol.ID] != built {
					built.close()
				}
			}
			return nil, err
		}
		st.regions[id] = r
	}
	return st, nil
}

func guestModule(source string) (string, bool) {
	const prefix = "guest:"
	if len(source) > len(prefix) && source[:len(prefix)] == prefix {
		return source[len(prefix):], true
	}
	return "", false
}

// guestCall pins module's serving generation for fn.
func (c *Cache) guestCall(ctx context.Context, module string, fn func(plugins.Guest) error) error {
	if c.guests == nil {
		return errors.New("cache: no guests")
	}
	return c.guests.Manager().Use(ctx, module, fn)
}

// CheckSwap refuses a codec or cache-region guest candidate whose
// declarations would not compile with the rest.
func (c *Cache) CheckSwap(ctx context.Context, module string, d *abi.Description) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.compile(ctx, module, d)
	return err
}

// Reload rebuilds the regions from the serving guests after a swap. On
// failure the previous regions keep serving.
func (c *Cache) Reload(ctx context.Context) (err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() {
		result := "ok"
		if err != nil {
			result = "failed"
		}
		c.m.reloads.WithLabelValues(result).Inc()
	}()
	if c.closed.Load() {
		return ErrClosed
	}
	cp, err := c.compile(ctx, "", nil)
	if err != nil {
		return err
	}
	prev := c.state.Load()
	st, err := c.build(cp, prev)
	if err != nil {
		return err
	}
	var replaced []*region
	for id, old := range prev.regions {
		if st.regions[id] != old {
			replaced = append(replaced, old)
		}
	}
	// The replaced runtimes' L1 and single-flight counters carry on in
	// their regions' metrics: a scrape never sees a counter go down.
	c.m.install(func() { c.state.Store(st) }, replaced)
	for id, old := range prev.regions {
		if st.regions[id] != old {
			// Loads still running on the old runtime finish there; only the
			// old L1's memory goes now.
			old.l1.Close()
			continue
		}
		// Same policy, but the swapped module may decode differently under
		// the same declarations: L1 holds decoded values.
		old.l1.Flush()
	}
	c.logClamps(st, prev)
	return nil
}

// logClamps warns once per newly built region whose guest declaration the
// operator's bounds changed.
func (c *Cache) logClamps(st, prev *state) {
	for _, id := range st.set.IDs() {
		r := st.regions[id]
		if len(r.pol.Clamped) == 0 || (prev != nil && prev.regions[id] == r) {
			continue
		}
		c.log.Warn("cache region clamped into the operator's bounds", "region", id, "source", r.pol.Source,
			"fields", r.pol.Clamped, "revision", r.pol.Revision)
	}
}

func boundedID(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
