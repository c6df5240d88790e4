package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caphost/caphost/third_party/wazero"
	"github.com/caphost/caphost/third_party/wazero/api"
	"github.com/caphost/caphost/third_party/wazero/sys"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins/internal/guestio"
)

// Module is a loaded guest module with its instance pool. It is safe for
// concurrent use; each instance serves one call at a time.
type Module struct {
	name     string
	eng      *Engine
	lim      Limits
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	modCfg   wazero.ModuleConfig
	desc     *abi.Description
	declared [abi.NumExports]bool
	policies map[string]*abi.RatePolicyDecl

	tokens chan struct{}  // one per live instance: bounds the pool
	idle   chan *instance // warm instances
	inUse  atomic.Int64
	live   sync.Map // api.Module -> *instance, for host functions

	logWindow atomic.Int64 // unix second of the current log budget
	logCount  atomic.Int64

	// verifying raises the call deadline to at least VerifyCallTimeout
	// while the module is checked before it serves (describe at start, the
	// Manager's self-test and conformance): a loaded machine must not
	// refuse a correct module, and a looping guest is still stopped.
	verifying atomic.Bool

	closeOnce sync.Once
	done      chan struct{}
	// shut is set by Close just before it closes done: closed() reads it
	// with one atomic load instead of a select on done (it runs three times
	// per call).
	shut atomic.Bool
}

type instance struct {
	mod   api.Module
	mem   api.Memory
	alloc api.Function
	fns   [abi.NumExports]api.Function

	inPtr, inCap uint32
	calls        uint64
	hostCalls    int
	logs         int
	stack        [2]uint64
	stderr       guestio.HeadWriter

	// cctx is the context of every call into this instance; wmu guards
	// deadline (watchdog clock, 0 when idle) and cctx.parent against the
	// watchdog.
	cctx     callCtx
	wmu      sync.Mutex
	deadline int64
}

// Name is the module's configured name.
func (m *Module) Name() string { return m.name }

// Description is the validated describe output. Callers must not modify it.
func (m *Module) Description() *abi.Description { return m.desc }

// Limits are the module's effective limits.
func (m *Module) Limits() Limits { return m.lim }

// Close stops the module: calls in flight are interrupted with ClassClosed
// and waited for, idle instances are closed, and later calls fail with
// ClassClosed. It returns once no call runs in the module; an interrupted
// call leaves the guest at its next termination check, and an instance
// being started finishes within its InitTimeout.
func (m *Module) Close(ctx context.Context) error {
	var err error
	m.closeOnce.Do(func() {
		m.shut.Store(true)
		close(m.done)
		// Closing the runtime under a running call races inside wazero:
		// it releases the module's resources (its WASI context) while a
		// host function of the call still reads them. The calls are
		// stopped the way a deadline stops them instead — through their
		// own call context, which lets wazero close the instance on the
		// calling goroutine — and waited for: every call and every
		// instance being started holds a token, so owning all of them
		// means none is left. A call that registers with the watchdog
		// after this scan sees done closed and never enters the guest.
		m.live.Range(func(_, v any) bool {
			inst := v.(*instance)
			inst.wmu.Lock()
			if inst.deadline != 0 {
				inst.cctx.kill(reasonCanceled)
			}
			inst.wmu.Unlock()
			return true
		})
		for range cap(m.tokens) {
			m.tokens <- struct{}{}
		}
		err = m.rt.Close(ctx)
		// A closed Module may stay referenced (a caller's variable, an old
		// generation's record): its instances must not pin their code.
		m.live.Clear()
		m.eng.mu.Lock()
		delete(m.eng.modules, m)
		m.eng.mu.Unlock()
		m.eng.wd.mods.Delete(m)
		for {
			select {
			case <-m.idle:
			default:
				m.eng.obs.PoolChanged(m.name, int(m.inUse.Load()), 0)
				return
			}
		}
	})
	return err
}

// closed reports whether Close has begun (see shut).
func (m *Module) closed() bool { return m.shut.Load() }

