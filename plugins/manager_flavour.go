package plugins

import (
	"context"
	"encoding/binary"
	"strings"
)

// Flavour names how a guest module is built, and so which engine loads it.
type Flavour string

// Flavours of guest module.
const (
	// FlavourNative: ABI v1 on this package's engine (the fast path).
	FlavourNative Flavour = "native"
	// FlavourExtism: ABI v1 over Extism's calling convention, loaded by
	// package plugins/extism.
	FlavourExtism Flavour = "extism"
)

// ExtismImportPrefix starts the module name of every Extism host import
// (extism:host/env is Extism's kernel, extism:host/user its user
// functions). Every Extism PDK module imports the kernel; the native
// engine refuses any such import. It is the one rule both DetectFlavour
// and plugins/extism.IsModule apply.
const ExtismImportPrefix = "extism:host/"

// DetectFlavour tells the flavours apart from a module's bytes: a module
// importing a function from ExtismImportPrefix is FlavourExtism, any other
// (including bytes that are not a wasm module at all) FlavourNative. It
// only reads the import section, without compiling: it picks an engine,
// and that engine then vets every import, so a hostile module gains
// nothing by looking like the other flavour.
func DetectFlavour(wasm []byte) Flavour {
	if importsExtism(wasm) {
		return FlavourExtism
	}
	return FlavourNative
}

// importsExtism walks the top-level sections to the import section and
// reports whether a function import's module name starts with
// ExtismImportPrefix (Extism's kernel and user functions are functions).
// Any malformation ends the walk with what was found so far.
func importsExtism(wasm []byte) bool {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return false
	}
	for off := 8; off < len(wasm); {
		id := wasm[off]
		size, n := binary.Uvarint(wasm[off+1:])
		if n <= 0 || size > uint64(len(wasm)-off-1-n) {
			return false
		}
		body := wasm[off+1+n : off+1+n+int(size)]
		off += 1 + n + int(size)
		if id == 2 { // the import section; there is at most one
			return importsWithPrefix(body, ExtismImportPrefix)
		}
	}
	return false
}

// importsWithPrefix scans an import section's entries.
func importsWithPrefix(b []byte, prefix string) bool {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return false
	}
	b = b[n:]
	name := func() (string, bool) {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(l)])
		b = b[k+int(l):]
		return s, true
	}
	skipUvarint := func() bool {
		_, k := binary.Uvarint(b)
		if k <= 0 {
			return false
		}
		b = b[k:]
		return true
	}
	skipByte := func() (byte, bool) {
		if len(b) == 0 {
			return 0, false
		}
		c := b[0]
		b = b[1:]
		return c, true
	}
	limits := func() bool {
		flags, ok := skipByte()
		if !ok || !skipUvarint() {
			return false
		}
		if flags&1 != 0 {
			return skipUvarint()
		}
		return true
	}
	for range count {
		mod, ok := name()
		if !ok {
			return false
		}
		if _, ok := name(); !ok {
			return false
		}
		kind, ok := skipByte()
		if !ok {
			return false
		}
		switch kind {
		case 0x00: // function: type index
			if strings.HasPrefix(mod, prefix) {
				return true
			}
			ok = skipUvarint()
		case 0x01: // table: reference type, limits
			_, ok = skipByte()
			ok = ok && limits()
		case 0x02: // memory: limits
			ok = limits()
		case 0x03: // global: value type, mutability
			_, ok = skipByte()
			if ok {
				_, ok = skipByte()
			}
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return false
}

// Loader compiles, vets and starts guest modules of one flavour. The
// native *Engine is one; plugins/extism's *Engine is the other. The
// Manager picks the loader by DetectFlavour.
type Loader interface {
	LoadGuest(ctx context.Context, name string, wasm []byte, lim Limits) (LoadedGuest, error)
}

// LoadedGuest is a started module of either flavour as the Manager owns
// it: a Guest it can check, park and close.
type LoadedGuest interface {
	Guest
	// Flavour is the module's flavour.
	Flavour() Flavour
	// Verifying raises the per-call deadline to at least
	// VerifyCallTimeout while on: the Manager's checks before a module
	// serves (self-test vectors, conformance) must not fail a correct
	// module on a loaded machine, and a looping guest is still stopped.
	Verifying(on bool)
	// Trim closes the idle instances; the next call starts a new one. A
	// generation kept for rollback is trimmed once it has drained, so
	// what it keeps is its compiled code.
	Trim()
	// Close stops the module (see (*Module).Close).
	Close(ctx context.Context) error
}

// The native flavour is a LoadedGuest.
var _ LoadedGuest = (*Module)(nil)

// LoadGuest implements Loader: Load, as a LoadedGuest.
func (e *Engine) LoadGuest(ctx context.Context, name string, wasm []byte, lim Limits) (LoadedGuest, error) {
	m, err := e.Load(ctx, name, wasm, lim)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Flavour implements LoadedGuest.
func (m *Module) Flavour() Flavour { return FlavourNative }

// Verifying implements LoadedGuest.
func (m *Module) Verifying(on bool) { m.verifying.Store(on) }

// Trim implements LoadedGuest.
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
