package plugins

import (
	"context"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins/internal/threadcpu"
)

// CallCPU is what one measured call spent, for a caller that must tell a
// guest that needs more than its deadline on an input (the input's fault)
// from one that was not given the CPU to finish (the host's load): both
// end in ClassDeadline. A call runs on the calling goroutine, so a
// measured call locks it to its OS thread while the guest runs and reads
// the thread's CPU clock around it; a thread that waited (descheduled, or
// in a blocking host function) is not charged for the wait.
type CallCPU struct {
	// CPU is the CPU time the thread spent in the guest call: from entering
	// the guest to leaving it, the wait for an instance excluded.
	CPU time.Duration
	// Budget is the deadline the guest ran under, from its entry: about
	// Limit, or less when the caller's context ends first.
	Budget time.Duration
	// Limit is the module's call timeout (its CallTimeout, or the least
	// deadline while the module is verified before it serves).
	Limit time.Duration
	// Measured is false when the call never entered the guest, when the
	// guest is not a CPUMeasurer, or when the platform has no per-thread
	// CPU clock (Linux has one).
	Measured bool
}

// CPUMeasurer is implemented by a Guest flavour that can measure a call's
// CPU time (both do: *Module and *extism.Module). A measured call costs
// two clock reads and a thread lock; the other calls pay nothing for it.
type CPUMeasurer interface {
	// ExchangeMeasured is Exchange, with the call's CPU time and budget
	// written to cpu (reset first).
	ExchangeMeasured(ctx context.Context, e abi.Export, req, resp abi.Message, cpu *CallCPU) error
}

// The native flavour measures.
var _ CPUMeasurer = (*Module)(nil)

// CodecDecodeMeasured is CodecDecode measuring the call into cpu. A guest
// that is not a CPUMeasurer is called unmeasured (cpu.Measured false).
func CodecDecodeMeasured(ctx context.Context, g Guest, req *abi.CodecDecodeRequest, cpu *CallCPU) (*abi.CodecDecodeResponse, error) {
	cm, ok := g.(CPUMeasurer)
	if !ok {
		*cpu = CallCPU{}
		return CodecDecode(ctx, g, req)
	}
	var resp abi.CodecDecodeResponse
	if err := cm.ExchangeMeasured(ctx, abi.ExportCodecDecode, req, &resp, cpu); err != nil {
		return nil, err
	}
	return &resp, nil
}

// runMeasured is run with the calling goroutine locked to its thread and
// the thread's CPU time over the call, and the budget left until deadline
// (watchdog clock), and the module's call timeout, limit, written to cpu.
func (m *Module) runMeasured(inst *instance, e abi.Export, in []byte, deadline int64, limit time.Duration, cpu *CallCPU) ([]byte, error) {
	var meter threadcpu.Meter
	meter.Start()
	cpu.Budget, cpu.Limit = max(time.Duration(deadline-m.eng.wd.now()), 0), limit
	frame, err := m.run(inst, e, in)
	cpu.CPU, cpu.Measured = meter.Stop()
	return frame, err
}

// CallCPUSupported reports whether this platform has the per-thread CPU
// clock measured calls read (Linux has). Without it no call is Measured.
func CallCPUSupported() bool { return threadcpu.Supported() }
