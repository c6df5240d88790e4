package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// listedPackage is the subset of `go list -json` output the rules need.
type listedPackage struct {
	ImportPath   string
	Dir          string
	Standard     bool
	DepOnly      bool
	Module       *struct{ Path string }
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// goList runs `go list -e -deps -json` in dir with extra environment and
// returns every package, keyed by import path. -e keeps packages that fail
// to load (another engineer may be mid-edit) so their import lists are still
// checked instead of aborting the whole test.
func goList(t *testing.T, dir string, env []string, patterns ...string) map[string]listedPackage {
	t.Helper()
	args := append([]string{"list", "-e", "-deps", "-test=false", "-json"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "go list failed (is the go toolchain on PATH?): %s", stderr.String())
	pkgs := map[string]listedPackage{}
	dec := json.NewDecoder(&stdout)
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// moduleRoot returns the directory of the main module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	gomod := strings.TrimSpace(string(out))
	require.NotEmpty(t, gomod)
	require.NotEqual(t, os.DevNull, gomod, "not inside a module")
	return filepath.Dir(gomod)
}

// importViolation is one forbidden edge.
type importViolation struct {
	From, To, Rule string
	Test           bool // the edge comes from a _test.go file
}

func (v importViolation) String() string {
	kind := "imports"
	if v.Test {
		kind = "imports (in tests)"
	}
	return fmt.Sprintf("%s %s %s — %s", v.From, kind, v.To, v.Rule)
}

type class struct {
	name     string
	prefixes []string
}

func (c class) has(path string) bool {
	for _, p := range c.prefixes {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

func thirdParty() (goRedis, wasm, koanfProm, yaml, cobra class) {
	goRedis = class{"go-redis", []string{"github.com/redis/go-redis"}}
	// The engine is caphost's patched wazero and the Extism SDK on it, both vendored under
	// third_party (see third_party/wazero/CAPHOST.md); upstream's paths are forbidden outright below.
	wasm = class{"wazero/extism/go-plugin", []string{"github.com/caphost/caphost/third_party/wazero", "github.com/caphost/caphost/third_party/extism", "github.com/extism", "github.com/hashicorp/go-plugin"}}
	koanfProm = class{"koanf/client_golang", []string{"github.com/knadh/koanf", "github.com/prometheus/client_golang"}}
	yaml = class{"yaml", []string{"go.yaml.in/yaml", "gopkg.in/yaml.v3", "gopkg.in/yaml.v2"}}
	cobra = class{"cobra", []string{"github.com/spf13/cobra", "github.com/spf13/pflag"}}
	return
}

// under reports whether rel (a module-relative package path) is dir or
// below it.
func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

// checkImports applies the DESIGN §2 table to every package of module
// modPath found in pkgs. It is a pure function so the self-check can feed it
// a synthetic module.
func checkImports(modPath string, pkgs map[string]listedPackage) []importViolation {
	goRedis, wasm, koanfProm, yaml, cobra := thirdParty()
	extismPDK := class{"extism go-pdk", []string{"github.com/extism/go-pdk"}}
	// Upstream wazero and the Extism SDK would be a second, unpatched engine next to the fork.
	envoyGRPC := class{"grpc/go-control-plane", []string{"google.golang.org/grpc", "github.com/envoyproxy/go-control-plane"}}
	upstreamEngine := class{"upstream wazero/extism go-sdk", []string{"github.com/tetratelabs/wazero", "github.com/extism/go-sdk"}}
	isStd := func(path string) bool {
		if p, ok := pkgs[path]; ok && p.Standard {
			return true
		}
		// Unresolvable imports still have a path; stdlib paths have no dot
		// in their first element.
		first, _, _ := strings.Cut(path, "/")
		_, listed := pkgs[path]
		return !listed && !strings.Contains(first, ".") && path != "C"
	}
	relOf := func(path string) (string, bool) {
		if path == modPath {
			return ".", true
		}
		if strings.HasPrefix(path, modPath+"/") {
			return strings.TrimPrefix(path, modPath+"/"), true
		}
		return "", false
	}

	var out []importViolation
	paths := make([]string, 0, len(pkgs))
	for p := range pkgs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, from := range paths {
		p := pkgs[from]
		fromRel, ours := relOf(from)
		if !ours || p.Standard || under(fromRel, "third_party") {
			// third_party holds upstream code (the wazero fork, the Extism SDK) under caphost's
			// path: it imports itself, and the table does not apply to it.
			continue
		}
		check := func(to string, test bool) {
			add := func(rule string) { out = append(out, importViolation{From: from, To: to, Rule: rule, Test: test}) }
			if to == "C" {
				return
			}
			std := isStd(to)
			toRel, toOurs := relOf(to)

			// Rules that hold for tests too.
			if upstreamEngine.has(to) {
				add("import the patched engine under third_party/, never upstream wazero or the Extism SDK")
			}
			if toOurs && under(toRel, "cmd") && !under(fromRel, "cmd/caphost") {
				add("nothing imports cmd/...")
			}
			if toOurs && under(toRel, "cmd/caphost") && under(fromRel, "cmd") && !under(fromRel, "cmd/caphost") {
				add("nothing imports cmd/...")
			}
			// The Envoy rate-limit service is the one gRPC server of the
			// module: only its package speaks gRPC and Envoy's protos (its
			// tests, and serve's tests that drive it, use the client too).
			// go-plugin's transports speak gRPC as well (go-plugin's wire):
			// plugins/transport may import gRPC, never go-control-plane.
			goPluginGRPC := under(fromRel, "plugins/transport") && (to == "google.golang.org/grpc" || strings.HasPrefix(to, "google.golang.org/grpc/"))
			if envoyGRPC.has(to) && fromRel != "host/ratelimit/envoyrls" && !goPluginGRPC && !(test && under(fromRel, "cmd/caphost")) {
				add("only host/ratelimit/envoyrls may import gRPC and go-control-plane")
			}
			if test {
				// Tests may use test harnesses (internal/redistest hands out
				// go-redis clients), but the pure layers never need Redis.
				if goRedis.has(to) && (under(fromRel, "abi") || under(fromRel, "policy") || under(fromRel, "plugins") || under(fromRel, "guests")) {
					add("abi, policy, plugins and guests never talk to Redis, not even in tests")
				}
				return
			}

			// Third-party confinement (production code).
			if goRedis.has(to) && !under(fromRel, "runtime") && !under(fromRel, "internal/redistest") {
				add("only runtime/... (and internal/redistest) may import go-redis")
			}
			// An Extism-flavour guest (guests/<name>-extism) is written with
			// the Extism PDK, which is its glue the way abi/guest is the
			// native guests' glue: that one import is allowed to it alone.
			extismGuest := under(fromRel, "guests") && strings.HasSuffix(fromRel, "-extism") && extismPDK.has(to)
			if wasm.has(to) && !under(fromRel, "plugins") && !extismGuest {
				add("only plugins/... may import wazero, extism, go-plugin")
			}
			if koanfProm.has(to) && !under(fromRel, "host") {
				add("only host/... may import koanf and client_golang")
			}
			if toOurs && under(toRel, "internal") && !under(fromRel, "internal") && !strings.Contains(toRel, "/internal") {
				add("production code must not import test harnesses under internal/")
			}

			// Per-layer tables.
			switch {
			case under(fromRel, "abi/guest"):
				if !std && !(toOurs && under(toRel, "abi")) {
					add("abi/guest imports only abi and the standard library")
				}
			case under(fromRel, "abi"):
				if !std && !(toOurs && under(toRel, "abi") && !under(toRel, "abi/guest")) {
					add("abi imports the standard library only")
				}
			case under(fromRel, "policy"):
				ok := std || yaml.has(to) || (toOurs && (under(toRel, "policy") || (under(toRel, "abi") && !under(toRel, "abi/guest"))))
				if !ok {
					add("policy imports only abi, the standard library and yaml")
				}
			case under(fromRel, "runtime"):
				if toOurs && (under(toRel, "host") || under(toRel, "plugins") || under(toRel, "guests")) {
					add("runtime must not import host, plugins or guests")
				}
			case under(fromRel, "plugins"):
				if toOurs && (under(toRel, "runtime") || under(toRel, "host") || under(toRel, "guests")) {
					add("plugins must not import runtime, host or guests")
				}
				if goRedis.has(to) || koanfProm.has(to) {
					add("plugins never import go-redis, koanf or client_golang")
				}
			case under(fromRel, "guests"):
				if !std && !extismGuest && !(toOurs && (under(toRel, "abi") || under(toRel, "guests"))) {
					add("guests import only abi/guest, abi and the standard library (and -extism guests the Extism PDK)")
				}
			case under(fromRel, "host/fence"):
				// The protected side of fenced leases: a service that owns the
				// protected resource imports it without pulling in the host,
				// go-redis or any other caphost package.
				if !std {
					add("host/fence imports the standard library only (database/sql included)")
				}
			case under(fromRel, "cmd/caphost"):
				// policy is the shared vocabulary (roles, lanes, validation
				// problems) the CLI prints, and plugins/trust is engine-free
				// signing of files (`caphost guest sign|verify`); what cmd must
				// never do is reach past host into the runtime or the engine.
				if !std && !cobra.has(to) && !(toOurs && (under(toRel, "host") || toRel == "policy" || toRel == "plugins/trust" || under(toRel, "cmd/caphost"))) {
					add("cmd/caphost imports only host/..., policy, plugins/trust, cobra and the standard library")
				}
			}
		}
		for _, to := range p.Imports {
			check(to, false)
		}
		for _, to := range append(append([]string(nil), p.TestImports...), p.XTestImports...) {
			check(to, true)
		}
	}
	return out
}

func reportImports(t *testing.T, vs []importViolation) {
	t.Helper()
	if len(vs) == 0 {
		return
	}
	var b strings.Builder
	for _, v := range vs {
		b.WriteString("\n  " + v.String())
	}
	t.Errorf("DESIGN §2 import table violated (%d edges):%s", len(vs), b.String())
}

// TestImportTable checks the real module on the host platform and, for the
// packages that are built as Wasm, on GOOS=wasip1 too (their files may be
// behind build constraints).
func TestImportTable(t *testing.T) {
	root := moduleRoot(t)
	const mod = "github.com/caphost/caphost"
	pkgs := goList(t, root, nil, "./...")
	_, ok := pkgs[mod+"/internal/archtest"]
	require.True(t, ok, "go list did not see this package; wrong module root %s", root)
	reportImports(t, checkImports(mod, pkgs))

	// Packages that do not exist yet just produce no rows; `go list` only
	// warns about a pattern that matches nothing.
	var wasmPatterns []string
	for _, d := range []string{"abi", "guests"} {
		if _, err := os.Stat(filepath.Join(root, d)); err == nil {
			wasmPatterns = append(wasmPatterns, "./"+d+"/...")
		}
	}
	if len(wasmPatterns) > 0 {
		wasm := goList(t, root, []string{"GOOS=wasip1", "GOARCH=wasm"}, wasmPatterns...)
		reportImports(t, checkImports(mod, wasm))
	}
}

// TestImportTableCatchesViolations runs the same rules over a synthetic
// module under testdata/ that breaks each of them, so the test above is
// known to be able to fail.
func TestImportTableCatchesViolations(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("testdata", "violations"))
	require.NoError(t, err)
	// The synthetic module declares the same path as caphost but requires
	// nothing: third-party imports stay unresolved, which -e tolerates while
	// keeping their paths. GOFLAGS/GOPROXY keep go list from touching the
	// network or rewriting go.mod.
	env := []string{"GOWORK=off", "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOTOOLCHAIN=local"}
	pkgs := goList(t, dir, env, "./...")
	got := map[string]bool{}
	for _, v := range checkImports("github.com/caphost/caphost", pkgs) {
		t.Log(v.String())
		got[strings.TrimPrefix(v.From, "github.com/caphost/caphost/")+" -> "+strings.TrimPrefix(v.To, "github.com/caphost/caphost/")] = true
	}
	want := []string{
		"abi -> policy",
		"abi/guest -> runtime/keys",
		"policy -> github.com/redis/go-redis/v9",
		"policy -> runtime/keys",
		"runtime/keys -> host",
		"runtime/keys -> plugins",
		"plugins -> runtime/keys",
		"plugins -> github.com/redis/go-redis/v9",
		"host -> cmd/caphost",
		"host -> third_party/wazero",
		"plugins -> github.com/tetratelabs/wazero",
		"guests/bad -> runtime/keys",
		"cmd/caphost -> runtime/keys",
		"runtime/keys -> github.com/knadh/koanf/v2",
		"host -> internal/redistest",
		"host/fence -> host",
		"host/fence -> github.com/knadh/koanf/v2", // host/... may, the leaf fence may not
		"abi -> github.com/redis/go-redis/v9",     // from abi's test file
	}
	for _, w := range want {
		require.True(t, got[w], "self-check: the rules missed %q", w)
	}
	require.Len(t, got, len(want), "self-check: unexpected extra violations: %v", got)
}

// TestExtismGuestRule: only guests whose directory ends in -extism may
// import the Extism PDK, and nothing else third-party.
func TestExtismGuestRule(t *testing.T) {
	const mod = "github.com/caphost/caphost"
	pkgs := map[string]listedPackage{
		mod + "/guests/rate-extism": {ImportPath: mod + "/guests/rate-extism", Imports: []string{"github.com/extism/go-pdk", mod + "/abi"}},
		mod + "/guests/rate":        {ImportPath: mod + "/guests/rate", Imports: []string{"github.com/extism/go-pdk"}},
		mod + "/guests/x-extism":    {ImportPath: mod + "/guests/x-extism", Imports: []string{"github.com/caphost/caphost/third_party/extism", "github.com/caphost/caphost/third_party/wazero"}},
		"github.com/extism/go-pdk":  {ImportPath: "github.com/extism/go-pdk"},
	}
	var got []string
	for _, v := range checkImports(mod, pkgs) {
		got = append(got, strings.TrimPrefix(v.From, mod+"/")+" -> "+v.To)
	}
	sort.Strings(got)
	require.Equal(t, []string{
		"guests/rate -> github.com/extism/go-pdk",
		"guests/rate -> github.com/extism/go-pdk",
		"guests/x-extism -> github.com/caphost/caphost/third_party/extism",
		"guests/x-extism -> github.com/caphost/caphost/third_party/extism",
		"guests/x-extism -> github.com/caphost/caphost/third_party/wazero",
		"guests/x-extism -> github.com/caphost/caphost/third_party/wazero",
	}, got)
}

// TestEnvoyGRPCRule: gRPC and go-control-plane are confined to
// host/ratelimit/envoyrls (not even its subpackages); serve's tests may use
// the client, and plugins/transport gRPC alone (go-plugin's wire).
func TestEnvoyGRPCRule(t *testing.T) {
	const mod = "github.com/caphost/caphost"
	rls := "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	pkgs := map[string]listedPackage{
		mod + "/host/ratelimit/envoyrls":           {ImportPath: mod + "/host/ratelimit/envoyrls", Imports: []string{"google.golang.org/grpc", rls}},
		mod + "/host/ratelimit/envoyrls/rlsconfig": {ImportPath: mod + "/host/ratelimit/envoyrls/rlsconfig", Imports: []string{rls}},
		mod + "/host/ratelimit":                    {ImportPath: mod + "/host/ratelimit", Imports: []string{"google.golang.org/grpc/codes"}},
		mod + "/cmd/caphost":                       {ImportPath: mod + "/cmd/caphost", Imports: []string{"google.golang.org/grpc"}, TestImports: []string{"google.golang.org/grpc", rls}},
		mod + "/plugins/transport":                 {ImportPath: mod + "/plugins/transport", Imports: []string{"google.golang.org/grpc", rls}},
		"google.golang.org/grpc":                   {ImportPath: "google.golang.org/grpc"},
		"google.golang.org/grpc/codes":             {ImportPath: "google.golang.org/grpc/codes"},
		rls:                                        {ImportPath: rls},
	}
	var got []string
	for _, v := range checkImports(mod, pkgs) {
		if v.Rule == "only host/ratelimit/envoyrls may import gRPC and go-control-plane" {
			got = append(got, strings.TrimPrefix(v.From, mod+"/")+" -> "+v.To)
		}
	}
	sort.Strings(got)
	require.Equal(t, []string{
		"cmd/caphost -> google.golang.org/grpc",
		"host/ratelimit -> google.golang.org/grpc/codes",
		"host/ratelimit/envoyrls/rlsconfig -> " + rls,
		"plugins/transport -> " + rls,
	}, got)
}
