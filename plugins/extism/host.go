package extism

import (
	"context"
	"log/slog"
	"time"

	sdk "github.com/caphost/caphost/third_party/extism"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/internal/guestio"
)

// hostCallError is panicked by a host function to abort the guest; wazero
// returns it wrapped from the call and classify maps it to its class.
type hostCallError struct {
	class  plugins.Class
	detail string
}

func (e *hostCallError) Error() string { return string(e.class) + ": " + e.detail }

// enter charges one host call to the calling instance.
func (m *Module) enter(ctx context.Context) *instance {
	inst, ok := ctx.Value(instKey{}).(*instance)
	if !ok {
		panic(&hostCallError{class: plugins.ClassBadHostCall, detail: "host function called outside a caphost call"})
	}
	inst.hostCalls++
	if inst.hostCalls > m.lim.MaxHostCalls {
		panic(&hostCallError{class: plugins.ClassHostCallLimit, detail: "more than max-host-calls in one invocation"})
	}
	return inst
}

// block reads at most limit bytes of the Extism memory block at offset.
func block(ctx context.Context, p *sdk.CurrentPlugin, offset uint64, limit uint64) []byte {
	n, err := p.LengthWithContext(ctx, offset)
	if err != nil || offset > 1<<32-1 {
		panic(&hostCallError{class: plugins.ClassBadHostCall, detail: "memory block out of bounds"})
	}
	b, ok := p.Memory().Read(uint32(offset), uint32(min(n, limit)))
	if !ok {
		panic(&hostCallError{class: plugins.ClassBadHostCall, detail: "memory block out of bounds"})
	}
	return b
}

func (m *Module) hostLog(ctx context.Context, p *sdk.CurrentPlugin, stack []uint64) {
	inst := m.enter(ctx)
	level, offset := abi.LogLevel(uint32(stack[0])), stack[1]
	inst.logs++
	if inst.logs > plugins.MaxLogsPerCall || !m.logAllowed() {
		m.eng.obs.LogDropped(m.name)
		return
	}
	b := block(ctx, p, offset, plugins.MaxLogBytes)
	lvl := slog.LevelError
	switch level {
	case abi.LogDebug:
		lvl = slog.LevelDebug
	case abi.LogInfo:
		lvl = slog.LevelInfo
	case abi.LogWarn:
		lvl = slog.LevelWarn
	}
	// As in the native flavour: the guest's text is a sanitised attribute,
	// never the message, so a guest cannot forge host log lines.
	m.eng.log.Log(ctx, lvl, "guest log", slog.String("module", m.name), slog.String("guest_msg", guestio.Sanitize(b, plugins.MaxLogBytes)))
}

func (m *Module) logAllowed() bool {
	now := time.Now().Unix()
	if w := m.logWindow.Load(); w != now && m.logWindow.CompareAndSwap(w, now) {
		m.logCount.Store(0)
	}
	return m.logCount.Add(1) <= m.eng.logRate
}

func (m *Module) hostCount(ctx context.Context, p *sdk.CurrentPlugin, stack []uint64) {
	m.enter(ctx)
	b := block(ctx, p, stack[0], abi.MaxNameBytes+1)
	if len(b) > abi.MaxNameBytes {
		return // cannot be allowlisted
	}
	// Only operator-allowlisted names reach metrics (bounded label set).
	if ev, ok := m.eng.events[string(b)]; ok {
		m.eng.obs.GuestEvent(m.name, ev)
	}
}
