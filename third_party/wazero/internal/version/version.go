package version

// Upstream is the wazero release this tree was made from (caphost's third_party/update-wazero.sh
// sets it when it recreates the tree).
const Upstream = "v1.12.0"

// PatchSuffix marks this build as caphost's patched wazero (see CAPHOST.md at the root of the tree).
// The version names the compilation cache directory and is checked in every cached entry's header,
// so the suffix keeps code compiled by upstream and by the patched compiler apart. Bump it whenever
// the patches change generated code.
const PatchSuffix = "-caphost.2"

// Default is the version of this tree: Upstream with PatchSuffix.
const Default = Upstream + PatchSuffix

// GetWazeroVersion returns Default. Upstream reads the version from the build info (the require of
// github.com/tetratelabs/wazero, or the ldflags of the wazero CLI). caphost builds this tree as
// packages of its own module, under its own import path, so the build info never names it, and the
// version must not depend on how the embedding program was built: it is a constant.
func GetWazeroVersion() string { return Default }
