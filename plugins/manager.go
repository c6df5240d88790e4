package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins/internal/guestio"
)

// Verifier checks a module's bytes before they are compiled (the first
// stage): the host supplies the sha256 pin and signature policy
// (plugins/trust). A Manager without one refuses every module; pass
// AcceptAnyModule to accept modules unchecked.
type Verifier func(name string, wasm []byte) error

// AcceptAnyModule is the Verifier that accepts every module: the explicit
// choice of tests, benchmarks and tools that load bytes they built
// themselves. Nothing else should use it: it skips the digest and
// signature checks.
func AcceptAnyModule(string, []byte) error { return nil }

// CandidateCheck is the capability stage of the pipeline, after
// conformance and before the atomic swap (and again before a rollback):
// the consumers of the candidate's kinds judge its declarations (the
// rate-limit capability compiles its policies with the configured ones).
// candidate is loaded and verified; an error refuses it and the serving
// generation keeps serving.
type CandidateCheck func(ctx context.Context, module string, candidate Guest) error

// SwapObserver receives hot-swap metrics. Labels are operator-chosen module
// names and closed-set classes only.
type SwapObserver interface {
	// Swapped reports one Load, Swap or Rollback attempt; class is "" when
	// ok, else a failure class (a plugins.Class or one of the Stage values).
	Swapped(module string, generation uint64, ok bool, class string)
	// ActiveGeneration reports the generation now serving a module (0 after Close).
	ActiveGeneration(module string, generation uint64)
}

// ManagerOptions configures a Manager. The zero value is safe: it refuses
// every module (no Verifier) and runs every check.
type ManagerOptions struct {
	// Verify checks digest and signature. nil refuses every module with
	// ErrNoVerifier; AcceptAnyModule accepts them unchecked.
	Verify Verifier
	// Extism loads Extism-flavour modules (plugins/extism's *Engine);
	// nil leaves them to the native engine, which refuses their imports.
	Extism Loader
	// Check is the capability stage; nil accepts every candidate there.
	Check CandidateCheck
	// Logger receives swap log lines; nil uses slog.Default().
	Logger *slog.Logger
	// Observer receives swap metrics; nil discards them.
	Observer SwapObserver
	// SkipSelfTest skips the module's bundled self-test vectors and the
	// host conformance suite, which otherwise run before a generation
	// may serve. Only for throwaway managers that test modules some other
	// way (benchmarks of the bare load path); never in production.
	SkipSelfTest bool
}

// Stage names the step of the swap pipeline that rejected a candidate; it is
// also the observer class for non-engine failures.
type Stage string

// Pipeline stages, in order (watch is a file-watch read failure).
const (
	StageVerify      Stage = "verify"
	StageLoad        Stage = "load"
	StageDuplicateID Stage = "duplicate-id"
	StageSelfTest    Stage = "self-test"
	StageConformance Stage = "conformance"
	StageCapability  Stage = "capability"
	StageWatch       Stage = "watch"
)

// Errors returned by the Manager; match with errors.Is.
var (
	// ErrUnknownModule: no module with that name is loaded.
	ErrUnknownModule = errors.New("plugins: unknown module")
	// ErrModuleExists: Load of a name that is already loaded (use Swap).
	ErrModuleExists = errors.New("plugins: module already loaded")
	// ErrManagerClosed: the manager was closed.
	ErrManagerClosed = errors.New("plugins: manager closed")
	// ErrNoVerifier: the Manager has no Verifier (see ManagerOptions.Verify).
	ErrNoVerifier = errors.New("plugins: no verifier configured: every module is refused")
	// ErrDuplicateID: a declared id is already declared by another module.
	ErrDuplicateID = errors.New("plugins: duplicate declared id")
	// ErrSelfTest: a bundled self-test vector failed.
	ErrSelfTest = errors.New("plugins: self-test failed")
	// ErrConformance: the host conformance suite failed.
	ErrConformance = errors.New("plugins: conformance failed")
	// ErrNoPrevious: Rollback of a module that keeps no previous verified
	// generation (it was loaded and never swapped).
	ErrNoPrevious = errors.New("plugins: no previous generation to roll back to")
)

// SwapError is returned when a candidate is rejected; the previous
// generation (if any) keeps serving. errors.Is matches the cause (a Class,
// ErrDuplicateID, ...).
type SwapError struct {
	Module string
	Stage  Stage
	Err    error
}

// Error implements error.
func (e *SwapError) Error() string {
	return fmt.Sprintf("plugins: module %s rejected at %s: %v", e.Module, e.Stage, e.Err)
}

// Unwrap returns the cause.
func (e *SwapError) Unwrap() error { return e.Err }

