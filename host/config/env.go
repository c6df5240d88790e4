package config

import (
	"sort"
	"strings"

	"github.com/caphost/caphost/policy"
	"github.com/knadh/koanf/v2"
)

// EnvPrefix starts every environment override.
const EnvPrefix = "CAPHOST_"

// envTemplates lists the overridable paths. {deployment}, {version} and
// {module} expand to the names present in the file; {role}, {lane} and
// {capability} expand to their closed sets. With an injected lookup
// (WithEnv) these are the only names consulted; with the process
// environment every CAPHOST_REDIS__*, CAPHOST_CAPABILITIES__*,
// CAPHOST_SERVER__*, CAPHOST_GUESTS__* and CAPHOST_SECURITY__* variable is
// applied as well, so a misspelt key surfaces as an unknown key instead of
// being silently ignored.
var envTemplates = [...]string{
	"redis.allow-unsafe-colocation",
	"redis.programs.mode",
	"redis.startup.on-failure",
	"redis.startup.retry-initial",
	"redis.startup.retry-max",
	"redis.startup.attempt-timeout",
	"redis.keys.app",
	"redis.keys.env",
	"redis.keys.hmac.write-version",
	"redis.keys.hmac.versions.{version}",
	"redis.roles.{role}.deployment",
	"redis.roles.{role}.required",
	"redis.roles.{role}.expected-eviction",
	"redis.deployments.{deployment}.standalone.endpoint",
	"redis.deployments.{deployment}.sentinel.master-name",
	"redis.deployments.{deployment}.sentinel.endpoints",
	"redis.deployments.{deployment}.sentinel.auth",
	"redis.deployments.{deployment}.sentinel.tls.enabled",
	"redis.deployments.{deployment}.sentinel.tls.verify-hostname",
	"redis.deployments.{deployment}.sentinel.tls.server-name",
	"redis.deployments.{deployment}.sentinel.tls.ca-file",
	"redis.deployments.{deployment}.sentinel.tls.cert-file",
	"redis.deployments.{deployment}.sentinel.tls.key-file",
	"redis.deployments.{deployment}.cluster.seeds",
	"redis.deployments.{deployment}.database",
	"redis.deployments.{deployment}.client-name",
	"redis.deployments.{deployment}.auth.default",
	"redis.deployments.{deployment}.auth.admin-shared",
	"redis.deployments.{deployment}.auth.{lane}",
	"redis.deployments.{deployment}.tls.enabled",
	"redis.deployments.{deployment}.tls.verify-hostname",
	"redis.deployments.{deployment}.tls.server-name",
	"redis.deployments.{deployment}.tls.ca-file",
	"redis.deployments.{deployment}.tls.cert-file",
	"redis.deployments.{deployment}.tls.key-file",
	"redis.deployments.{deployment}.timeouts.connect",
	"redis.deployments.{deployment}.timeouts.command",
	"redis.deployments.{deployment}.timeouts.acquire",
	"redis.deployments.{deployment}.timeouts.shutdown",
	"redis.deployments.{deployment}.timeouts.idle-check",
	"redis.deployments.{deployment}.lanes.{lane}.pool-size",
	"redis.deployments.{deployment}.lanes.{lane}.max-in-flight",
	"redis.deployments.{deployment}.lanes.{lane}.command-timeout",
	"redis.deployments.{deployment}.budgets.max-request-bytes",
	"redis.deployments.{deployment}.budgets.max-reply-bytes",
	"capabilities.{capability}.provider",
	"capabilities.{capability}.redis-role",
	"server.listen",
	"server.admin-token",
	"server.envoy-rate-limit.listen",
	"guests.compile-cache-dir",
	"guests.watch",
	"guests.modules.{module}.path",
	"guests.modules.{module}.sha256",
	"guests.modules.{module}.signature",
	"security.require-signed-guests",
	"security.allow-unsigned-swaps",
}

// EnvName converts a configuration path to its override variable:
// levels are joined by "__", "-" becomes "_", letters are upper-cased.
// redis.roles.cache.deployment → CAPHOST_REDIS__ROLES__CACHE__DEPLOYMENT.
func EnvName(path string) string {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		parts[i] = strings.ToUpper(strings.ReplaceAll(p, "-", "_"))
	}
	return EnvPrefix + strings.Join(parts, "__")
}

// EnvPath is the inverse of EnvName: it returns the configuration path an
// override variable addresses, and false when name is not an override.
func EnvPath(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, EnvPrefix)
	if !ok || rest == "" {
		return "", false
	}
	parts := strings.Split(rest, "__")
	for i, p := range parts {
		if p == "" {
			return "", false
		}
		parts[i] = strings.ToLower(strings.ReplaceAll(p, "_", "-"))
	}
	return strings.Join(parts, "."), true
}

// applyEnv sets every override found onto k, in sorted path order so the
// result does not depend on environment order.
func applyEnv(k *koanf.Koanf, o options) {
	paths := map[string]bool{}
	for _, t := range envTemplates {
		for _, p := range expand(k, t) {
			paths[p] = true
		}
	}
	if o.environ != nil {
		for _, kv := range o.environ() {
			name, _, _ := strings.Cut(kv, "=")
			if p, ok := EnvPath(name); ok && isOverride(p) {
				paths[p] = true
			}
		}
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	for _, p := range sorted {
		if v, ok := o.lookup(EnvName(p)); ok {
			// Set only fails for an invalid delimiter configuration, which
			// koanf.New(".") rules out.
			_ = k.Set(p, v)
		}
	}
}

// isOverride reports whether a CAPHOST_ variable addresses a key below a
// top-level block. Other CAPHOST_ variables (CAPHOST_KEY_V1, say) are
// ordinary variables that secret://env references may name.
func isOverride(path string) bool {
	top, _, nested := strings.Cut(path, ".")
	return nested && (top == "redis" || top == "capabilities" || top == "server" || top == "guests" || top == "security")
}

func expand(k *koanf.Koanf, tmpl string) []string { return expandFrom(k, tmpl, 0) }

// expandFrom substitutes placeholders at or after from; names coming from
// the file are never themselves searched for placeholders.
func expandFrom(k *koanf.Koanf, tmpl string, from int) []string {
	open := strings.IndexByte(tmpl[from:], '{')
	if open < 0 {
		return []string{tmpl}
	}
	open += from
	end := strings.IndexByte(tmpl[open:], '}') + open
	var names []string
	switch tmpl[open+1 : end] {
	case "role":
		for _, r := range policy.Roles() {
			names = append(names, string(r))
		}
	case "lane":
		for _, l := range policy.Lanes() {
			names = append(names, string(l))
		}
	case "capability":
		names = CapabilityNames()
	case "deployment":
		names = k.MapKeys("redis.deployments")
	case "version":
		names = k.MapKeys("redis.keys.hmac.versions")
	case "module":
		names = k.MapKeys("guests.modules")
	}
	var out []string
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, ".") {
			continue
		}
		out = append(out, expandFrom(k, tmpl[:open]+n+tmpl[end+1:], open+len(n))...)
	}
	return out
}
