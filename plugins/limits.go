package plugins

import (
	"errors"
	"fmt"
	"time"

	"github.com/caphost/caphost/abi"
)

// Limits bound one module. Zero fields take the engine's defaults; every
// field must stay within the engine's hard caps or Load fails.
type Limits struct {
	// MemoryPages caps linear memory, in 64 KiB wasm pages.
	MemoryPages uint32
	// CallTimeout is the deadline of one call (the caller's context may be shorter).
	CallTimeout time.Duration
	// InitTimeout bounds instantiation plus _initialize.
	InitTimeout time.Duration
	// MaxInputBytes caps a request.
	MaxInputBytes int
	// MaxOutputBytes caps a response frame.
	MaxOutputBytes int
	// MaxHostCalls caps host-function calls within one invocation.
	MaxHostCalls int
	// PoolSize caps live instances (and so concurrent calls) of the module.
	PoolSize int
	// RecycleAfter replaces an instance after this many calls, bounding the
	// damage of slow leaks inside a guest.
	RecycleAfter uint64
	// MaxStackBytes caps the Wasm call stack of one call, which the engine
	// allocates on the host's heap outside linear memory: a call that needs
	// more fails (ClassTrap, "stack overflow"). A call holds at most this
	// much, plus half of it while the stack is copied to its last size; each
	// export of an instance keeps the stack its calls grew for the next one.
	MaxStackBytes int
	// Grants are the caphost_v1 imports the module may link (see Grants).
	// Unlike the fields above it is never taken from the defaults: zero
	// grants nothing.
	Grants Grants
}

// VerifyCallTimeout is the least per-call deadline while a module is
// checked before it serves (describe, self-test vectors, conformance).
const VerifyCallTimeout = time.Second

// DefaultLimits are applied to zero fields when the engine config gives none.
func DefaultLimits() Limits {
	return Limits{
		MemoryPages:    512, // 32 MiB; a Go guest starts near 3 MiB
		CallTimeout:    100 * time.Millisecond,
		InitTimeout:    5 * time.Second,
		MaxInputBytes:  256 << 10,
		MaxOutputBytes: 256 << 10,
		MaxHostCalls:   64,
		PoolSize:       4,
		RecycleAfter:   1_000_000,
		// A Go guest's recursion about 30,000 deep fits (measured:
		// TestGoRecursionWithinTheStackLimit).
		MaxStackBytes: 1 << 20,
	}
}

// HardCaps are the engine's absolute ceilings when the engine config gives none.
func HardCaps() Limits {
	return Limits{
		MemoryPages:    4096, // 256 MiB
		CallTimeout:    10 * time.Second,
		InitTimeout:    30 * time.Second,
		MaxInputBytes:  abi.MaxMessageBytes,
		MaxOutputBytes: abi.MaxMessageBytes,
		MaxHostCalls:   10_000,
		PoolSize:       256,
		RecycleAfter:   1 << 40,
		MaxStackBytes:  64 << 20,
	}
}

// ErrLimitExceedsCap is matched (errors.Is) when a module's limits exceed the hard caps.
var ErrLimitExceedsCap = errors.New("plugins: limit exceeds hard cap")

func (l Limits) withDefaults(d Limits) Limits {
	if l.MemoryPages == 0 {
		l.MemoryPages = d.MemoryPages
	}
	if l.CallTimeout == 0 {
		l.CallTimeout = d.CallTimeout
	}
	if l.InitTimeout == 0 {
		l.InitTimeout = d.InitTimeout
	}
	if l.MaxInputBytes == 0 {
		l.MaxInputBytes = d.MaxInputBytes
	}
	if l.MaxOutputBytes == 0 {
		l.MaxOutputBytes = d.MaxOutputBytes
	}
	if l.MaxHostCalls == 0 {
		l.MaxHostCalls = d.MaxHostCalls
	}
	if l.PoolSize == 0 {
		l.PoolSize = d.PoolSize
	}
	if l.RecycleAfter == 0 {
		l.RecycleAfter = d.RecycleAfter
	}
	if l.MaxStackBytes == 0 {
		l.MaxStackBytes = d.MaxStackBytes
	}
	return l
}

// check reports every field outside (0, cap].
func (l Limits) check(c Limits) error {
	var errs []error
	over := func(name string, v, max int64) {
		if v <= 0 || v > max {
			errs = append(errs, fmt.Errorf("%w: %s=%d not in 1..%d", ErrLimitExceedsCap, name, v, max))
		}
	}
	over("memory-pages", int64(l.MemoryPages), int64(c.MemoryPages))
	over("call-timeout", int64(l.CallTimeout), int64(c.CallTimeout))
	over("init-timeout", int64(l.InitTimeout), int64(c.InitTimeout))
	over("max-input-bytes", int64(l.MaxInputBytes), int64(c.MaxInputBytes))
	over("max-output-bytes", int64(l.MaxOutputBytes), int64(c.MaxOutputBytes))
	over("max-host-calls", int64(l.MaxHostCalls), int64(c.MaxHostCalls))
	over("pool-size", int64(l.PoolSize), int64(c.PoolSize))
	over("max-stack-bytes", int64(l.MaxStackBytes), int64(c.MaxStackBytes))
	if l.RecycleAfter == 0 || l.RecycleAfter > c.RecycleAfter {
		errs = append(errs, fmt.Errorf("%w: recycle-after=%d not in 1..%d", ErrLimitExceedsCap, l.RecycleAfter, c.RecycleAfter))
	}
	return errors.Join(errs...)
}

// Resolve returns l with zero fields taken from defaults (whose own zero
// fields come from DefaultLimits), checked against caps (zero fields from
// HardCaps). It is how every flavour (this engine, plugins/extism) applies
// the same limits; the error matches ErrLimitExceedsCap.
func (l Limits) Resolve(defaults, caps Limits) (Limits, error) {
	caps = caps.withDefaults(HardCaps())
	l = l.withDefaults(defaults.withDefaults(DefaultLimits()))
	if err := l.check(caps); err != nil {
		return Limits{}, err
	}
	return l, nil
}
