package plugins

import (
	"context"
	"log/slog"
	"time"

	"github.com/caphost/caphost/third_party/wazero/api"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins/internal/guestio"
)

// Bounds of the caphost_v1 imports.
const (
	// MaxLogBytes is the longest guest log line kept; longer lines are truncated.
	MaxLogBytes = 512
	// MaxLogsPerCall is how many log lines one invocation may emit; the rest are dropped.
	MaxLogsPerCall = 8
)

// hostCallError is panicked by a host function to abort the guest; wazero
// returns it wrapped from the call, and classify turns it into a GuestError.
type hostCallError struct {
	class  Class
	detail string
}

func (e *hostCallError) Error() string { return string(e.class) + ": " + e.detail }

// instantiateHost instantiates the caphost_v1 host module with only the
// functions the module was granted (Limits.Grants). Load has already
// refused a module importing anything else, with a message naming the
// import; this keeps an ungranted function out of the module's namespace
// even so.
func (m *Module) instantiateHost(ctx context.Context) error {
	if m.lim.Grants&AllGrants == 0 {
		return nil // nothing granted: no caphost_v1 module at all
	}
	i32 := api.ValueTypeI32
	b := m.rt.NewHostModuleBuilder(abi.ImportModule)
	if m.lim.Grants&GrantLog != 0 {
		b = b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(m.hostLog), []api.ValueType{i32, i32, i32}, nil).Export(abi.ImportLog)
	}
	if m.lim.Grants&GrantCount != 0 {
		b = b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(m.hostCount), []api.ValueType{i32, i32}, nil).Export(abi.ImportCount)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// enter charges one host call to the calling instance.
func (m *Module) enter(caller api.Module) *instance {
	v, ok := m.live.Load(caller)
	if !ok {
		// Not one of our instances (cannot happen: one runtime per module).
		panic(&hostCallError{class: ClassBadHostCall, detail: "unknown caller"})
	}
	inst := v.(*instance)
	inst.hostCalls++
	if inst.hostCalls > m.lim.MaxHostCalls {
		panic(&hostCallError{class: ClassHostCallLimit, detail: "more than max-host-calls in one invocation"})
	}
	return inst
}

func (m *Module) hostLog(ctx context.Context, caller api.Module, stack []uint64) {
	inst := m.enter(caller)
	level, ptr, n := abi.LogLevel(uint32(stack[0])), uint32(stack[1]), uint32(stack[2])
	inst.logs++
	if inst.logs > MaxLogsPerCall || !m.logAllowed() {
		m.eng.obs.LogDropped(m.name)
		return
	}
	n = min(n, MaxLogBytes)
	b, ok := caller.Memory().Read(ptr, n)
	if !ok {
		panic(&hostCallError{class: ClassBadHostCall, detail: "log message out of memory bounds"})
	}
	lvl := slog.LevelError
	switch level {
	case abi.LogDebug:
		lvl = slog.LevelDebug
	case abi.LogInfo:
		lvl = slog.LevelInfo
	case abi.LogWarn:
		lvl = slog.LevelWarn
	}
	// The guest's text is an attribute, never the message, and is sanitised,
	// so a guest cannot forge host log lines.
	m.eng.log.Log(ctx, lvl, "guest log", slog.String("module", m.name), slog.String("guest_msg", guestio.Sanitize(b, MaxLogBytes)))
}

// logAllowed applies the per-module lines-per-second budget.
func (m *Module) logAllowed() bool {
	now := time.Now().Unix()
	if w := m.logWindow.Load(); w != now && m.logWindow.CompareAndSwap(w, now) {
		m.logCount.Store(0)
	}
	return m.logCount.Add(1) <= m.eng.logRate
}

func (m *Module) hostCount(_ context.Context, caller api.Module, stack []uint64) {
	m.enter(caller)
	ptr, n := uint32(stack[0]), uint32(stack[1])
	if n > abi.MaxNameBytes {
		return // cannot be allowlisted
	}
	b, ok := caller.Memory().Read(ptr, n)
	if !ok {
		panic(&hostCallError{class: ClassBadHostCall, detail: "count event out of memory bounds"})
	}
	// Only operator-allowlisted names reach metrics, so a guest cannot grow
	// label cardinality; the map lookup does not allocate.
	if ev, ok := m.eng.events[string(b)]; ok {
		m.eng.obs.GuestEvent(m.name, ev)
	}
}