// class is the observer label: the guest failure class when there is one.
func (e *SwapError) class() string {
	var ge *GuestError
	if errors.As(e.Err, &ge) {
		return string(ge.Class)
	}
	return string(e.Stage)
}

// SwapResult describes a successful Load, Swap or Rollback.
type SwapResult struct {
	Module   string
	From, To uint64
	SHA256   string
	Flavour  Flavour
	// Restored is, for a Rollback, the generation whose module serves
	// again as generation To; 0 otherwise.
	Restored uint64
	Duration time.Duration
}

// SwapStatus is the outcome of the last Load, Swap, Rollback or watched change.
type SwapStatus struct {
	At time.Time
	OK bool
	// Error is bounded, sanitised text; "" when OK.
	Error string
	// Generation is the generation installed (OK) or still serving (failure).
	Generation uint64
}

// ModuleStatus describes one managed module.
type ModuleStatus struct {
	Name       string
	Generation uint64
	SHA256     string
	Flavour    Flavour
	Kinds      []abi.Kind
	// Declared lists "kind:id" for every declaration, sorted.
	Declared []string
	// Previous is the generation a Rollback would restore (0: none), and
	// PreviousSHA256 its module's digest.
	Previous       uint64
	PreviousSHA256 string
	LastSwap       SwapStatus
}

// maxStatusError bounds error text kept in Status.
const maxStatusError = 512

// Manager serves named modules of either flavour, each through a current
// generation that can be replaced atomically while calls are in flight,
// and keeps each module's previous verified generation for Rollback. It is
// safe for concurrent use.
//
// Every candidate goes through the same stages whatever its flavour:
// verify (digest and signature) → load (flavour detection, compile, vet
// imports, describe) → duplicate ids across modules → self-test vectors →
// conformance → capability check → atomic swap.
type Manager struct {
	eng  *Engine
	opts ManagerOptions
	log  *slog.Logger

	mu     sync.Mutex
	closed atomic.Bool // set under mu; read without it by slot
	slots  map[string]*slot
	// view is a read-only copy of slots, republished under mu whenever
	// slots changes, so that Use finds a slot without taking mu (every
	// guest call does).
	view     atomic.Pointer[map[string]*slot]
	draining sync.WaitGroup // held modules not yet closed
	live     map[*held]struct{}
	watchers sync.WaitGroup
	stop     context.CancelFunc
	stopCtx  context.Context
}

type slot struct {
	name string
	lim  Limits
	cur  atomic.Pointer[generation]
	// prev is the generation a Rollback restores; it holds a reference on
	// its module. Set under swapMu.
	prev atomic.Pointer[kept]
	// swapMu serialises the pipeline per name so generation numbers are
	// monotonic and a later swap never installs under an earlier one.
	swapMu sync.Mutex
	next   uint64 // last generation number handed out; under swapMu
	last   atomic.Pointer[SwapStatus]
}

// kept is a swapped-out generation kept for rollback.
type kept struct {
	n uint64
	h *held
}

// held is one loaded, verified module. It serves as one generation, and
// again as a later one after a rollback; it closes when no generation
// uses it and it is no longer kept for rollback.
type held struct {
	mod LoadedGuest
	// guest is mod as the Guest Use hands to fn, converted once here
	// rather than (an itab lookup) at every call.
	guest Guest
	sha   string
	decl  []string
	// refs counts undrained generations serving mod plus one while it is
	// kept for rollback. It only rises from a reference someone holds.
	refs atomic.Int64
	done func(*held)
}

func (h *held) unref() {
	if h.refs.Add(-1) == 0 {
		// No generation pins it and nobody keeps it: the pool is idle.
		_ = h.mod.Close(context.Background())
		h.done(h)
	}
}

type generation struct {
	n uint64
	h *held
	// refs counts the slot's own reference plus every pinned call; the
	// generation drains when it reaches zero, which can only happen after
	// the slot dropped its reference (swap or Close).
	refs atomic.Int64
}

