package plugins

import (
	"sort"
	"strings"

	"github.com/caphost/caphost/abi"
)

// Grants is the set of caphost_v1 host imports a module may link, granted
// per module by the operator's configuration (guests.modules.<name>.grants;
// DESIGN §3). It travels in Limits.Grants. A module importing an ungranted
// function fails to load (ClassForbiddenImport, naming the import), and the
// host module it links against exports only the granted functions. The zero
// value grants nothing.
//
// WASI is not granted this way: what a module gets of it is fixed by the
// sandbox (plugins/internal/wasipolicy), the same for every module.
type Grants uint8

// The grants, one per caphost_v1 import.
const (
	// GrantLog lets a module import caphost_v1.log.
	GrantLog Grants = 1 << iota
	// GrantCount lets a module import caphost_v1.count.
	GrantCount
)

// AllGrants is every grant. It is for tools that load a module only to
// inspect or test it (caphost guest inspect|test, selftestpack), never for
// a module that serves.
const AllGrants = GrantLog | GrantCount

// grantTable names each grant (the configuration's spelling) and the
// caphost_v1 function it lets a module import.
var grantTable = [...]struct {
	g          Grants
	name, impt string
}{
	{GrantCount, "count", abi.ImportCount},
	{GrantLog, "log", abi.ImportLog},
}

// GrantsOf returns the grants named by names ("log", "count": the values of
// guests.modules.<name>.grants). Validating the names is configuration's
// job (policy rule guests.grants); a name that is not a grant grants
// nothing, so a typo can only refuse an import, never allow one.
func GrantsOf(names ...string) Grants {
	var g Grants
	for _, n := range names {
		for _, t := range grantTable {
			if t.name == n {
				g |= t.g
			}
		}
	}
	return g
}

// Names lists the grants in g by their configuration names, sorted.
func (g Grants) Names() []string {
	var out []string
	for _, t := range grantTable {
		if g&t.g != 0 {
			out = append(out, t.name)
		}
	}
	sort.Strings(out)
	return out
}

// String is "none" or the names joined by commas.
func (g Grants) String() string {
	if n := g.Names(); len(n) > 0 {
		return strings.Join(n, ",")
	}
	return "none"
}

// grantFor returns the grant the caphost_v1 function fn needs; ok is false
// for a name that is not a caphost_v1 import at all.
func grantFor(fn string) (g Grants, name string, ok bool) {
	for _, t := range grantTable {
		if t.impt == fn {
			return t.g, t.name, true
		}
	}
	return 0, "", false
}

// Refusal says why a module may not import name, the import standing for
// the caphost_v1 function fn (name is "caphost_v1.log" natively, Extism's
// host-function name in plugins/extism), or returns "" when g allows it.
// Both flavours refuse with this text, which names the import and the grant
// it needs.
func (g Grants) Refusal(name, fn string) string {
	need, grant, ok := grantFor(fn)
	switch {
	case !ok:
		return name + " (not a caphost_v1 import)"
	case g&need == 0:
		return name + " (not granted: add " + grant + " to the module's grants)"
	}
	return ""
}
