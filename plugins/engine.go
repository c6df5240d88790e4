package plugins

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/caphost/caphost/third_party/wazero"
	"github.com/caphost/caphost/third_party/wazero/api"
	"github.com/caphost/caphost/third_party/wazero/imports/wasi_snapshot_preview1"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins/internal/guestio"
	"github.com/caphost/caphost/plugins/internal/wasipolicy"
)

// EngineVersion is the version of the WebAssembly engine every Engine runs
// guests on: the wazero release under third_party/wazero with the suffix of
// caphost's patches (for example v1.12.0-caphost.2), which need not be what
// a program that embeds caphost requires of upstream wazero. It also names
// the on-disk compilation cache (Config.CacheDir), so code compiled by
// another engine is never read.
const EngineVersion = wazero.Version

// Config configures an Engine.
type Config struct {
	// CacheDir holds compiled code across processes; "" keeps it in memory.
	CacheDir string
	// Defaults fill zero Limits fields at Load; zero fields here use DefaultLimits.
	Defaults Limits
	// Caps are the hard ceilings; zero fields here use HardCaps.
	Caps Limits
	// CountEvents allowlists the event names guests may count.
	CountEvents []string
	// MaxModuleBytes caps a module binary; 0 means 64 MiB.
	MaxModuleBytes int
	// LogLinesPerSecond rate-limits guest log lines per module; 0 means 20.
	LogLinesPerSecond int
	// Observer receives metrics; nil discards them.
	Observer Observer
	// Logger receives guest log lines and engine events; nil uses slog.Default().
	Logger *slog.Logger
}

// ErrEngineClosed is returned by Load after Close.
var ErrEngineClosed = errors.New("plugins: engine closed")

// Engine compiles and runs guest modules. It is safe for concurrent use.
type Engine struct {
	cache    wazero.CompilationCache
	defaults Limits
	caps     Limits
	events   map[string]string
	maxBytes int
	logRate  int64
	obs      Observer
	// timed is false when obs is the NopObserver: nobody reads a call's
	// Duration, so end skips its clock read (~100ns on some VMs).
	timed bool
	log   *slog.Logger
	// bufs recycles request encoding buffers; a request is copied into guest
	// memory before its buffer goes back.
	bufs sync.Pool

	// wd enforces call deadlines and caller cancellation (see watchdog.go).
	wd *watchdog

	mu      sync.Mutex
	closed  bool
	modules map[*Module]struct{}
}

// NewEngine creates an engine with a shared compilation cache.
func NewEngine(cfg Config) (*Engine, error) {
	e := &Engine{
		defaults: cfg.Defaults.withDefaults(DefaultLimits()),
		caps:     cfg.Caps.withDefaults(HardCaps()),
		events:   make(map[string]string, len(cfg.CountEvents)),
		maxBytes: cfg.MaxModuleBytes,
		logRate:  int64(cfg.LogLinesPerSecond),
		obs:      cfg.Observer,
		log:      cfg.Logger,
		modules:  map[*Module]struct{}{},
	}
	if err := e.defaults.check(e.caps); err != nil {
		return nil, fmt.Errorf("plugins: default limits: %w", err)
	}
	for _, ev := range cfg.CountEvents {
		if ev == "" || len(ev) > abi.MaxNameBytes {
			return nil, fmt.Errorf("plugins: count event %q: empty or longer than %d bytes", ev, abi.MaxNameBytes)
		}
		e.events[ev] = ev
	}
	if e.maxBytes <= 0 {
		e.maxBytes = 64 << 20
	}
	if e.logRate <= 0 {
		e.logRate = 20
	}
	if e.obs == nil {
		e.obs = NopObserver{}
	}
	_, nop := e.obs.(NopObserver)
	e.timed = !nop
	if e.log == nil {
		e.log = slog.Default()
	}
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("plugins: compilation cache %s: %w", cfg.CacheDir, err)
		}
		e.cache = c
	} else {
		e.cache = wazero.NewCompilationCache()
	}
	e.wd = newWatchdog()
	return e, nil
}