// acquire pins g unless it has already drained.
func (g *generation) acquire() bool {
	for {
		r := g.refs.Load()
		if r <= 0 {
			return false
		}
		if g.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

func (g *generation) release() {
	if g.refs.Add(-1) == 0 {
		if g.h.refs.Load() > 1 {
			// Kept for rollback (or serving again): drop the idle
			// instances; the compiled code is what is kept.
			g.h.mod.Trim()
		}
		g.h.unref()
	}
}

// NewManager creates a manager on e, the native engine; Extism modules
// load through opts.Extism. The engines stay owned by the caller.
func NewManager(e *Engine, opts ManagerOptions) *Manager {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{eng: e, opts: opts, log: log, slots: map[string]*slot{}, live: map[*held]struct{}{}, stop: cancel, stopCtx: ctx}
}

// Load installs the first generation (1) of a module, through the same
// pipeline as Swap.
func (m *Manager) Load(ctx context.Context, name string, wasm []byte, lim Limits) error {
	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		return ErrManagerClosed
	}
	if _, ok := m.slots[name]; ok {
		m.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrModuleExists, name)
	}
	// The slot is reserved before the pipeline runs so a concurrent Load of
	// the same name fails fast; Use refuses it until a generation exists.
	s := &slot{name: name, lim: lim}
	m.slots[name] = s
	m.publishLocked()
	m.mu.Unlock()
	_, err := m.swap(ctx, s, wasm)
	if err != nil {
		m.mu.Lock()
		delete(m.slots, name)
		m.publishLocked()
		m.mu.Unlock()
	}
	return err
}

// publishLocked republishes view after a change to slots; m.mu is held.
func (m *Manager) publishLocked() {
	v := maps.Clone(m.slots)
	m.view.Store(&v)
}

// Swap replaces a loaded module, of either flavour, by wasm, of either
// flavour, through every stage of the pipeline (see Manager). Calls in
// flight finish on the old generation, which is kept for Rollback (the
// one kept before it closes once its calls return). On any error the old
// generation keeps serving and the error is recorded in Status and
// reported to the observer.
func (m *Manager) Swap(ctx context.Context, name string, wasm []byte) (SwapResult, error) {
	s, err := m.slot(name)
	if err != nil {
		return SwapResult{}, err
	}
	return m.swap(ctx, s, wasm)
}

func (m *Manager) slot(name string) (*slot, error) {
	if m.closed.Load() {
		return nil, ErrManagerClosed
	}
	if v := m.view.Load(); v != nil {
		if s, ok := (*v)[name]; ok {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrUnknownModule, name)
}

func (s *slot) serving() uint64 {
	if g := s.cur.Load(); g != nil {
		return g.n
	}
	return 0
}

// reject records and reports a refused candidate (or rollback).
func (m *Manager) reject(s *slot, sha string, stage Stage, err error) (SwapResult, error) {
	from := s.serving()
	se := &SwapError{Module: s.name, Stage: stage, Err: err}
	s.last.Store(&SwapStatus{At: time.Now(), Error: guestio.Sanitize([]byte(se.Error()), maxStatusError), Generation: from})
	if m.opts.Observer != nil {
		m.opts.Observer.Swapped(s.name, from, false, se.class())
	}
	m.log.Warn("guest swap rejected", "module", s.name, "stage", string(stage), "serving_generation", from,
		"sha256", sha, "error", guestio.Sanitize([]byte(err.Error()), maxStatusError))
	return SwapResult{}, se
}

// loaderFor picks the engine of wasm's flavour.
func (m *Manager) loaderFor(wasm []byte) Loader {
	if m.opts.Extism != nil && DetectFlavour(wasm) == FlavourExtism {
		return m.opts.Extism
	}
	return m.eng
}

func (m *Manager) swap(ctx context.Context, s *slot, wasm []byte) (SwapResult, error) {
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	start := time.Now()
	sum := sha256.Sum256(wasm)
	sha := hex.EncodeToString(sum[:])
	verify := m.opts.Verify
	if verify == nil {
		return m.reject(s, sha, StageVerify, ErrNoVerifier)
	}
	if err := verify(s.name, wasm); err != nil {
		return m.reject(s, sha, StageVerify, err)
	}
	mod, err := m.loaderFor(wasm).LoadGuest(ctx, s.name, wasm, s.lim)
	if err != nil {
		return m.reject(s, sha, StageLoad, err)
	}
	installed := false
	defer func() {
		if !installed {
			_ = mod.Close(context.WithoutCancel(ctx))
		}
	}()
	decl := declaredIDs(mod.Description())
	if err := m.checkDuplicates(s.name, decl); err != nil {
		return m.reject(s, sha, StageDuplicateID, err)
	}
	if !m.opts.SkipSelfTest {
		mod.Verifying(true)
		rep := SelfTest(ctx, mod, wasm)
		var conf ConformanceReport
		if rep.OK() {
			// The section was readable (SelfTest passed), so vectors is nil or valid.
			vectors, _ := abi.ReadSelfTestSection(wasm)
			conf = CheckConformance(ctx, mod, vectors)
		}
		mod.Verifying(false)
		if !rep.OK() {
			return m.reject(s, sha, StageSelfTest, fmt.Errorf("%w: %s", ErrSelfTest, rep.Summary()))
		}
		if !conf.OK() {
			return m.reject(s, sha, StageConformance, fmt.Errorf("%w: %s", ErrConformance, conf.Summary()))
		}
	}
	if err := m.checkCandidate(ctx, s.name, mod); err != nil {
		return m.reject(s, sha, StageCapability, err)
	}
	h := &held{mod: mod, guest: mod, sha: sha, decl: decl, done: m.drained}
	res, err := m.install(s, h, sha, start)
	if err != nil {
		return res, err
	}
	installed = true
	m.log.Info("guest generation installed", "module", s.name, "from", res.From, "to", res.To, "sha256", sha,
		"flavour", string(res.Flavour), "duration", res.Duration)
	return res, nil
}

func (m *Manager) checkCandidate(ctx context.Context, name string, g Guest) error {
	if m.opts.Check == nil {
		return nil
	}
	return m.opts.Check(ctx, name, g)
}

// install makes h the serving generation of s (swapMu held): a fresh
// module (refs 0) or the kept one of a rollback. The generation it
// replaces is kept for rollback, and the one kept before is let go.
func (m *Manager) install(s *slot, h *held, sha string, start time.Time) (SwapResult, error) {
	from := s.serving()
	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		return m.reject(s, sha, StageLoad, ErrManagerClosed)
	}
	// Re-check under the lock: another module may have claimed an id while
	// this candidate was being tested.
	if err := m.checkDuplicatesLocked(s.name, h.decl); err != nil {
		m.mu.Unlock()
		return m.reject(s, sha, StageDuplicateID, err)
	}
	if _, ok := m.live[h]; !ok {
		m.draining.Add(1)
		m.live[h] = struct{}{}
	}
	s.next++
	g := &generation{n: s.next, h: h}
	g.refs.Store(1)
	h.refs.Add(1) // the generation's reference
	old := s.cur.Swap(g)
	var dropped *kept
	if old != nil {
		old.h.refs.Add(1) // kept for rollback
		dropped = s.prev.Swap(&kept{n: old.n, h: old.h})
	}
	m.mu.Unlock()
	if old != nil {
		old.release()
	}
	if dropped != nil {
		dropped.h.unref()
	}
	res := SwapResult{Module: s.name, From: from, To: g.n, SHA256: sha, Flavour: h.mod.Flavour(), Duration: time.Since(start)}
	s.last.Store(&SwapStatus{At: time.Now(), OK: true, Generation: g.n})
	if m.opts.Observer != nil {
		m.opts.Observer.Swapped(s.name, g.n, true, "")
		m.opts.Observer.ActiveGeneration(s.name, g.n)
	}
	return res, nil
}

