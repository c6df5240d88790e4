#!/usr/bin/env bash
# update-wazero.sh VERSION [--test]
#
# Recreates third_party/wazero from wazero VERSION (for example v1.12.0) in the Go module cache and
# applies the patches in third_party/wazero-patches in the order of their names (see
# third_party/wazero/CAPHOST.md). The patches are diffs against the full upstream tree, tests
# included, so they are applied before pruning; with --test, upstream's tests of the patched
# packages run on the patched full tree before it is pruned.
#
# Pruning keeps LICENSE, NOTICE, go.mod, go.sum, CAPHOST.md and, of the Go packages, only those in
# "all" of caphost and bench (extism go-sdk included) on linux, darwin and windows for amd64 and arm64,
# without their tests and testdata. The script ends by building both modules and checking that
# go mod tidy would change nothing.
#
# After a new upstream VERSION: also bump the wazero require in go.mod and bench/go.mod, and the
# patch number in internal/version (PatchSuffix, 0006-caphost-version.patch) whenever generated
# code changes.
set -euo pipefail

version=${1:?usage: update-wazero.sh VERSION [--test]}
runtests=${2:-}
mod=github.com/tetratelabs/wazero
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

if [ -f "$dst/CAPHOST.md" ]; then
	cp "$dst/CAPHOST.md" "$work/CAPHOST.md"
fi
rm -rf "$dst"
mv "$work/wazero" "$dst"
if [ -f "$work/CAPHOST.md" ]; then
	mv "$work/CAPHOST.md" "$dst/CAPHOST.md"
fi

# The packages both modules need, on every platform caphost is built for. "all" rather than ./...:
# go mod tidy also resolves the imports of dependencies' tests (extism go-sdk's tests import
# experimental/logging).
needed=$work/needed
for platform in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64; do
	for m in "$root" "$root/bench"; do
		(cd "$m" && GOOS=${platform%/*} GOARCH=${platform#*/} CGO_ENABLED=0 go list -e -deps -test all)
	done
done | grep -E "^$mod(/|$)" | sed -E "s|^$mod/?|./|; s|/$||" | sort -u >"$needed"

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
find . -type f ! \( -name '*.go' -o -name '*.s' -o -path ./LICENSE -o -path ./NOTICE -o -path ./go.mod -o -path ./go.sum -o -path ./CAPHOST.md \) -delete
find . -depth -mindepth 1 -type d -empty -delete

cd "$root"
go build ./...
GOARCH=arm64 go build ./...
go mod tidy -diff
(cd bench && go build ./... && GOARCH=arm64 go build ./... && go mod tidy -diff)
echo "third_party/wazero: $mod $version with $(cd "$patches" && ls *.patch | tr '\n' ' ')"
