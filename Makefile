# caphost — the two commands a newcomer needs are `make demo` and `make test`.
# Everything else here is for contributors.

GO        ?= go
BUILD     := build
BIN       := $(BUILD)/caphost
GUESTS    := $(notdir $(wildcard guests/*))
TESTFLAGS ?= -race -count=1 -timeout 30m

.PHONY: all build demo demo-env test test-short guests bench bench-sidecar bench-failover lint fmt ensure-redis clean

all: build

## build: the caphost binary
build:
	$(GO) build -o $(BIN) ./cmd/caphost

# AssemblyScript guests' npm packages, exactly as their lockfiles pin them.
AS_DEPS := $(patsubst %/package.json,%/node_modules/.package-lock.json,$(wildcard guests/*/package.json))

## guests: every reference guest under guests/ as build/guests/<name>.wasm, with the
## self-test vectors of guests/<name>/selftest.json bundled in (and checked) by
## internal/tools/selftestpack; sign a module only after this step. Go guests (main.go)
## of both flavours build with the standard toolchain; AssemblyScript guests
## (package.json, Extism AS PDK) with the asc compiler their lockfile pins, installed
## into guests/<name>/node_modules by `npm ci` when missing or older than the lockfile
## (needs Node.js 20+ and npm). A twin (<name>-extism, <name>-as) without a vectors
## file of its own bundles its native twin's, since they must answer alike
guests: $(AS_DEPS)
	@mkdir -p $(BUILD)/guests
	@$(GO) build -o $(BUILD)/selftestpack ./internal/tools/selftestpack
	@for g in $(GUESTS); do \
		if [ -f guests/$$g/main.go ]; then \
			echo "guest $$g"; \
			GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o $(BUILD)/guests/$$g.wasm ./guests/$$g || exit 1; \
		elif [ -f guests/$$g/package.json ]; then \
			echo "guest $$g (AssemblyScript)"; \
			(cd guests/$$g && npx --no-install asc assembly/index.ts --config asconfig.json --target release \
				-o $(CURDIR)/$(BUILD)/guests/$$g.wasm) || exit 1; \
		else continue; fi; \
		vec=guests/$$g/selftest.json; \
		case $$g in *-extism|*-as) [ -f $$vec ] || vec=guests/$${g%-*}/selftest.json;; esac; \
		if [ -f $$vec ]; then \
			$(BUILD)/selftestpack -cache-dir $(BUILD)/wazero-cache -vectors $$vec $(BUILD)/guests/$$g.wasm || exit 1; \
		fi; \
	done

## transports: the notification transport plugins (go-plugin processes, launched by the host
## after a sha256 check) as build/transports/<name>: file, smtp, webhook
TRANSPORTS := $(patsubst caphost-transport-%,%,$(notdir $(wildcard plugins/transport/cmd/caphost-transport-*)))
transports:
	@mkdir -p $(BUILD)/transports
	@for t in $(TRANSPORTS); do \
		echo "transport $$t"; \
		$(GO) build -o $(BUILD)/transports/$$t ./plugins/transport/cmd/caphost-transport-$$t || exit 1; \
	done

guests/%/node_modules/.package-lock.json: guests/%/package.json guests/%/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "guests/$*: needs Node.js 20+ and npm (Debian: apt-get install nodejs npm), then: cd guests/$* && npm ci"; exit 1; }
	cd guests/$* && npm ci --no-audit --no-fund

## demo: the main job, against a private redis-server it starts (or your Redis at
## $CAPHOST_REDIS_ADDR, with the passwords $CAPHOST_DEMO_APP_PASS and $CAPHOST_DEMO_ADMIN_PASS
## of the users the README lists): builds the guests and caphost, serves, drives
## rate-limited traffic, hot-swaps the policy guest, then shows the cache on two
## replicas (hits, a stampede absorbed, an invalidation reaching the other replica)
## and, embedded, a stale fenced write rejected and an idempotent retry replayed, then
## notifications (two locales, delivered once by the webhook plugin, a plugin crash
## mid-call never resent, a poison entry quarantined)
demo: demo-env $(if $(CAPHOST_REDIS_ADDR),,ensure-redis) build guests transports
	@GO=$(GO) $(GO) run ./examples/quickstart -bin $(BIN)

# demo-env fails before anything builds when $CAPHOST_REDIS_ADDR comes without its passwords
demo-env:
	@$(GO) run ./examples/quickstart -check-env

# The patched wazero under third_party/ is packages of caphost's module, and go vet reports the
# diagnostics of the module's packages a vetted package imports: upstream's API deliberately breaks
# stdmethods (api.Memory.ReadByte takes an offset, experimental/sys.File.Seek returns an Errno) and
# one of its assembly files asmdecl. VET runs every check and fails on any diagnostic outside
# third_party/ (a build error included), so caphost's own code keeps every check.
VET = out=$$($(GO) vet ./... 2>&1); bad=$$(printf '%s\n' "$$out" | grep -vE '^(\.\./)?third_party/|^\#|^$$'); \
	if [ -n "$$bad" ]; then printf '%s\n' "$$bad"; exit 1; fi