// Close closes every loaded module, the compilation cache and the watchdog.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	mods := make([]*Module, 0, len(e.modules))
	for m := range e.modules {
		mods = append(mods, m)
	}
	e.mu.Unlock()
	var errs []error
	for _, m := range mods {
		errs = append(errs, m.Close(ctx))
	}
	errs = append(errs, e.cache.Close(ctx))
	e.wd.close()
	return errors.Join(errs...)
}

// Load compiles, vets and starts a module: imports are checked against the
// allowlist, the ABI major is negotiated, describe is validated, and one
// instance is created and kept warm. Every failure is a *GuestError.
func (e *Engine) Load(ctx context.Context, name string, wasm []byte, lim Limits) (*Module, error) {
	fail := func(c Class, detail string, cause error) (*Module, error) {
		return nil, &GuestError{Module: guestio.Sanitize([]byte(name), 64), Class: c, Detail: detail, Err: cause}
	}
	if !abi.ValidID(name) {
		return fail(ClassInvalidModule, "module name must match [a-z0-9][a-z0-9._-]*, at most 64 bytes", nil)
	}
	if len(wasm) > e.maxBytes {
		return fail(ClassInvalidModule, fmt.Sprintf("module is %d bytes, cap %d", len(wasm), e.maxBytes), nil)
	}
	lim = lim.withDefaults(e.defaults)
	if err := lim.check(e.caps); err != nil {
		return nil, fmt.Errorf("plugins: module %s: %w", name, err)
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, ErrEngineClosed
	}

	// Close-on-context-done compiles the termination check into every loop
	// header; the watchdog relies on it. The replaced wazero makes it an
	// inline test (third_party/wazero/CAPHOST.md).
	// The call stack limit (a patch of the same wazero) bounds what one
	// call can make the host allocate besides linear memory.
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithCompilationCache(e.cache).
		WithMemoryLimitPages(lim.MemoryPages).
		WithCallStackLimitBytes(uint32(lim.MaxStackBytes)).
		WithCloseOnContextDone(true))
	ok := false
	defer func() {
		if !ok {
			_ = rt.Close(context.WithoutCancel(ctx))
		}
	}()
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		// wazero checks the declared minimum memory against the limit while
		// compiling; its message is the only signal, so match it.
		if strings.Contains(err.Error(), "over limit of") {
			return fail(ClassMemory, "module declares more memory than its limit", err)
		}
		return fail(ClassInvalidModule, "compile", err)
	}
	// From here on, closing the runtime (a refused candidate, or
	// Module.Close) also releases the machine code.
	rt = &runtimeWithCode{Runtime: rt, code: compiled}
	if bad := forbiddenImports(compiled, lim.Grants); len(bad) > 0 {
		return fail(ClassForbiddenImport, strings.Join(bad, ", "), nil)
	}
	if c, detail := checkShape(compiled, lim); c != "" {
		return fail(c, detail, nil)
	}

	m := &Module{
		name: name, eng: e, lim: lim, rt: rt, compiled: compiled,
		tokens: make(chan struct{}, lim.PoolSize),
		idle:   make(chan *instance, lim.PoolSize),
		done:   make(chan struct{}),
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return fail(ClassInvalidModule, "wasi", err)
	}
	if err := m.instantiateHost(ctx); err != nil {
		return fail(ClassInvalidModule, "host module", err)
	}
	// No FS, env, args or sockets, and for every kind virtual clocks and
	// deterministic entropy, never the host's (plugins/internal/wasipolicy):
	// a guest that needs "now" gets it from the host in the request.
	m.modCfg = wasipolicy.NewModuleConfig().WithStartFunctions()

	// Registered before start so the watchdog bounds describe too.
	e.wd.noteCallTimeout(lim.CallTimeout)
	e.wd.mods.Store(m, struct{}{})
	if err := m.start(ctx); err != nil {
		e.wd.mods.Delete(m)
		return nil, err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.wd.mods.Delete(m)
		return nil, ErrEngineClosed
	}
	e.modules[m] = struct{}{}
	e.mu.Unlock()
	ok = true
	return m, nil
}

