// Package extism is the Extism flavour of caphost guests: modules built with
// an Extism PDK (any language; the reference is guests/rate-policy-extism,
// Go with github.com/extism/go-pdk) loaded through the Extism Go SDK.
//
// It owns the mapping of ABI v1 onto Extism's calling convention: an export
// caphost_<name> takes no parameters and returns an i32; the request (an abi
// message) is the Extism input and the response frame (status byte + body,
// exactly as in the native flavour) is the Extism output; caphost_abi_version
// returns the packed version as its i32. The caphost_v1 host functions are
// Extism user functions (namespace extism:host/user): caphost_log(level i64,
// block i64) and caphost_count(block i64), where block is an Extism memory
// offset. The same plugins.Limits apply where Extism supports them (memory
// pages and the call timeout through the manifest; input/output caps, host
// calls per invocation, pool size and recycling here), and every failure is
// a *plugins.GuestError with the native flavour's classes.
//
// A *Module is a plugins.LoadedGuest: the typed calls (plugins.RateSelect,
// plugins.CodecEncode, ...) and their host-side re-checks
// (plugins.DecodeResponse), plugins.SelfTest and the conformance suite are
// the native flavour's code, not copies, and an *Engine is the
// plugins.Loader the hot-swap plugins.Manager loads Extism modules with
// (ManagerOptions.Extism), so they are verified, swapped, rolled back and
// observed exactly like native ones.
//
// This flavour is for portability (PDKs in many languages), not speed: an
// Extism call costs tens of microseconds against about one for the native
// path. Change the ABI in package abi first, then both flavours.
package extism

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/caphost/caphost/third_party/extism"
	"github.com/caphost/caphost/third_party/wazero"
	"github.com/caphost/caphost/third_party/wazero/api"
	"github.com/caphost/caphost/third_party/wazero/sys"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/internal/guestio"
	"github.com/caphost/caphost/plugins/internal/threadcpu"
	"github.com/caphost/caphost/plugins/internal/wasipolicy"
)

// Names of the caphost host functions in Extism's user namespace.
const (
	HostNamespace = "extism:host/user"
	HostLog       = "caphost_log"
	HostCount     = "caphost_count"
)

// ErrEngineClosed is returned by Load after Close.
var ErrEngineClosed = errors.New("plugins/extism: engine closed")

// Engine loads Extism guest modules. It is safe for concurrent use.
type Engine struct {
	cache    wazero.CompilationCache
	defaults plugins.Limits
	caps     plugins.Limits
	events   map[string]string
	maxBytes int
	logRate  int64
	obs      plugins.Observer
	log      *slog.Logger

	mu      sync.Mutex
	closed  bool
	modules map[*Module]struct{}
}