// start creates the first instance, negotiates the ABI and reads describe.
func (m *Module) start(ctx context.Context) error {
	m.tokens <- struct{}{}
	m.inUse.Add(1)
	inst, gerr := m.newInstance(ctx)
	if gerr != nil {
		return gerr
	}
	fail := func(c Class, detail string, cause error) error {
		m.discard(inst)
		return guestErr(m.name, 0, c, detail, cause)
	}
	m.verifying.Store(true)
	defer m.verifying.Store(false)
	ictx, cancel := context.WithTimeout(ctx, max(m.lim.CallTimeout, VerifyCallTimeout))
	defer cancel()
	res, err := inst.mod.ExportedFunction(abi.ExportVersion).Call(ictx)
	if err != nil {
		ge := m.classify(inst, abi.ExportDescribe, ictx, err)
		ge.Detail = "caphost_abi_version: " + ge.Detail
		m.discard(inst)
		return ge
	}
	major, minor := abi.UnpackVersion(uint32(res[0]))
	if verr := abi.CheckVersion(major, minor); verr != nil {
		return fail(ClassABIMismatch, "", verr)
	}
	frame, derr := m.callInstance(ctx, inst, abi.ExportDescribe, nil, m.eng.wd.now(), nil)
	if derr != nil {
		m.discard(inst)
		return derr
	}
	raw, perr := abi.ParseFrame(frame)
	if perr != nil {
		var se *abi.StatusError
		if errors.As(perr, &se) {
			m.discard(inst)
			return guestErr(m.name, abi.ExportDescribe, ClassInvalidDescription, "", se)
		}
		return fail(ClassMalformedOutput, "describe", perr)
	}
	desc, err := ParseDescription(raw)
	if err != nil {
		if errors.Is(err, abi.ErrUnsupportedMajor) || errors.Is(err, abi.ErrNewerMinor) {
			return fail(ClassABIMismatch, "describe", err)
		}
		return fail(ClassInvalidDescription, "", err)
	}
	if desc.ABI.Major != major || desc.ABI.Minor != minor {
		return fail(ClassABIMismatch, fmt.Sprintf("describe says ABI %d.%d, caphost_abi_version says %d.%d",
			desc.ABI.Major, desc.ABI.Minor, major, minor), nil)
	}
	exps := m.compiled.ExportedFunctions()
	for _, k := range desc.Kinds {
		for _, e := range abi.ExportsOf(k) {
			d, ok := exps[e.Name()]
			if !ok || !sameSig(d, sigCall) {
				return fail(ClassABIMismatch, fmt.Sprintf("kind %s needs export %s(i32,i32)->i64", k, e.Name()), nil)
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

// newInstance instantiates the module and runs _initialize. The caller holds a token.
func (m *Module) newInstance(ctx context.Context) (*instance, *GuestError) {
	inst := &instance{}
	inst.cctx.init()
	ictx, cancel := context.WithTimeout(ctx, m.lim.InitTimeout)
	defer cancel()
	mod, err := m.rt.InstantiateModule(ictx, m.compiled, m.modCfg.WithName("").WithStderr(&inst.stderr))
	if err != nil {
		if m.closed() {
			return nil, guestErr(m.name, 0, ClassClosed, "", nil)
		}
		c := ClassInvalidModule
		if ictx.Err() != nil {
			c = ClassDeadline
		}
		return nil, guestErr(m.name, 0, c, "instantiate", err)
	}
	inst.mod = mod
	inst.mem = mod.Memory()
	inst.alloc = mod.ExportedFunction(abi.ExportAlloc)
	for e := abi.ExportDescribe; int(e) < abi.NumExports; e++ {
		inst.fns[e] = mod.ExportedFunction(e.Name())
	}
	m.live.Store(mod, inst)
	if init := mod.ExportedFunction(abi.ExportInitialize); init != nil {
		if _, err := init.Call(ictx); err != nil {
			ge := m.classify(inst, 0, ictx, err)
			ge.Detail = "_initialize: " + ge.Detail
			m.discard(inst)
			return nil, ge
		}
	}
	m.eng.obs.InstanceStarted(m.name)
	return inst, nil
}

// acquire returns an instance reserved for the caller; slow reports that it
// waited for a token or instantiated, so the caller's clock reading is stale.
func (m *Module) acquire(ctx context.Context, e abi.Export) (inst *instance, slow bool, gerr *GuestError) {
	select {
	case m.tokens <- struct{}{}:
	default:
		slow = true
		select {
		case m.tokens <- struct{}{}:
		case <-ctx.Done():
			return nil, slow, guestErr(m.name, e, ClassPoolTimeout, "", ctx.Err())
		case <-m.done:
			return nil, slow, guestErr(m.name, e, ClassClosed, "", nil)
		}
	}
	if m.closed() {
		<-m.tokens
		return nil, slow, guestErr(m.name, e, ClassClosed, "", nil)
	}
	m.inUse.Add(1)
	select {
	case inst := <-m.idle:
		return inst, slow, nil
	default:
	}
	inst, gerr = m.newInstance(ctx)
	if gerr != nil {
		m.inUse.Add(-1)
		<-m.tokens
		gerr.Export = e.Name()
		return nil, true, gerr
	}
	return inst, true, nil
}

// release returns inst to the pool, or discards it when it failed, is due
// for recycling or the module is closing.
func (m *Module) release(inst *instance, healthy bool) {
	if healthy && inst.calls < m.lim.RecycleAfter && !m.closed() {
		m.idle <- inst // never blocks: at most PoolSize instances exist
	} else {
		m.discard(inst)
	}
	m.inUse.Add(-1)
	<-m.tokens
	m.eng.obs.PoolChanged(m.name, int(m.inUse.Load()), len(m.idle))
}

func (m *Module) discard(inst *instance) {
	m.live.Delete(inst.mod)
	_ = inst.mod.Close(context.Background())
	m.eng.obs.InstanceDiscarded(m.name)
}

// pending is one call between begin and end: the instance is held and
// frame is a view into its memory, valid until end.
type pending struct {
	inst  *instance
	e     abi.Export
	start int64 // watchdog clock
	frame []byte
}

// begin acquires an instance and runs export e with request in. On success
// the caller reads p.frame and then must call end; on failure the call is
// already accounted for and nothing is held. It takes no closure so the hot
// path allocates nothing. A non-nil cpu measures the call (see CallCPU);
// every other call passes nil and pays for no clock read.
func (m *Module) begin(ctx context.Context, e abi.Export, in []byte, cpu *CallCPU) (pending, error) {
	p := pending{e: e}
	if !e.Valid() || !m.declared[e] {
		return p, guestErr(m.name, e, ClassNotDeclared, "module does not declare this export's kind", nil)
	}
	if len(in) > m.lim.MaxInputBytes {
		err := guestErr(m.name, e, ClassInputTooLarge, fmt.Sprintf("%d bytes, cap %d", len(in), m.lim.MaxInputBytes), nil)
		m.eng.obs.CallDone(CallStats{Module: m.name, Export: e, Class: err.Class})
		return p, err
	}
	p.start = m.eng.wd.now()
	if err := ctx.Err(); err != nil {
		// The caller gave up already: nothing is sent and no instance taken.
		gerr := m.ctxErr(e, err)
		m.eng.obs.CallDone(CallStats{Module: m.name, Export: e, Class: gerr.Class})
		return p, gerr
	}
	inst, slow, gerr := m.acquire(ctx, e)
	if gerr != nil {
		m.eng.obs.CallDone(CallStats{Module: m.name, Export: e, Duration: m.since(p.start), Class: gerr.Class})
		return p, gerr
	}
	p.inst = inst
	// The call deadline bounds guest execution only: time spent waiting for
	// an instance (or instantiating one on recycle) is bounded by ctx, so a
	// busy pool never turns into deadline errors and discarded instances.
	callStart := p.start
	if slow {
		callStart = m.eng.wd.now()
	}
	frame, err := m.callInstance(ctx, inst, e, in, callStart, cpu)
	if err != nil {
		return p, m.end(&p, err)
	}
	p.frame = frame
	return p, nil
}

// end releases p's instance and reports the call. A nil err or a
// *abi.StatusError keeps the instance; any other error discards it, and a
// non-GuestError (a decoding failure of the frame) becomes malformed output.
func (m *Module) end(p *pending, err error) error {
	if p.inst == nil {
		return err
	}
	stats := CallStats{Module: m.name, Export: p.e}
	healthy := true
	if err != nil {
		var se *abi.StatusError
		var ge *GuestError
		switch {
		case errors.As(err, &se):
			stats.Status = se.Code
		case errors.As(err, &ge):
			stats.Class, healthy = ge.Class, false
		default:
			err = guestErr(m.name, p.e, ClassMalformedOutput, "", err)
			stats.Class, healthy = ClassMalformedOutput, false
		}
	}
	m.release(p.inst, healthy)
	p.inst, p.frame = nil, nil
	if m.eng.timed {
		stats.Duration = m.since(p.start)
	}
	m.eng.obs.CallDone(stats)
	return err
}

// invoke runs one export. read sees the raw response frame (a view into
// guest memory valid only during read) and must copy what it keeps. A
// *abi.StatusError from read is returned as is and keeps the instance; any
// other read error marks the output malformed and discards the instance.
func (m *Module) invoke(ctx context.Context, e abi.Export, in []byte, read func(frame []byte) error) error {
	p, err := m.begin(ctx, e, in, nil)
	if err != nil {
		return err
	}
	return m.end(&p, read(p.frame))
}

// since is the time elapsed from start on the watchdog clock.
func (m *Module) since(start int64) time.Duration { return time.Duration(m.eng.wd.now() - start) }

// callInstance performs the memory handoff and the call, and returns the
// response frame (checked against the output cap and memory bounds). start
// is on the watchdog clock. A non-nil cpu is filled in with the call's
// CPU time and budget (see CallCPU).
func (m *Module) callInstance(ctx context.Context, inst *instance, e abi.Export, in []byte, start int64, cpu *CallCPU) ([]byte, error) {
	limit := m.lim.CallTimeout
	if m.verifying.Load() {
		limit = max(limit, VerifyCallTimeout)
	}
	deadline := start + int64(limit)
	if d, ok := ctx.Deadline(); ok {
		deadline = min(deadline, m.eng.wd.at(d))
	}
	// 0 means idle to the watchdog; a deadline at or before its start has passed.
	m.eng.wd.begin(inst, ctx, max(deadline, 1))
	if m.closed() {
		// Close may have scanned the instances before begin: the call
		// must not enter a module that is closing (see Close).
		m.eng.wd.end(inst)
		return nil, guestErr(m.name, e, ClassClosed, "", nil)
	}
	var frame []byte
	var err error
	if cpu == nil {
		frame, err = m.run(inst, e, in)
	} else {
		frame, err = m.runMeasured(inst, e, in, deadline, limit, cpu)
	}
	if m.eng.wd.end(inst) {
		// The watchdog (or Close) fired, possibly just after the guest
		// returned: the instance's context is spent, so it goes whatever
		// the result.
		if m.closed() {
			return nil, guestErr(m.name, e, ClassClosed, "", nil)
		}
		return nil, m.ctxErr(e, inst.cctx.Err())
	}
	return frame, err
}

func (m *Module) ctxErr(e abi.Export, err error) *GuestError {
	if errors.Is(err, context.DeadlineExceeded) {
		return guestErr(m.name, e, ClassDeadline, "", context.DeadlineExceeded)
	}
	return guestErr(m.name, e, ClassCanceled, "", err)
}

func (m *Module) run(inst *instance, e abi.Export, in []byte) ([]byte, error) {
	cctx := &inst.cctx
	inst.calls++
	inst.hostCalls = 0
	inst.logs = 0
	n := uint32(len(in))
	if n > inst.inCap {
		// Ask for at least 4 KiB so small requests never call alloc again;
		// the guest keeps the region until the next caphost_alloc.
		want := max(n, 4096)
		inst.stack[0] = uint64(want)
		if err := inst.alloc.CallWithStack(cctx, inst.stack[:]); err != nil {
			return nil, m.classify(inst, e, cctx, err)
		}
		ptr := uint32(inst.stack[0])
		if ptr == 0 || uint64(ptr)+uint64(want) > uint64(inst.mem.Size()) {
			return nil, guestErr(m.name, e, ClassMalformedOutput, "caphost_alloc returned an unusable region", nil)
		}
		inst.inPtr, inst.inCap = ptr, want
	}
	if n > 0 && !inst.mem.Write(inst.inPtr, in) {
		return nil, guestErr(m.name, e, ClassMalformedOutput, "request region out of memory bounds", nil)
	}
	inst.stack[0], inst.stack[1] = uint64(inst.inPtr), uint64(n)
	if err := inst.fns[e].CallWithStack(cctx, inst.stack[:]); err != nil {
		return nil, m.classify(inst, e, cctx, err)
	}
	optr, olen := uint32(inst.stack[0]>>32), uint32(inst.stack[0])
	if olen > uint32(m.lim.MaxOutputBytes) {
		return nil, guestErr(m.name, e, ClassOutputTooLarge, fmt.Sprintf("%d bytes, cap %d", olen, m.lim.MaxOutputBytes), nil)
	}
	frame, ok := inst.mem.Read(optr, olen)
	if !ok {
		return nil, guestErr(m.name, e, ClassMalformedOutput, "response region out of memory bounds", nil)
	}
	return frame, nil
}

// memorySlackPages: the Go runtime grows its heap in steps, so a guest that
// ran out of memory may stop a little below the exact limit.
const memorySlackPages = 64

// classify maps a wazero call error to a GuestError.
func (m *Module) classify(inst *instance, e abi.Export, cctx context.Context, err error) *GuestError {
	var hl *hostCallError
	if errors.As(err, &hl) {
		return guestErr(m.name, e, hl.class, hl.detail, nil)
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return guestErr(m.name, e, ClassDeadline, "", context.DeadlineExceeded)
		case sys.ExitCodeContextCanceled:
			return guestErr(m.name, e, ClassCanceled, "", context.Canceled)
		}
		if m.closed() {
			return guestErr(m.name, e, ClassClosed, "", nil)
		}
	}
	tail := inst.stderr.String()
	pages := inst.mem.Size() / 65536
	if pages+memorySlackPages >= m.lim.MemoryPages || strings.Contains(tail, "out of memory") {
		return guestErr(m.name, e, ClassMemory, fmt.Sprintf("%d of %d pages in use", pages, m.lim.MemoryPages), nil)
	}
	if cctx.Err() != nil {
		return guestErr(m.name, e, ClassDeadline, "", cctx.Err())
	}
	detail := guestio.FirstLine(err.Error())
	if tail != "" {
		detail += "; stderr: " + tail
	}
	return guestErr(m.name, e, ClassTrap, detail, nil)
}