// Rollback makes the module's previous verified generation serve again
// (DESIGN §7) without an upload: the module it kept is checked against the
// other modules' ids and by the capability stage again (the policy set may
// have moved on since it served), then installed as a new generation, and
// the generation it replaces becomes the one kept (so a second Rollback
// undoes the first). Its self-test and conformance are not run again: the
// same loaded code passed them. On any failure the current generation
// keeps serving and the kept one stays kept. ErrNoPrevious when nothing is
// kept (a module loaded and never swapped).
func (m *Manager) Rollback(ctx context.Context, name string) (SwapResult, error) {
	s, err := m.slot(name)
	if err != nil {
		return SwapResult{}, err
	}
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	start := time.Now()
	k := s.prev.Load()
	if k == nil {
		return SwapResult{}, fmt.Errorf("%w: %s", ErrNoPrevious, name)
	}
	if err := m.checkDuplicates(s.name, k.h.decl); err != nil {
		return m.reject(s, k.h.sha, StageDuplicateID, err)
	}
	if err := m.checkCandidate(ctx, s.name, k.h.mod); err != nil {
		return m.reject(s, k.h.sha, StageCapability, err)
	}
	res, err := m.install(s, k.h, k.h.sha, start)
	if err != nil {
		return res, err
	}
	res.Restored = k.n
	m.log.Info("guest generation rolled back", "module", s.name, "from", res.From, "to", res.To,
		"restored_generation", k.n, "sha256", res.SHA256, "flavour", string(res.Flavour))
	return res, nil
}

// declaredIDs lists kind:id for every declaration of d, sorted.
func declaredIDs(d *abi.Description) []string {
	var ids []string
	for _, c := range d.Codecs {
		ids = append(ids, string(abi.KindCodec)+":"+c.SchemaID)
	}
	for _, r := range d.Regions {
		ids = append(ids, string(abi.KindCacheRegion)+":"+r.ID)
	}
	for _, p := range d.RatePolicies {
		ids = append(ids, string(abi.KindRatePolicy)+":"+p.ID)
	}
	for _, t := range d.Templates {
		ids = append(ids, string(abi.KindRenderer)+":"+t.ID)
	}
	sort.Strings(ids)
	return ids
}