// runtimeWithCode is a module's runtime that also releases the module's
// compiled code when it is closed. Runtimes share the engine's compilation
// cache, whose compiler keeps a module's machine code (about 11 MiB for a Go
// guest, mapped executable outside the Go heap) until every CompileModule of
// it is matched by a CompiledModule.Close; closing the runtime alone closes
// its instances but never the code it compiled, so every distinct module the
// engine ever saw stayed mapped. Once both are closed and the instances are
// unreachable, wazero unmaps the code from a finalizer.
type runtimeWithCode struct {
	wazero.Runtime
	code wazero.CompiledModule
	// once: the code's Close drops a reference count shared by every
	// runtime that compiled the same bytes, so it must run exactly once.
	once sync.Once
}

// Close closes the runtime, then releases the code.
func (r *runtimeWithCode) Close(ctx context.Context) error {
	return r.CloseWithExitCode(ctx, 0)
}

// CloseWithExitCode closes the runtime with exitCode, then releases the code.
func (r *runtimeWithCode) CloseWithExitCode(ctx context.Context, exitCode uint32) error {
	err := r.Runtime.CloseWithExitCode(ctx, exitCode)
	r.once.Do(func() { err = errors.Join(err, r.code.Close(ctx)) })
	return err
}

func forbiddenImports(cm wazero.CompiledModule, grants Grants) []string {
	var bad []string
	for _, f := range cm.ImportedFunctions() {
		mod, fn, _ := f.Import()
		switch {
		case mod == wasi_snapshot_preview1.ModuleName && wasipolicy.Allowed(fn):
		case mod == abi.ImportModule && (fn == abi.ImportLog || fn == abi.ImportCount):
			if why := grants.Refusal(mod+"."+fn, fn); why != "" {
				bad = append(bad, why)
			}
		default:
			bad = append(bad, guestio.Sanitize([]byte(mod+"."+fn), 96))
		}
	}
	for _, mem := range cm.ImportedMemories() {
		mod, n, _ := mem.Import()
		bad = append(bad, "memory "+guestio.Sanitize([]byte(mod+"."+n), 96))
	}
	sort.Strings(bad)
	if len(bad) > 16 {
		bad = append(bad[:16], fmt.Sprintf("and %d more", len(bad)-16))
	}
	return bad
}

var (
	sigNone = [2][]api.ValueType{nil, {api.ValueTypeI32}}
	sigI32  = [2][]api.ValueType{{api.ValueTypeI32}, {api.ValueTypeI32}}
	sigCall = [2][]api.ValueType{{api.ValueTypeI32, api.ValueTypeI32}, {api.ValueTypeI64}}
)

func sameSig(d api.FunctionDefinition, s [2][]api.ValueType) bool {
	eq := func(a, b []api.ValueType) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	return eq(d.ParamTypes(), s[0]) && eq(d.ResultTypes(), s[1])
}

// checkShape verifies the exports every module needs and its memory.
func checkShape(cm wazero.CompiledModule, lim Limits) (Class, string) {
	exps := cm.ExportedFunctions()
	need := []struct {
		name string
		sig  [2][]api.ValueType
	}{{abi.ExportVersion, sigNone}, {abi.ExportAlloc, sigI32}, {abi.ExportDescribe.Name(), sigCall}}
	for _, n := range need {
		d, ok := exps[n.name]
		if !ok {
			return ClassInvalidModule, "missing export " + n.name
		}
		if !sameSig(d, n.sig) {
			return ClassABIMismatch, "export " + n.name + " has the wrong signature"
		}
	}
	if d, ok := exps[abi.ExportInitialize]; ok && (len(d.ParamTypes()) != 0 || len(d.ResultTypes()) != 0) {
		return ClassABIMismatch, "export _initialize has the wrong signature"
	}
	mems := cm.ExportedMemories()
	mem, ok := mems["memory"]
	if !ok {
		return ClassInvalidModule, "missing exported memory"
	}
	if mem.Min() > lim.MemoryPages {
		return ClassMemory, fmt.Sprintf("module needs %d pages, limit %d", mem.Min(), lim.MemoryPages)
	}
	return "", ""
}