## test: every test — unit, fuzz seeds, real-Redis (standalone, Cluster, Sentinel), race detector,
## the bench module's comparison with envoyproxy/ratelimit; the reference guests are built first
## (tests that load them as shipped need build/guests)
test: ensure-redis guests transports
	@# Every module of the graph, not only those a build loads: the embedder test lists the
	@# graph offline (GOPROXY=off), which a lazily filled module cache cannot answer. The
	@# bench module's too, first: VET counts any output line of go vet, "go: downloading" included.
	@$(GO) mod download
	@cd bench && $(GO) mod download
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	@$(VET)
	@cd bench && $(VET)
	cd bench && $(GO) build ./...
	$(GO) test $(TESTFLAGS) ./...
	@# Tests that hold only without the race detector (allocation counts, process memory, the
	@# 100 swaps under load and their leak bound, the codec twins' whole differential corpus)
	@# and live in *_norace_test.go files (//go:build !race), which the -race pass above never
	@# compiles: each such file's tests run here, by name, without it.
	@set -e; for d in $$(find . -name '*_norace_test.go' -not -path './third_party/*' -not -path './bench/*' \
			-exec dirname {} \; | sort -u); do \
		tests=$$(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' $$d/*_norace_test.go | paste -sd'|' -); \
		[ -n "$$tests" ] || continue; \
		echo "$(GO) test -count=1 -run '^($$tests)$$' $$d/"; \
		$(GO) test -count=1 -run "^($$tests)\$$" $$d/; \
	done
	# The bench module's tests: envoycompat compares caphost serve's Envoy decisions with
	# envoyproxy/ratelimit's (both daemons built from source by the test, each on a private
	# redis-server), cmd/failover's timeline unit test. Its benchmarks are make bench.
	cd bench && GO=$(GO) $(GO) test $(TESTFLAGS) ./...

## test-short: the quick loop while editing, never a substitute for `make test`: the tests of
## every package whose test binary links neither the Redis harness (internal/redistest, which
## starts redis-server) nor the Wasm engine (wazero: those tests build and run guests), without
## the race detector: policy, abi, runtime/certainty, the rate reference model
## (runtime/programs/internal/rateref), plugins/trust and the like.
## It leaves out, besides the race detector, gofmt and vet: every real-Redis test (runtime and
## its keys, guard and programs packages, host, host/ratelimit, host/httpapi, cmd/caphost,
## internal/redistest itself) and every guest or engine test (plugins/..., host/guests,
## host/metrics, internal/tools/selftestpack). The subset is computed from the import graph,
## so a package that starts needing Redis or guests drops out of it by itself.
SHORT_PKGS = $(GO) list -test -f '{{if .ForTest}}{{$$skip := eq .ForTest "github.com/caphost/caphost/internal/redistest"}}{{range .Deps}}{{if or (eq . "github.com/caphost/caphost/internal/redistest") (eq . "github.com/caphost/caphost/third_party/wazero")}}{{$$skip = true}}{{end}}{{end}}{{if not $$skip}}{{.ForTest}}{{end}}{{end}}' ./...
test-short:
	@pkgs="$$($(SHORT_PKGS))" && test -n "$$pkgs" || { echo "test-short: no package selected"; exit 1; }; \
	echo "$(GO) test -count=1" $$pkgs; $(GO) test -count=1 $$pkgs

## bench: caphost side by side with plain go-redis (and peers) on a private Redis; ratios printed;
## then the sidecar rows of bench-sidecar (BENCH_SIDECAR=no leaves them out)
# The cache rows load build/guests/codec.wasm, hence guests; the notify rows launch
# build/transports/webhook, hence transports.
# BENCH_FLAGS: cmd/compare flags; the default adds the A/A control rows
# (each peer against an identical second client), the ratios' noise floor.
BENCH_FLAGS ?= -control
BENCH_SIDECAR ?= yes
bench: ensure-redis guests transports
	cd bench && $(GO) run ./cmd/compare $(BENCH_FLAGS)
	@if [ "$(BENCH_SIDECAR)" = yes ]; then $(MAKE) --no-print-directory bench-sidecar; fi

## bench-sidecar: caphost serve vs envoyproxy/ratelimit (built here from the bench module) on one
## private Redis, HTTP JSON and gRPC ShouldRateLimit, 1/8/32 clients, with an A/A caphost run
SIDECAR_FLAGS ?= -duration 3s
bench-sidecar: ensure-redis build
	cd bench && $(GO) build -o $(CURDIR)/$(BUILD)/envoy-ratelimit github.com/envoyproxy/ratelimit/src/service_cmd  # a tool of bench/go.mod
	cd bench && $(GO) run ./cmd/compare -sidecar -caphost-bin $(CURDIR)/$(BIN) -envoy-ratelimit-bin $(CURDIR)/$(BUILD)/envoy-ratelimit $(SIDECAR_FLAGS)

## bench-failover: kill -9 the Redis primary under caphost serve (Sentinel and Cluster, real
## processes) and print the timeline: Redis recovery, decisions again, /readyz, over-admission
FAILOVER_FLAGS ?= -runs 3
bench-failover: ensure-redis build
	cd bench && $(GO) run ./cmd/failover -bin $(CURDIR)/$(BIN) $(FAILOVER_FLAGS)

## lint: formatting and vet
lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	@$(VET)
	@cd bench && $(VET)

fmt:
	gofmt -w .

## ensure-redis: install redis-server from Debian when missing (tests start private servers; nothing is left running)
ensure-redis:
	@command -v redis-server >/dev/null 2>&1 || bash .ci/install-redis.sh

clean:
	rm -rf $(BUILD)
