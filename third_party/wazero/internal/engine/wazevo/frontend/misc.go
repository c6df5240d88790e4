package frontend

import (
	"github.com/caphost/caphost/third_party/wazero/internal/engine/wazevo/ssa"
	"github.com/caphost/caphost/third_party/wazero/internal/wasm"
)

func FunctionIndexToFuncRef(idx wasm.Index) ssa.FuncRef {
	return ssa.FuncRef(idx)
}
