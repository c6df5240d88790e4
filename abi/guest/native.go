//go:build !wasip1

package guest

import "github.com/caphost/caphost/abi"

// Outside wasm there is no host: these variants exist so guest packages build
// and unit-test natively (go vet ./..., Dispatcher tests). They do nothing.

// Register is a no-op outside wasm; tests use NewDispatcher directly.
func Register(m *Module) {}

// Log is a no-op outside wasm.
func Log(level abi.LogLevel, msg string) {}

// Count is a no-op outside wasm.
func Count(event string) {}