func (m *Manager) checkDuplicates(name string, decl []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.checkDuplicatesLocked(name, decl)
}

// checkDuplicatesLocked reports every id of decl that another module's
// serving generation declares. A module may keep its own ids across a swap.
func (m *Manager) checkDuplicatesLocked(name string, decl []string) error {
	var errs []error
	others := make([]string, 0, len(m.slots))
	for n := range m.slots {
		others = append(others, n)
	}
	sort.Strings(others)
	for _, other := range others {
		if other == name {
			continue
		}
		g := m.slots[other].cur.Load()
		if g == nil {
			continue
		}
		for _, id := range decl {
			if _, found := slices.BinarySearch(g.h.decl, id); found {
				errs = append(errs, fmt.Errorf("%w: %s declared by modules %s and %s", ErrDuplicateID, id, other, name))
			}
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) drained(h *held) {
	m.mu.Lock()
	delete(m.live, h)
	m.mu.Unlock()
	m.draining.Done()
}

// Use pins the current generation of a module for the duration of fn, so a
// concurrent swap never closes the module fn is calling. fn receives the
// module of whichever flavour serves; the typed calls (RateSelect, ...)
// take it as it is.
func (m *Manager) Use(ctx context.Context, name string, fn func(Guest) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s, err := m.slot(name)
	if err != nil {
		return err
	}
	g := s.pin()
	if g == nil {
		// Still loading, or closed between the lookup and now.
		return fmt.Errorf("%w: %s", ErrUnknownModule, name)
	}
	// Deferred here, not in pin's loop: a defer in a loop is allocated
	// on the heap at every call.
	defer g.release()
	return fn(g.h.guest)
}

// pin acquires the serving generation, or returns nil if none serves.
func (s *slot) pin() *generation {
	for {
		g := s.cur.Load()
		if g == nil {
			return nil
		}
		// acquire fails only if g drained after being swapped out; the
		// slot then already points at its successor.
		if g.acquire() {
			return g
		}
	}
}

// Status describes every module, sorted by name.
func (m *Manager) Status() []ModuleStatus {
	m.mu.Lock()
	slots := make([]*slot, 0, len(m.slots))
	for _, s := range m.slots {
		slots = append(slots, s)
	}
	m.mu.Unlock()
	out := make([]ModuleStatus, 0, len(slots))
	for _, s := range slots {
		st := ModuleStatus{Name: s.name}
		if g := s.cur.Load(); g != nil {
			st.Generation = g.n
			st.SHA256 = g.h.sha
			st.Flavour = g.h.mod.Flavour()
			st.Kinds = slices.Clone(g.h.mod.Description().Kinds)
			st.Declared = slices.Clone(g.h.decl)
		}
		if k := s.prev.Load(); k != nil {
			st.Previous, st.PreviousSHA256 = k.n, k.h.sha
		}
		if l := s.last.Load(); l != nil {
			st.LastSwap = *l
		}
		if st.Generation == 0 && st.LastSwap.At.IsZero() {
			continue // reserved by a Load still in progress
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Close stops watchers, then drops every current and kept generation; each
// module closes as soon as its last call returns. If ctx ends first, the
// remaining modules are closed at once, interrupting their calls with
// ClassClosed.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		return nil
	}
	m.closed.Store(true)
	m.stop()
	var gens []*generation
	var keptOnes []*kept
	for _, s := range m.slots {
		if g := s.cur.Swap(nil); g != nil {
			gens = append(gens, g)
			if m.opts.Observer != nil {
				m.opts.Observer.ActiveGeneration(s.name, 0)
			}
		}
		if k := s.prev.Swap(nil); k != nil {
			keptOnes = append(keptOnes, k)
		}
	}
	m.mu.Unlock()
	m.watchers.Wait()
	for _, g := range gens {
		g.release()
	}
	for _, k := range keptOnes {
		k.h.unref()
	}
	drained := make(chan struct{})
	go func() {
		m.draining.Wait()
		close(drained)
	}()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		hs := make([]*held, 0, len(m.live))
		for h := range m.live {
			hs = append(hs, h)
		}
		m.mu.Unlock()
		var errs []error
		for _, h := range hs {
			errs = append(errs, h.mod.Close(context.WithoutCancel(ctx)))
		}
		<-drained // pinned calls return promptly once their module is closed
		return errors.Join(append(errs, ctx.Err())...)
	}
}
