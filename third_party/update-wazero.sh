#!/usr/bin/env bash
# update-wazero.sh VERSION [--test]
#
# Recreates third_party/wazero from wazero VERSION (for example v1.12.0) in the Go module cache and
# applies the patches in third_party/wazero-patches in the order of their names (see
# third_party/wazero/CAPHOST.md). The patches are diffs against the full upstream tree, tests
# included, so they are applied before pruning; with --test, upstream's tests of the patched
# packages run on the patched full tree before it is moved under caphost's import path.
#
# The fork is not a module of its own: its go.mod and go.sum are removed and every import of
# github.com/tetratelabs/wazero (and the //go:linkname targets that name its packages) is rewritten
# to github.com/caphost/caphost/third_party/wazero, so the fork is packages of caphost's module and
# every program that embeds caphost compiles this tree, not upstream, without a replace.
#
# Pruning keeps LICENSE, NOTICE, CAPHOST.md and, of the Go packages, only those that caphost's and
# bench's packages (third_party/extism included) and their tests import on linux, darwin and windows
# for amd64 and arm64, without their tests and testdata. The script ends by building both modules
# and checking that go mod tidy would change nothing.
#
# After a new upstream VERSION: also bump the patch number in internal/version (PatchSuffix,
# 0006-caphost-version.patch) whenever generated code changes.
set -euo pipefail

version=${1:?usage: update-wazero.sh VERSION [--test]}
runtests=${2:-}
mod=github.com/tetratelabs/wazero
self=github.com/caphost/caphost
fork=$self/third_party/wazero
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
dst=$here/wazero
patches=$here/wazero-patches

src=$(go env GOMODCACHE)/$mod@$version
if [ ! -d "$src" ]; then
	(cd "$root" && go mod download "$mod@$version")
fi

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -R "$src" "$work/wazero"
chmod -R u+w "$work/wazero"

for p in "$patches"/*.patch; do
	patch -d "$work/wazero" -p1 --forward --batch --no-backup-if-mismatch --quiet <"$p"
done
# The fork's version is a constant (0006-caphost-version.patch): the release it was made from.
sed -i.orig "s|^const Upstream = \".*\"\$|const Upstream = \"$version\"|" "$work/wazero/internal/version/version.go"
rm "$work/wazero/internal/version/version.go.orig"
grep -qxF "const Upstream = \"$version\"" "$work/wazero/internal/version/version.go"

if [ "$runtests" = "--test" ]; then
	(cd "$work/wazero" && go test . ./internal/version/ ./internal/wasm/ ./internal/engine/wazevo/...)
fi

# Under caphost's import path: no module of its own, and every import and linkname target of
# upstream's path renamed. Only the quoted import paths and the //go:linkname targets are rewritten,
# so comments and URLs keep naming upstream; running the rewrite twice changes nothing.
rm "$work/wazero/go.mod" "$work/wazero/go.sum"
find "$work/wazero" -type f -name '*.go' -exec sed -i -E \
	-e "s#\"$mod([/\"])#\"$fork\\1#g" \
	-e "s#^(//go:linkname [^ ]+ )$mod/#\\1$fork/#" {} +
if [ -f "$dst/CAPHOST.md" ]; then
	cp "$dst/CAPHOST.md" "$work/CAPHOST.md"
fi
rm -rf "$dst"
mv "$work/wazero" "$dst"
if [ -f "$work/CAPHOST.md" ]; then
	mv "$work/CAPHOST.md" "$dst/CAPHOST.md"
fi

# The packages caphost (outside third_party/wazero) and bench need, with their tests, on every
# platform caphost is built for. Not "all": the fork's own packages are in caphost's module now, so
# "all" would be every package of the full tree.
needed=$work/needed
for platform in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64; do
	export GOOS=${platform%/*} GOARCH=${platform#*/} CGO_ENABLED=0
	(cd "$root" && go list -e -deps -test $(go list -e ./... | grep -v "^$fork\(/\|\$\)"))
	(cd "$root/bench" && go list -e -deps -test ./...)
	unset GOOS GOARCH CGO_ENABLED
done | grep -E "^$fork(/|$)" | sed -E "s|^$fork/?|./|; s|/$||" | sort -u >"$needed"

cd "$dst"
find . -name '*_test.go' -delete
find . -depth -type d -name testdata -exec rm -rf {} +
find . -mindepth 1 -maxdepth 1 -name '.*' -exec rm -rf {} +
# Remove packages nobody imports, and every other non-source file.
find . -type f \( -name '*.go' -o -name '*.s' \) -print | while read -r f; do
	d=$(dirname "$f")
	if ! grep -qxF "$d" "$needed"; then
		rm "$f"
	fi
done
find . -type f ! \( -name '*.go' -o -name '*.s' -o -path ./LICENSE -o -path ./NOTICE -o -path ./CAPHOST.md \) -delete
find . -depth -mindepth 1 -type d -empty -delete
# The renamed imports may sort differently within their groups.
gofmt -w .
# Check: a line that still names upstream is a comment (and not a //go: directive).
if grep -rnE "$mod([/\"]|\$)" --include='*.go' . | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//([^g]|g[^o]|go[^:])'; then
	echo "update-wazero.sh: the lines above still name $mod outside a comment" >&2
	exit 1
fi

cd "$root"
go build ./...
GOARCH=arm64 go build ./...
go mod tidy -diff
(cd bench && go build ./... && GOARCH=arm64 go build ./... && go mod tidy -diff)
echo "third_party/wazero: $mod $version as $fork with $(cd "$patches" && ls *.patch | tr '\n' ' ')"
