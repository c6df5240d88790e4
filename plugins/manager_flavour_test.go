package plugins

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// moduleImporting is a minimal valid module importing one function () -> ()
// from each of mods, after a custom section (sections may come in any
// order around custom ones).
func moduleImporting(mods ...string) []byte {
	vec := func(b []byte, s string) []byte {
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	}
	section := func(b []byte, id byte, body []byte) []byte {
		b = append(b, id)
		b = binary.AppendUvarint(b, uint64(len(body)))
		return append(b, body...)
	}
	out := []byte("\x00asm\x01\x00\x00\x00")
	out = section(out, 0, vec(nil, "caphost.note"))
	out = section(out, 1, []byte{1, 0x60, 0, 0})
	imports := binary.AppendUvarint(nil, uint64(len(mods)))
	for _, m := range mods {
		imports = vec(imports, m)
		imports = vec(imports, "f")
		imports = append(imports, 0x00, 0x00) // function of type 0
	}
	return section(out, 2, imports)
}

func TestDetectFlavour(t *testing.T) {
	for name, wasm := range th.wasm {
		assert.Equal(t, FlavourNative, DetectFlavour(wasm), name)
	}
	assert.Equal(t, FlavourExtism, DetectFlavour(moduleImporting("wasi_snapshot_preview1", "extism:host/env")))
	assert.Equal(t, FlavourExtism, DetectFlavour(moduleImporting("extism:host/user")))
	assert.Equal(t, FlavourNative, DetectFlavour(moduleImporting("wasi_snapshot_preview1", "caphost_v1", "extism:hostile")))
	for _, junk := range [][]byte{nil, []byte("\x00asm"), []byte("not wasm at all"), moduleImporting("extism:host/env")[:20]} {
		assert.Equal(t, FlavourNative, DetectFlavour(junk), "%q", junk)
	}
	// Each built module agrees with the decoded shape.
	for _, wasm := range [][]byte{moduleImporting("extism:host/env"), moduleImporting("env")} {
		assert.Equal(t, shapeFlavour(t, wasm), DetectFlavour(wasm))
	}
}

// shapeFlavour is DetectFlavour's rule on the imports wazero decodes.
func shapeFlavour(t testing.TB, wasm []byte) Flavour {
	s, err := Shape(context.Background(), wasm)
	require.NoError(t, err)
	for _, imp := range s.Imports {
		if strings.HasPrefix(imp, ExtismImportPrefix) {
			return FlavourExtism
		}
	}
	return FlavourNative
}

// FuzzDetectFlavour: module bytes are untrusted. The scan never panics and,
// for every module wazero decodes, agrees with the decoded imports.
func FuzzDetectFlavour(f *testing.F) {
	f.Add(moduleImporting("extism:host/env"))
	f.Add(moduleImporting("wasi_snapshot_preview1", "extism:host/user"))
	f.Add(moduleImporting("env"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x02\x05\x01\x00\x00\x02\x00"))
	f.Fuzz(func(t *testing.T, wasm []byte) {
		got := DetectFlavour(wasm)
		if !plausibleCounts(wasm) {
			return // wazero would preallocate what the counts claim
		}
		s, err := Shape(context.Background(), wasm)
		if err != nil {
			return // not a module: the engine refuses it whatever the flavour
		}
		want := FlavourNative
		for _, imp := range s.Imports {
			if strings.HasPrefix(imp, ExtismImportPrefix) {
				want = FlavourExtism
			}
		}
		if got != want {
			t.Fatalf("DetectFlavour = %s, decoded imports %v", got, s.Imports)
		}
	})
}

// plausibleCounts reports whether every known section's leading vector
// count fits its section (an entry takes at least a byte). wazero's
// decoder allocates what a count claims before reading the entries, so
// the oracle (Shape) is only asked about modules whose counts are
// plausible; DetectFlavour itself allocates nothing.
func plausibleCounts(wasm []byte) bool {
	if len(wasm) < 8 {
		return true
	}
	for off := 8; off < len(wasm); {
		id := wasm[off]
		size, n := binary.Uvarint(wasm[off+1:])
		if n <= 0 || size > uint64(len(wasm)-off-1-n) {
			return false // a broken layout: wazero may read counts past it
		}
		body := wasm[off+1+n : off+1+n+int(size)]
		off += 1 + n + int(size)
		if id == 0 || id == 8 || id > 12 {
			continue // custom, start (no vector) or unknown sections
		}
		if count, k := binary.Uvarint(body); k > 0 && count > uint64(len(body)) {
			return false
		}
	}
	return true
}
