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

// Verifier checks a module's bytes before they are compiled: the host
// supplies the sha256 pin and signature policy (plugins/trust). A nil
// Verifier accepts everything.
type Verifier func(name string, wasm []byte) error

// SwapObserver receives hot-swap metrics. Labels are operator-chosen module
// names and closed-set classes only.
type SwapObserver interface {
	// Swapped reports one Load or Swap attempt; class is "" when ok, else a
	// failure class (a plugins.Class or one of the Stage values).
	Swapped(module string, generation uint64, ok bool, class string)
	// ActiveGeneration reports the generation now serving a module (0 after Close).
	ActiveGeneration(module string, generation uint64)
}

// ManagerOptions configures a Manager.
type ManagerOptions struct {
	// Verify checks digest and signature; nil accepts every module.
	Verify Verifier
	// Logger receives swap log lines; nil uses slog.Default().
	Logger *slog.Logger
	// Observer receives swap metrics; nil discards them.
	Observer SwapObserver
	// SelfTest runs the module's bundled self-test vectors and the host
	// conformance suite before a generation may serve. Production
	// configurations set it (see DefaultManagerOptions); false is for
	// throwaway engines that test modules some other way.
	SelfTest bool
}

// DefaultManagerOptions returns options with SelfTest enabled.
func DefaultManagerOptions() ManagerOptions { return ManagerOptions{SelfTest: true} }

// Stage names the step of the swap pipeline that rejected a candidate; it is
// also the observer class for non-engine failures.
type Stage string

// Pipeline stages.
const (
	StageVerify      Stage = "verify"
	StageLoad        Stage = "load"
	StageDuplicateID Stage = "duplicate-id"
	StageSelfTest    Stage = "self-test"
	StageConformance Stage = "conformance"
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
	// ErrDuplicateID: a declared id is already declared by another module.
	ErrDuplicateID = errors.New("plugins: duplicate declared id")
	// ErrSelfTest: a bundled self-test vector failed.
	ErrSelfTest = errors.New("plugins: self-test failed")
	// ErrConformance: the host conformance suite failed.
	ErrConformance = errors.New("plugins: conformance failed")
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

// SwapResult describes a successful Load or Swap.
type SwapResult struct {
	Module   string
	From, To uint64
	SHA256   string
	Duration time.Duration
}

// SwapStatus is the outcome of the last Load, Swap or watched change.
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
	Kinds      []abi.Kind
	// Declared lists "kind:id" for every declaration, sorted.
	Declared []string
	LastSwap SwapStatus
}

// maxStatusError bounds error text kept in Status.
const maxStatusError = 512

// Manager serves named modules, each through a current generation that can be
// replaced atomically while calls are in flight. It is safe for concurrent use.
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
	draining sync.WaitGroup // generations not yet closed
	live     map[*generation]struct{}
	watchers sync.WaitGroup
	stop     context.CancelFunc
	stopCtx  context.Context
}

type slot struct {
	name string
	lim  Limits
	cur  atomic.Pointer[generation]
	// swapMu serialises the pipeline per name so generation numbers are
	// monotonic and a later swap never installs under an earlier one.
	swapMu sync.Mutex
	next   uint64 // last generation number handed out; under swapMu
	last   atomic.Pointer[SwapStatus]
}

type generation struct {
	n    uint64
	mod  *Module
	sha  string
	decl []string
	// refs counts the slot's own reference plus every pinned call; the
	// generation closes when it reaches zero, which can only happen after
	// the slot dropped its reference (swap or Close).
	refs atomic.Int64
	done func(*generation)
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
		// The pool is idle by construction: nobody holds a pin.
		_ = g.mod.Close(context.Background())
		g.done(g)
	}
}