// NewEngine creates an engine. It takes the native flavour's Config so an
// operator configures both flavours the same way.
func NewEngine(cfg plugins.Config) (*Engine, error) {
	defaults, err := plugins.Limits{}.Resolve(cfg.Defaults, cfg.Caps)
	if err != nil {
		return nil, fmt.Errorf("plugins/extism: default limits: %w", err)
	}
	caps, _ := plugins.HardCaps().Resolve(cfg.Caps, cfg.Caps)
	e := &Engine{
		defaults: defaults, caps: caps,
		events:   make(map[string]string, len(cfg.CountEvents)),
		maxBytes: cfg.MaxModuleBytes, logRate: int64(cfg.LogLinesPerSecond),
		obs: cfg.Observer, log: cfg.Logger,
		modules: map[*Module]struct{}{},
	}
	for _, ev := range cfg.CountEvents {
		if ev == "" || len(ev) > abi.MaxNameBytes {
			return nil, fmt.Errorf("plugins/extism: count event %q: empty or longer than %d bytes", ev, abi.MaxNameBytes)
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
		e.obs = plugins.NopObserver{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if cfg.CacheDir != "" {
		if e.cache, err = wazero.NewCompilationCacheWithDir(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("plugins/extism: compilation cache %s: %w", cfg.CacheDir, err)
		}
	} else {
		e.cache = wazero.NewCompilationCache()
	}
	return e, nil
}

// Close closes every loaded module and the compilation cache.
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
	return errors.Join(errs...)
}

// envAllowed is the part of Extism's kernel (extism:host/env) a guest may
// import: memory blocks, input/output, errors, logging and config. HTTP and
// plugin variables are refused: guests have no network and no state beyond
// their instance.
var envAllowed = map[string]bool{
	"alloc": true, "free": true, "length": true, "length_unsafe": true,
	"load_u8": true, "load_u64": true, "store_u8": true, "store_u64": true,
	"input_length": true, "input_offset": true, "input_load_u8": true, "input_load_u64": true,
	"output_set": true, "error_set": true, "config_get": true, "get_log_level": true,
	"log_trace": true, "log_debug": true, "log_info": true, "log_warn": true, "log_error": true,
}

// vet lists the module's forbidden imports and checks the signature of its
// caphost_* exports (Extism's convention: no parameters, one i32 result).
func vet(ctx context.Context, wasm []byte, grants plugins.Grants) (bad []string, sigErr string, err error) {
	// The interpreter only parses and validates: listing imports this way
	// costs no native compilation.
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(context.WithoutCancel(ctx))
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, "", err
	}
	for name, d := range cm.ExportedFunctions() {
		if !strings.HasPrefix(name, "caphost_") {
			continue
		}
		if len(d.ParamTypes()) != 0 || len(d.ResultTypes()) != 1 || d.ResultTypes()[0] != i32 {
			sigErr = "export " + guestio.Sanitize([]byte(name), 64) + " must be () -> i32 (Extism convention)"
		}
	}
	for _, f := range cm.ImportedFunctions() {
		mod, fn, _ := f.Import()
		switch {
		case mod == "wasi_snapshot_preview1" && wasipolicy.Allowed(fn):
		case mod == "extism:host/env" && envAllowed[fn]:
		case mod == HostNamespace && (fn == HostLog || fn == HostCount):
			// caphost_<f> stands for caphost_v1.<f>; it links only if granted.
			if why := grants.Refusal(mod+"."+fn, strings.TrimPrefix(fn, "caphost_")); why != "" {
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
	return bad, sigErr, nil
}

const i32 = api.ValueTypeI32

// IsModule reports whether a module's imports (from plugins.Shape) mark it
// as built for this flavour: every Extism PDK module imports Extism's kernel
// (extism:host/env), and the native engine refuses any extism:host import.
// It is plugins.DetectFlavour's rule on an already decoded shape; the
// engines themselves still vet every import.
func IsModule(s plugins.ModuleShape) bool {
	for _, imp := range s.Imports {
		if strings.HasPrefix(imp, plugins.ExtismImportPrefix) {
			return true
		}
	}
	return false
}

// Load compiles, vets and starts an Extism module: imports are checked, the
// ABI major negotiated, describe validated and the kinds' exports checked,
// and one instance is kept warm. Every guest failure is a *plugins.GuestError.
func (e *Engine) Load(ctx context.Context, name string, wasm []byte, lim plugins.Limits) (*Module, error) {
	fail := func(c plugins.Class, detail string, cause error) (*Module, error) {
		return nil, &plugins.GuestError{Module: guestio.Sanitize([]byte(name), 64), Class: c, Detail: detail, Err: cause}
	}
	if !abi.ValidID(name) {
		return fail(plugins.ClassInvalidModule, "module name must match [a-z0-9][a-z0-9._-]*, at most 64 bytes", nil)
	}
	if len(wasm) > e.maxBytes {
		return fail(plugins.ClassInvalidModule, fmt.Sprintf("module is %d bytes, cap %d", len(wasm), e.maxBytes), nil)
	}
	lim, err := lim.Resolve(e.defaults, e.caps)
	if err != nil {
		return nil, fmt.Errorf("plugins/extism: module %s: %w", name, err)
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, ErrEngineClosed
	}
	bad, sigErr, err := vet(ctx, wasm, lim.Grants)
	if err != nil {
		return fail(plugins.ClassInvalidModule, "compile", err)
	}
	if len(bad) > 0 {
		return fail(plugins.ClassForbiddenImport, strings.Join(bad, ", "), nil)
	}
	if sigErr != "" {
		return fail(plugins.ClassABIMismatch, sigErr, nil)
	}

	m := &Module{
		name: name, eng: e, lim: lim,
		tokens: make(chan struct{}, lim.PoolSize),
		idle:   make(chan *instance, lim.PoolSize),
		done:   make(chan struct{}),
	}
	m.life, m.endLife = context.WithCancel(context.Background())
	i64 := sdk.ValueTypeI64
	logFn := sdk.NewHostFunctionWithStack(HostLog, m.hostLog, []sdk.ValueType{i64, i64}, nil)
	countFn := sdk.NewHostFunctionWithStack(HostCount, m.hostCount, []sdk.ValueType{i64}, nil)
	// Only granted host functions exist for the module (vet refused an
	// import of any other).
	var hostFns []sdk.HostFunction
	if lim.Grants&plugins.GrantLog != 0 {
		hostFns = append(hostFns, logFn)
	}
	if lim.Grants&plugins.GrantCount != 0 {
		hostFns = append(hostFns, countFn)
	}
	manifest := sdk.Manifest{
		Wasm: []sdk.Wasm{sdk.WasmData{Data: wasm, Name: "main"}},
		// MaxVarBytes 0 leaves no room for plugin variables and
		// MaxHttpResponseBytes 0 none for HTTP (also refused at import).
		Memory:  &sdk.ManifestMemory{MaxPages: lim.MemoryPages, MaxVarBytes: 0, MaxHttpResponseBytes: 0},
		Timeout: uint64(max(lim.CallTimeout.Milliseconds(), 1)),
	}
	compiled, err := sdk.NewCompiledPlugin(ctx, manifest, sdk.PluginConfig{
		EnableWasi: true,
		// The call stack bound of the native flavour (Limits.MaxStackBytes).
		RuntimeConfig: wazero.NewRuntimeConfig().WithCompilationCache(e.cache).
			WithCallStackLimitBytes(uint32(lim.MaxStackBytes)),
	}, hostFns)
	if err != nil {
		if strings.Contains(err.Error(), "over limit of") {
			return fail(plugins.ClassMemory, "module declares more memory than its limit", err)
		}
		return fail(plugins.ClassInvalidModule, "compile", err)
	}
	m.compiled = compiled
	if err := m.start(ctx); err != nil {
		m.endLife()
		_ = compiled.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		_ = m.Close(context.WithoutCancel(ctx))
		return nil, ErrEngineClosed
	}
	e.modules[m] = struct{}{}
	e.mu.Unlock()
	return m, nil
}

// Module is a loaded Extism module with its instance pool. It is safe for
// concurrent use; each instance serves one call at a time.
type Module struct {
	name     string
	eng      *Engine
	lim      plugins.Limits
	compiled *sdk.CompiledPlugin
	desc     *abi.Description
	declared [abi.NumExports]bool
	policies map[string]*abi.RatePolicyDecl

	tokens chan struct{}
	idle   chan *instance
	inUse  atomic.Int64

	logWindow atomic.Int64
	logCount  atomic.Int64

	// verifying raises the call timeout to at least
	// plugins.VerifyCallTimeout while the module is checked before it
	// serves, as in the native flavour.
	verifying atomic.Bool

	// life ends when Close begins: every call's context is cancelled with
	// it, which stops the guest (see Close).
	life      context.Context
	endLife   context.CancelFunc
	closeOnce sync.Once
	done      chan struct{}
}

type instance struct {
	p         *sdk.Plugin
	version   uint32 // what caphost_abi_version answered
	calls     uint64
	hostCalls int
	logs      int
	stderr    guestio.HeadWriter
}

// Name is the module's configured name.
func (m *Module) Name() string { return m.name }

// Description is the validated describe output. Callers must not modify it.
func (m *Module) Description() *abi.Description { return m.desc }

// Limits are the module's effective limits.
func (m *Module) Limits() plugins.Limits { return m.lim }

// Close stops the module: calls in flight are interrupted with ClassClosed
// and waited for, instances are closed, and later calls fail with
// ClassClosed.
func (m *Module) Close(ctx context.Context) error {
	var err error
	m.closeOnce.Do(func() {
		close(m.done)
		// As in the native flavour, closing the runtime under a running
		// call races inside wazero: the calls are stopped through their
		// context (wazero closes the instance on the calling goroutine)
		// and waited for — each holds a token, so owning every token
		// means no call is left.
		m.endLife()
		for range cap(m.tokens) {
			m.tokens <- struct{}{}
		}
		m.eng.mu.Lock()
		delete(m.eng.modules, m)
		m.eng.mu.Unlock()
		m.Trim()
		err = m.compiled.Close(ctx)
	})
	return err
}

// Flavour implements plugins.LoadedGuest.
func (m *Module) Flavour() plugins.Flavour { return plugins.FlavourExtism }

// Verifying implements plugins.LoadedGuest.
func (m *Module) Verifying(on bool) { m.verifying.Store(on) }

// Trim implements plugins.LoadedGuest: idle instances are closed.
func (m *Module) Trim() {
	for {
		select {
		case inst := <-m.idle:
			m.discard(inst)
		default:
			m.eng.obs.PoolChanged(m.name, int(m.inUse.Load()), len(m.idle))
			return
		}
	}
}

// callTimeout is the deadline of one call (see verifying).
func (m *Module) callTimeout() time.Duration {
	if m.verifying.Load() {
		return max(m.lim.CallTimeout, plugins.VerifyCallTimeout)
	}
	return m.lim.CallTimeout
}

// callContext is ctx, also cancelled when Close begins, carrying inst to
// the host functions. stop must be called when the call returns.
func (m *Module) callContext(ctx context.Context, inst *instance) (cctx context.Context, stop func()) {
	cctx, cancel := context.WithCancel(context.WithValue(ctx, instKey{}, inst))
	unhook := context.AfterFunc(m.life, cancel)
	return cctx, func() {
		unhook()
		cancel()
	}
}

func (m *Module) closed() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

func (m *Module) gerr(e abi.Export, c plugins.Class, detail string, cause error) *plugins.GuestError {
	ge := &plugins.GuestError{Module: m.name, Class: c, Detail: detail, Err: cause}
	if e.Valid() {
		ge.Export = e.Name()
	}
	return ge
}

// start creates the first instance, negotiates the ABI and reads describe.
func (m *Module) start(ctx context.Context) error {
	m.tokens <- struct{}{}
	m.inUse.Add(1)
	inst, gerr := m.newInstance(ctx)
	if gerr != nil {
		return gerr
	}
	fail := func(c plugins.Class, detail string, cause error) error {
		m.discard(inst)
		return m.gerr(0, c, detail, cause)
	}
	// describe is checked like the Manager's checks: under the
	// verification deadline.
	m.verifying.Store(true)
	defer m.verifying.Store(false)
	rc := inst.version
	major, minor := abi.UnpackVersion(rc)
	if verr := abi.CheckVersion(major, minor); verr != nil {
		return fail(plugins.ClassABIMismatch, "", verr)
	}
	if !inst.p.FunctionExists(abi.ExportDescribe.Name()) {
		return fail(plugins.ClassInvalidModule, "missing export "+abi.ExportDescribe.Name(), nil)
	}
	frame, gerr := m.callInstance(ctx, inst, abi.ExportDescribe, nil, nil)
	if gerr != nil {
		m.discard(inst)
		return gerr
	}
	raw, err := abi.ParseFrame(frame)
	if err != nil {
		var se *abi.StatusError
		if errors.As(err, &se) {
			return fail(plugins.ClassInvalidDescription, "", se)
		}
		return fail(plugins.ClassMalformedOutput, "describe", err)
	}
	desc, err := plugins.ParseDescription(raw)
	if err != nil {
		if errors.Is(err, abi.ErrUnsupportedMajor) || errors.Is(err, abi.ErrNewerMinor) {
			return fail(plugins.ClassABIMismatch, "describe", err)
		}
		return fail(plugins.ClassInvalidDescription, "", err)
	}
	if desc.ABI.Major != major || desc.ABI.Minor != minor {
		return fail(plugins.ClassABIMismatch, fmt.Sprintf("describe says ABI %d.%d, caphost_abi_version says %d.%d",
			desc.ABI.Major, desc.ABI.Minor, major, minor), nil)
	}
	for _, k := range desc.Kinds {
		for _, e := range abi.ExportsOf(k) {
			if !inst.p.FunctionExists(e.Name()) {
				return fail(plugins.ClassABIMismatch, fmt.Sprintf("kind %s needs export %s", k, e.Name()), nil)
			}
			m.declared[e] = true
		}
	}
	m.declared[abi.ExportDescribe] = true
	m.desc = desc
	m.policies = make(map[string]*abi.RatePolicyDecl, len(desc.RatePolicies))
	for i := range desc.RatePolicies {
		m.policies[desc.RatePolicies[i].ID] = &desc.RatePolicies[i]
	}
	m.release(inst, true)
	return nil
}

// newInstance creates an Extism plugin instance with the native flavour's
// sandbox: no FS, env or args; real clocks; crypto randomness; stderr kept
// for error details. The caller holds a token.
func (m *Module) newInstance(ctx context.Context) (*instance, *plugins.GuestError) {
	inst := &instance{}
	ictx, cancel := context.WithTimeout(ctx, m.lim.InitTimeout)
	defer cancel()
	// The sandbox's clocks and entropy, as in the native flavour.
	p, err := m.compiled.Instance(ictx, sdk.PluginInstanceConfig{ModuleConfig: wasipolicy.NewModuleConfig().WithStderr(&inst.stderr)})
	if err != nil {
		if m.closed() {
			return nil, m.gerr(0, plugins.ClassClosed, "", nil)
		}
		c := plugins.ClassInvalidModule
		if ictx.Err() != nil {
			c = plugins.ClassDeadline
		}
		return nil, m.gerr(0, c, "instantiate", err)
	}
	// Extism's own log lines (debug noise about calls) are not guest output.
	p.SetLogger(func(sdk.LogLevel, string) {})
	inst.p = p
	if !p.FunctionExists(abi.ExportVersion) {
		m.discard(inst)
		return nil, m.gerr(0, plugins.ClassInvalidModule, "missing export "+abi.ExportVersion, nil)
	}
	// Extism initialises the guest's runtime (_initialize) inside the first
	// call, under that call's timeout: make the first call caphost_abi_version
	// under the init timeout, then give the instance the call timeout.
	p.Timeout = m.lim.InitTimeout
	cctx, stop := m.callContext(ctx, inst)
	rc, _, err := p.CallWithContext(cctx, abi.ExportVersion, nil)
	stop()
	p.Timeout = m.lim.CallTimeout
	if err != nil {
		if m.closed() {
			m.discard(inst)
			return nil, m.gerr(0, plugins.ClassClosed, "", nil)
		}
		ge := m.classify(inst, 0, err)
		ge.Detail = "initialize and caphost_abi_version: " + ge.Detail
		m.discard(inst)
		return nil, ge
	}
	inst.version = rc
	m.eng.obs.InstanceStarted(m.name)
	return inst, nil
}

func (m *Module) acquire(ctx context.Context, e abi.Export) (*instance, *plugins.GuestError) {
	select {
	case m.tokens <- struct{}{}:
	case <-ctx.Done():
		return nil, m.gerr(e, plugins.ClassPoolTimeout, "", ctx.Err())
	case <-m.done:
		return nil, m.gerr(e, plugins.ClassClosed, "", nil)
	}
	if m.closed() {
		<-m.tokens
		return nil, m.gerr(e, plugins.ClassClosed, "", nil)
	}
	m.inUse.Add(1)
	select {
	case inst := <-m.idle:
		return inst, nil
	default:
	}
	inst, gerr := m.newInstance(ctx)
	if gerr != nil {
		m.inUse.Add(-1)
		<-m.tokens
		gerr.Export = e.Name()
		return nil, gerr
	}
	return inst, nil
}

func (m *Module) release(inst *instance, healthy bool) {
	if healthy && inst.calls < m.lim.RecycleAfter && !m.closed() {
		m.idle <- inst
	} else {
		m.discard(inst)
	}
	m.inUse.Add(-1)
	<-m.tokens
	m.eng.obs.PoolChanged(m.name, int(m.inUse.Load()), len(m.idle))
}

func (m *Module) discard(inst *instance) {
	_ = inst.p.Close(context.Background())
	m.eng.obs.InstanceDiscarded(m.name)
}

// instKey carries the calling instance to the host functions.
type instKey struct{}

// callInstance runs export e on inst and returns the response frame (a
// copy: Extism copies its output).
func (m *Module) callInstance(ctx context.Context, inst *instance, e abi.Export, in []byte, cpu *plugins.CallCPU) ([]byte, *plugins.GuestError) {
	inst.calls++
	inst.hostCalls = 0
	inst.logs = 0
	inst.p.Timeout = m.callTimeout()
	cctx, stop := m.callContext(ctx, inst)
	var (
		rc    uint32
		out   []byte
		err   error
		meter threadcpu.Meter
	)
	if cpu == nil {
		rc, out, err = inst.p.CallWithContext(cctx, e.Name(), in)
	} else {
		// A measured call (plugins.CallCPU): the thread's CPU time over
		// the guest call, the budget it ran under.
		meter.Start()
		cpu.Limit, cpu.Budget = inst.p.Timeout, inst.p.Timeout
		if d, ok := ctx.Deadline(); ok {
			cpu.Budget = max(min(cpu.Budget, time.Until(d)), 0)
		}
		rc, out, err = inst.p.CallWithContext(cctx, e.Name(), in)
		cpu.CPU, cpu.Measured = meter.Stop()
	}
	stop()
	if err != nil {
		if m.closed() {
			// Close stopped the call (or it ended as Close began).
			return nil, m.gerr(e, plugins.ClassClosed, "", nil)
		}
		return nil, m.classify(inst, e, err)
	}
	if rc != 0 {
		return nil, m.gerr(e, plugins.ClassTrap, fmt.Sprintf("export returned %d", rc), nil)
	}
	if len(out) > m.lim.MaxOutputBytes {
		return nil, m.gerr(e, plugins.ClassOutputTooLarge, fmt.Sprintf("%d bytes, cap %d", len(out), m.lim.MaxOutputBytes), nil)
	}
	return out, nil
}

// memorySlackPages as in the native flavour: the Go runtime grows its heap
// in steps, so an out-of-memory guest may stop a little below the limit.
const memorySlackPages = 64

func (m *Module) classify(inst *instance, e abi.Export, err error) *plugins.GuestError {
	var hl *hostCallError
	if errors.As(err, &hl) {
		return m.gerr(e, hl.class, hl.detail, nil)
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return m.gerr(e, plugins.ClassDeadline, "", context.DeadlineExceeded)
		case sys.ExitCodeContextCanceled:
			return m.gerr(e, plugins.ClassCanceled, "", context.Canceled)
		}
		if m.closed() {
			return m.gerr(e, plugins.ClassClosed, "", nil)
		}
	}
	tail := inst.stderr.String()
	if strings.Contains(tail, "out of memory") || strings.Contains(err.Error(), "out of memory") {
		return m.gerr(e, plugins.ClassMemory, "", nil)
	}
	detail := guestio.FirstLine(err.Error())
	if tail != "" {
		detail += "; stderr: " + tail
	}
	return m.gerr(e, plugins.ClassTrap, guestio.Sanitize([]byte(detail), 512), nil)
}

// invoke runs one export and hands the response frame to read while the
// instance is held; read's errors follow the native flavour's rules.
func (m *Module) invoke(ctx context.Context, e abi.Export, in []byte, cpu *plugins.CallCPU, read func(frame []byte) error) error {
	if !e.Valid() || !m.declared[e] {
		return m.gerr(e, plugins.ClassNotDeclared, "module does not declare this export's kind", nil)
	}
	if len(in) > m.lim.MaxInputBytes {
		err := m.gerr(e, plugins.ClassInputTooLarge, fmt.Sprintf("%d bytes, cap %d", len(in), m.lim.MaxInputBytes), nil)
		m.eng.obs.CallDone(plugins.CallStats{Module: m.name, Export: e, Class: err.Class})
		return err
	}
	start := time.Now()
	inst, gerr := m.acquire(ctx, e)
	if gerr != nil {
		m.eng.obs.CallDone(plugins.CallStats{Module: m.name, Export: e, Duration: time.Since(start), Class: gerr.Class})
		return gerr
	}
	stats := plugins.CallStats{Module: m.name, Export: e}
	var err error
	frame, gerr := m.callInstance(ctx, inst, e, in, cpu)
	if gerr == nil {
		err = read(frame)
	} else {
		err = gerr
	}
	healthy := true
	if err != nil {
		var se *abi.StatusError
		var ge *plugins.GuestError
		switch {
		case errors.As(err, &se):
			stats.Status = se.Code
		case errors.As(err, &ge):
			stats.Class, healthy = ge.Class, false
		default:
			err = m.gerr(e, plugins.ClassMalformedOutput, "", err)
			stats.Class, healthy = plugins.ClassMalformedOutput, false
		}
	}
	m.release(inst, healthy)
	stats.Duration = time.Since(start)
	m.eng.obs.CallDone(stats)
	return err
}

// The Extism flavour is a plugins.LoadedGuest: the Manager, the
// conformance suite, the self-test and the typed calls run on it
// unchanged.
var _ plugins.LoadedGuest = (*Module)(nil)

// LoadGuest implements plugins.Loader: Load, as a plugins.LoadedGuest.
func (e *Engine) LoadGuest(ctx context.Context, name string, wasm []byte, lim plugins.Limits) (plugins.LoadedGuest, error) {
	m, err := e.Load(ctx, name, wasm, lim)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Call sends a pre-encoded request to export e and appends the raw response
// frame to out, like (*plugins.Module).Call.
func (m *Module) Call(ctx context.Context, e abi.Export, in, out []byte) ([]byte, error) {
	err := m.invoke(ctx, e, in, nil, func(frame []byte) error {
		out = append(out, frame...)
		return nil
	})
	return out, err
}

// Exchange implements plugins.Guest: the response frame is decoded and
// re-checked by plugins.DecodeResponse (the native flavour's checks) while
// the instance is held, so a bad answer discards it.
func (m *Module) Exchange(ctx context.Context, e abi.Export, req, resp abi.Message) error {
	// Extism copies the input into guest memory itself: no buffer to pool.
	return m.invoke(ctx, e, req.AppendTo(nil), nil, func(frame []byte) error {
		return plugins.DecodeResponse(m, e, req, frame, resp)
	})
}

// The Extism flavour measures calls too.
var _ plugins.CPUMeasurer = (*Module)(nil)

// ExchangeMeasured implements plugins.CPUMeasurer: Exchange, with the
// call's CPU time and budget written to cpu. The Extism SDK runs the guest
// on the calling goroutine, as the native engine does.
func (m *Module) ExchangeMeasured(ctx context.Context, e abi.Export, req, resp abi.Message, cpu *plugins.CallCPU) error {
	*cpu = plugins.CallCPU{}
	return m.invoke(ctx, e, req.AppendTo(nil), cpu, func(frame []byte) error {
		return plugins.DecodeResponse(m, e, req, frame, resp)
	})
}

// RatePolicy implements plugins.Guest.
func (m *Module) RatePolicy(id string) (*abi.RatePolicyDecl, bool) {
	p, ok := m.policies[id]
	return p, ok
}

// RateSelect is plugins.RateSelect(ctx, m, req); the other kinds' typed calls
// are the plugins functions of the same names.
func (m *Module) RateSelect(ctx context.Context, req *abi.RateSelectRequest) (*abi.RateSelectResponse, error) {
	return plugins.RateSelect(ctx, m, req)
}
