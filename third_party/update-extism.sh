#!/usr/bin/env bash
# update-extism.sh VERSION
#
# Recreates third_party/extism from the Extism Go SDK VERSION (github.com/extism/go-sdk, for example
# v1.7.1) in the Go module cache and applies the patches in third_party/extism-patches in the order
# of their names (see third_party/extism/CAPHOST.md). The patches are diffs against the full
# upstream tree, so they are applied before pruning.
#
# The SDK is not a module of its own here: its go.mod and go.sum are removed and its imports of
# github.com/tetratelabs/wazero are rewritten to github.com/caphost/caphost/third_party/wazero (and
# of github.com/extism/go-sdk to github.com/caphost/caphost/third_party/extism), so the Extism
# flavour runs on caphost's patched wazero in every program that embeds caphost, without a replace.
#
# Pruning keeps LICENSE, CAPHOST.md, the package's non-test Go files and the embedded Extism kernel
# (extism-runtime.wasm and its .version); tests, testdata, the example modules under wasm/ and the
# rest go. The script ends by building both modules and checking that go mod tidy would change
# nothing. Run it after update-wazero.sh when both change: it needs the fork under its caphost path.
set -euo pipefail

version=${1:?usage: update-extism.sh VERSION}
mod=github.com/extism/go-sdk
wazero=github.com/tetratelabs/wazero
self=github.com/caphost/caphost
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
dst=$here/extism
patches=$here/extism-patches

src=$(go env GOMODCACHE)/$mod@$version
if [ ! -d "$src" ]; then
	(cd "$root" && GOFLAGS=-mod=mod go mod download "$mod@$version")
fi

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -R "$src" "$work/extism"
chmod -R u+w "$work/extism"

for p in "$patches"/*.patch; do
	patch -d "$work/extism" -p1 --forward --batch --no-backup-if-mismatch --quiet <"$p"
done

# Prune, then move under caphost's import path. Only quoted import paths are rewritten, so
# comments keep naming upstream; running the rewrite twice changes nothing.
cd "$work/extism"
find . -mindepth 1 -maxdepth 1 ! \( -name '*.go' -o -name LICENSE -o -name extism-runtime.wasm -o -name extism-runtime.wasm.version \) -exec rm -rf {} +
find . -name '*_test.go' -delete
find . -type f -name '*.go' -exec sed -i -E \
	-e "s#\"$wazero([/\"])#\"$self/third_party/wazero\\1#g" \
	-e "s#\"$mod([/\"])#\"$self/third_party/extism\\1#g" {} +
# The renamed imports may sort differently within their groups.
gofmt -w .
# Check: a line that still names upstream's paths is a comment (and not a //go: directive).
if grep -rnE "($wazero|$mod)([/\"]|\$)" --include='*.go' . | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//([^g]|g[^o]|go[^:])'; then
	echo "update-extism.sh: the lines above still name $wazero or $mod outside a comment" >&2
	exit 1
fi
cd "$root"

if [ -f "$dst/CAPHOST.md" ]; then
	cp "$dst/CAPHOST.md" "$work/extism/CAPHOST.md"
fi
rm -rf "$dst"
mv "$work/extism" "$dst"

go build ./...
GOARCH=arm64 go build ./...
go mod tidy -diff
(cd bench && go build ./... && GOARCH=arm64 go build ./... && go mod tidy -diff)
echo "third_party/extism: $mod $version as $self/third_party/extism with $(cd "$patches" && ls *.patch | tr '\n' ' ')"
