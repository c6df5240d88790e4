package plugins

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/caphost/caphost/third_party/wazero"
	"github.com/caphost/caphost/third_party/wazero/api"

	"github.com/caphost/caphost/plugins/internal/guestio"
)

// ModuleShape lists a module's function imports and exports with their
// signatures, e.g. "caphost_v1.log(i32,i32,i32)" and "caphost_alloc(i32)->i32".
type ModuleShape struct {
	Imports []string
	Exports []string
}

// Shape decodes wasm's imports and exports without running any of its code.
// It uses wazero's interpreter, whose compilation is a cheap decode, so
// inspecting a module costs nothing like loading it.
func Shape(ctx context.Context, wasm []byte) (ModuleShape, error) {
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(context.WithoutCancel(ctx))
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return ModuleShape{}, &GuestError{Class: ClassInvalidModule, Detail: "compile", Err: err}
	}
	var s ModuleShape
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		s.Imports = append(s.Imports, guestio.Sanitize([]byte(mod+"."+name), 128)+signature(f))
	}
	for _, m := range cm.ImportedMemories() {
		mod, name, _ := m.Import()
		s.Imports = append(s.Imports, "memory "+guestio.Sanitize([]byte(mod+"."+name), 128))
	}
	for name, f := range cm.ExportedFunctions() {
		s.Exports = append(s.Exports, guestio.Sanitize([]byte(name), 128)+signature(f))
	}
	for name, m := range cm.ExportedMemories() {
		s.Exports = append(s.Exports, fmt.Sprintf("memory %s (min %d pages)", guestio.Sanitize([]byte(name), 128), m.Min()))
	}
	// A module may import one function twice (Go's linker does for fd_write).
	sort.Strings(s.Imports)
	s.Imports = slices.Compact(s.Imports)
	sort.Strings(s.Exports)
	return s, nil
}

func signature(f api.FunctionDefinition) string {
	names := func(ts []api.ValueType) string {
		out := make([]string, len(ts))
		for i, t := range ts {
			out[i] = api.ValueTypeName(t)
		}
		return strings.Join(out, ",")
	}
	s := "(" + names(f.ParamTypes()) + ")"
	if r := f.ResultTypes(); len(r) > 0 {
		s += "->" + names(r)
	}
	return s
}
