package plugins

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEmbedderGetsThePatchedEngine builds a program the way a service that embeds caphost does:
// in a throwaway module of its own that requires github.com/caphost/caphost. Its go.mod says
//
//	require github.com/caphost/caphost v0.0.0
//	replace github.com/caphost/caphost => <this repository>
//
// The replace lives in the embedder's module, which is how a local test stands in for a published
// version: a replace in caphost's own go.mod would be ignored there, exactly as for a real
// embedder. The program prints EngineVersion and loads and calls a native guest (the echo guest
// TestMain built), and the test checks that
//
//   - the version carries the fork's -caphost. suffix, so the embedder compiled third_party/wazero;
//   - the guest call works;
//   - `go list -m all` of the embedder lists neither github.com/tetratelabs/wazero nor
//     github.com/extism/go-sdk: no unpatched engine is even in its module graph;
//   - `go build github.com/caphost/caphost/cmd/caphost` succeeds there, the stand-in for
//     `go install github.com/caphost/caphost/cmd/caphost@version` (refused if caphost's go.mod had
//     a replace, and only then).
//
// On the old layout (go.mod: replace github.com/tetratelabs/wazero => ./third_party/wazero) this
// fails: the embedder ignores that replace, resolves upstream github.com/tetratelabs/wazero v1.12.0,
// and plugins does not compile against it (upstream has no wazero.Version, so no EngineVersion, nor
// RuntimeConfig.WithCallStackLimitBytes); and `go list -m all` would list upstream wazero.
//
// It lives in package plugins, not in a package of its own, because it reuses the echo guest that
// TestMain builds for the engine tests (no prerequisite beyond the toolchain), and because a test
// binary that links the engine stays out of `make test-short` by itself (SHORT_PKGS) while this
// one takes tens of seconds. It runs offline: GOFLAGS=-mod=mod (the embedder's go.mod gets
// caphost's requirements added from go.sum), GOPROXY=off, GOSUMDB=off, GOWORK=off, the shared
// module and build caches. A missing module fails with how to fetch it; the test never skips.
func TestEmbedderGetsThePatchedEngine(t *testing.T) {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go toolchain must be on PATH to build the embedder module")
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	goLine := regexp.MustCompile(`(?m)^go [0-9.]+$`).Find(gomod)
	require.NotNil(t, goLine, "no go directive in %s/go.mod", root)
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	echo := th.wasm["echo"]
	require.NotEmpty(t, echo, "TestMain did not build testdata/guests/echo")

	dir := t.TempDir()
	write := func(name string, data []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	write("go.mod", []byte("module example.com/embedder\n\n"+string(goLine)+"\n\n"+
		"require github.com/caphost/caphost v0.0.0\n\n"+
		"replace github.com/caphost/caphost => "+root+"\n"))
	write("go.sum", gosum)
	write("echo.wasm", echo)
	write("main.go", []byte(embedderMain))

	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		require.NoError(t, err, "%s %s in the embedder module:\n%s\n"+
			"(offline: a module missing from the module cache must be fetched once with network access, "+
			"`go mod download` in %s)", name, strings.Join(args, " "), out.String(), root)
		return out.String()
	}

	run(goBin, "build", "-o", "embedder", ".")
	out := strings.Split(strings.TrimSpace(run(filepath.Join(dir, "embedder"), "echo.wasm")), "\n")
	require.Len(t, out, 2, "embedder output: %q", out)
	assert.Contains(t, out[0], "-caphost.", "the embedder does not run caphost's patched wazero")
	assert.Equal(t, EngineVersion, out[0])
	assert.Contains(t, out[1], "embedded call", "the guest call through the embedder")

	mods := run(goBin, "list", "-m", "all")
	for _, m := range strings.Split(mods, "\n") {
		path, _, _ := strings.Cut(m, " ")
		assert.NotEqual(t, "github.com/tetratelabs/wazero", path, "upstream wazero in the embedder's module graph")
		assert.NotEqual(t, "github.com/extism/go-sdk", path, "the upstream Extism SDK in the embedder's module graph")
	}
	assert.Contains(t, mods, "github.com/caphost/caphost v0.0.0 => "+root)

	run(goBin, "build", "-o", filepath.Join(dir, "caphost"), "github.com/caphost/caphost/cmd/caphost")
}

// embedderMain is the embedder's program: the engine version, then one call of the echo guest.
const embedderMain = `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

func main() {
	fmt.Println(plugins.EngineVersion)
	if err := call(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func call(path string) error {
	ctx := context.Background()
	wasm, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	e, err := plugins.NewEngine(plugins.Config{})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	m, err := e.Load(ctx, "echo", wasm, plugins.Limits{})
	if err != nil {
		return err
	}
	req := (&abi.CodecEncodeRequest{Schema: "echo", Value: []byte("embedded call")}).AppendTo(nil)
	out, err := m.Call(ctx, abi.ExportCodecEncode, req, nil)
	if err != nil {
		return err
	}
	fmt.Printf("%q\n", out)
	return nil
}
`
