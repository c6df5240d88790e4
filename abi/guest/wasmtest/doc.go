// Package wasmtest holds tests of the SDK (abi/guest) as guests run it:
// built for wasip1 as reactors and called through the host's engine
// (plugins), where the properties of the wasm glue show — the Go runtime
// running only inside an export, under the host's virtual clock and memory
// cap. It has no code of its own: the tests are its _test files, the guests
// under testdata/. They live apart from abi/guest so that its own tests stay
// native and quick (make test-short leaves out anything linking the engine).
package wasmtest