// NewManager creates a manager on e. The engine stays owned by the caller.
func NewManager(e *Engine, opts ManagerOptions) *Manager {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{eng: e, opts: opts, log: log, slots: map[string]*slot{}, live: map[*generation]struct{}{}, stop: cancel, stopCtx: ctx}
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

// Swap replaces a loaded module: verify → compile and validate describe →
// duplicate-id check → self-test and conformance → atomic swap. Calls in
// flight finish on the old generation, which closes when the last one
// returns. On any error the old generation keeps serving and the error is
// recorded in Status and reported to the observer.
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

func (m *Manager) swap(ctx context.Context, s *slot, wasm []byte) (SwapResult, error) {
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	start := time.Now()
	sum := sha256.Sum256(wasm)
	sha := hex.EncodeToString(sum[:])
	var from uint64
	if g := s.cur.Load(); g != nil {
		from = g.n
	}
	reject := func(stage Stage, err error) (SwapResult, error) {
		se := &SwapError{Module: s.name, Stage: stage, Err: err}
		s.last.Store(&SwapStatus{At: time.Now(), Error: guestio.Sanitize([]byte(se.Error()), maxStatusError), Generation: from})
		if m.opts.Observer != nil {
			m.opts.Observer.Swapped(s.name, from, false, se.class())
		}
		m.log.Warn("guest swap rejected", "module", s.name, "stage", string(stage), "serving_generation", from,
			"sha256", sha, "error", guestio.Sanitize([]byte(err.Error()), maxStatusError))
		return SwapResult{}, se
	}
	if m.opts.Verify != nil {
		if err := m.opts.Verify(s.name, wasm); err != nil {
			return reject(StageVerify, err)
		}
	}
	mod, err := m.eng.Load(ctx, s.name, wasm, s.lim)
	if err != nil {
		return reject(StageLoad, err)
	}
	installed := false
	defer func() {
		if !installed {
			_ = mod.Close(context.WithoutCancel(ctx))
		}
	}()
	decl := declaredIDs(mod.Description())
	if err := m.checkDuplicates(s.name, decl); err != nil {
		return reject(StageDuplicateID, err)
	}
	if m.opts.SelfTest {
		mod.verifying.Store(true)
		rep := SelfTest(ctx, mod, wasm)
		var conf ConformanceReport
		if rep.OK() {
			// The section was readable (SelfTest passed), so vectors is nil or valid.
			vectors, _ := abi.ReadSelfTestSection(wasm)
			conf = CheckConformance(ctx, mod, vectors)
		}
		mod.verifying.Store(false)
		if !rep.OK() {
			return reject(StageSelfTest, fmt.Errorf("%w: %s", ErrSelfTest, rep.Summary()))
		}
		if !conf.OK() {
			return reject(StageConformance, fmt.Errorf("%w: %s", ErrConformance, conf.Summary()))
		}
	}

	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		return reject(StageLoad, ErrManagerClosed)
	}
	// Re-check under the lock: another module may have claimed an id while
	// this candidate was being tested.
	if err := m.checkDuplicatesLocked(s.name, decl); err != nil {
		m.mu.Unlock()
		return reject(StageDuplicateID, err)
	}
	s.next++
	g := &generation{n: s.next, mod: mod, sha: sha, decl: decl, done: m.drained}
	g.refs.Store(1)
	m.draining.Add(1)
	m.live[g] = struct{}{}
	old := s.cur.Swap(g)
	installed = true
	m.mu.Unlock()
	if old != nil {
		old.release()
	}
	res := SwapResult{Module: s.name, From: from, To: g.n, SHA256: sha, Duration: time.Since(start)}
	s.last.Store(&SwapStatus{At: time.Now(), OK: true, Generation: g.n})
	if m.opts.Observer != nil {
		m.opts.Observer.Swapped(s.name, g.n, true, "")
		m.opts.Observer.ActiveGeneration(s.name, g.n)
	}
	m.log.Info("guest generation installed", "module", s.name, "from", from, "to", g.n, "sha256", sha, "duration", res.Duration)
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
			if _, found := slices.BinarySearch(g.decl, id); found {
				errs = append(errs, fmt.Errorf("%w: %s declared by modules %s and %s", ErrDuplicateID, id, other, name))
			}
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) drained(g *generation) {
	m.mu.Lock()
	delete(m.live, g)
	m.mu.Unlock()
	m.draining.Done()
}

// Use pins the current generation of a module for the duration of fn, so a
// concurrent swap never closes the module fn is calling.
func (m *Manager) Use(ctx context.Context, name string, fn func(*Module) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s, err := m.slot(name)
	if err != nil {
		return err
	}
	for {
		g := s.cur.Load()
		if g == nil {
			// Still loading, or closed between the lookup and now.
			return fmt.Errorf("%w: %s", ErrUnknownModule, name)
		}
		// acquire fails only if g drained after being swapped out; the
		// slot then already points at its successor.
		if g.acquire() {
			defer g.release()
			return fn(g.mod)
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
			st.SHA256 = g.sha
			st.Kinds = slices.Clone(g.mod.Description().Kinds)
			st.Declared = slices.Clone(g.decl)
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

// Close stops watchers, then drops every current generation; each closes as
// soon as its last call returns. If ctx ends first, the remaining modules are
// closed at once, interrupting their calls with ClassClosed.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		return nil
	}
	m.closed.Store(true)
	m.stop()
	var gens []*generation
	for _, s := range m.slots {
		if g := s.cur.Swap(nil); g != nil {
			gens = append(gens, g)
			if m.opts.Observer != nil {
				m.opts.Observer.ActiveGeneration(s.name, 0)
			}
		}
	}
	m.mu.Unlock()
	m.watchers.Wait()
	for _, g := range gens {
		g.release()
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
		gens = gens[:0]
		for g := range m.live {
			gens = append(gens, g)
		}
		m.mu.Unlock()
		var errs []error
		for _, g := range gens {
			errs = append(errs, g.mod.Close(context.WithoutCancel(ctx)))
		}
		<-drained // pinned calls return promptly once their module is closed
		return errors.Join(append(errs, ctx.Err())...)
	}
}
