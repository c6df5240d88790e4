package notify

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/internal/module"
	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/policy"
)

func decodeYAML(t *testing.T, block string, role policy.Role, dir string) (Config, error) {
	t.Helper()
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(block), &raw))
	delete(raw, "provider")
	delete(raw, "redis-role")
	return Decode(ProviderRedis, role, raw, dir)
}

func problems(t *testing.T, err error, secrets ...string) map[string]policy.Rule {
	t.Helper()
	var ve *policy.ValidationError
	require.True(t, errors.As(err, &ve), "want a *ValidationError, got %v", err)
	out := map[string]policy.Rule{}
	for _, p := range ve.Problems {
		out[p.Path] = p.Rule
		for _, s := range secrets {
			assert.NotContains(t, p.Message, s, "no value is echoed")
		}
	}
	return out
}

// TestDecodeExample: the registered example decodes with the documented
// defaults, and every key can be set.
func TestDecodeExample(t *testing.T) {
	cfg, err := decodeYAML(t, example, policy.RoleCoordination, "/etc/caphost")
	require.NoError(t, err)
	assert.Equal(t, policy.RoleCoordination, cfg.Role)
	assert.Equal(t, policy.RoleCoordination, cfg.Intents.Role)
	assert.False(t, cfg.DispatchDisabled)
	require.Contains(t, cfg.Transports, "webhook")
	assert.Equal(t, "/opt/caphost/transports/webhook", cfg.Transports["webhook"].Binary)
	assert.Equal(t, map[render.Channel]map[string]Route{render.Slack: {"default": {Transports: []string{"webhook"}}}}, cfg.Routes)

	cfg, err = decodeYAML(t, `
renderers: [renderer, alt]
default-locale: en
intents: {shards: 8, retention: 48h, max-len: 5000, quarantine-max-len: 100}
dispatch: {enabled: false, consumer: replica-a, concurrency: 16, min-idle: 3s, reclaim-every: 1s, max-deliveries: 3,
  attempts-per-transport: 2, backoff: {base: 100ms, cap: 1s}, call-timeout: 1s}
transports:
  webhook: {binary: bin/webhook, sha256: "`+strings.Repeat("ab", 32)+`", call-timeout: 2s, settings: {url: "http://127.0.0.1:1/h"}}
  file: {binary: /abs/file, sha256: "`+strings.Repeat("cd", 32)+`", settings: {dir: /tmp}}
routes:
  email: {default: {transports: [webhook, file]}, digest: {transports: [file], best-effort: true}}
`, policy.RoleSession, "/etc/caphost")
	require.NoError(t, err)
	assert.Equal(t, []string{"renderer", "alt"}, cfg.Renderers)
	assert.Equal(t, "en", cfg.DefaultLocale)
	assert.Equal(t, intent.Config{Role: policy.RoleSession, Shards: 8, Retention: 48 * time.Hour, MaxLen: 5000, QuarantineMaxLen: 100}, cfg.Intents)
	assert.True(t, cfg.DispatchDisabled)
	assert.Equal(t, "replica-a", cfg.Dispatch.Consumer)
	assert.Equal(t, 16, cfg.Dispatch.Concurrency)
	assert.Equal(t, 3*time.Second, cfg.Dispatch.MinIdle)
	assert.Equal(t, int64(3), cfg.Dispatch.MaxDeliveries)
	assert.Equal(t, 100*time.Millisecond, cfg.Dispatch.Base)
	assert.Equal(t, filepath.Join("/etc/caphost", "bin/webhook"), cfg.Transports["webhook"].Binary)
	assert.Equal(t, 2*time.Second, cfg.Transports["webhook"].CallTimeout)
	assert.Equal(t, Route{Transports: []string{"file"}, BestEffort: true}, cfg.Routes[render.Email]["digest"])
	assert.Equal(t, []string{"webhook", "file"}, cfg.Routes[render.Email][DefaultRoute].Transports)
}

// TestDecodeReportsEveryProblem: unknown keys (also case variants), wrong
// types, out-of-range values, the cache role, unknown transports and
// channels, and the dispatcher's cross-field rules are all reported at
// once, at their paths, without echoing a value.
func TestDecodeReportsEveryProblem(t *testing.T) {
	_, err := decodeYAML(t, `
Routes: {}
renderers: []
default-locale: "en_US"
intents: {shards: 0, retention: 31d, max-len: 0, nope: 1}
dispatch: {concurrency: 0, min-idle: 2s, backoff: {base: 2s, cap: 1s}, call-timeout: 1s, reclaim-every: 2s,
  max-deliveries: 1, consumer: "a b"}
transports:
  Web_Hook: {binary: x, sha256: "`+strings.Repeat("0", 64)+`"}
  webhook: {sha256: "ABC", settings: {url: "http://x", "Bad Key": "v", secret: "s3cr3t-value\u0085"}}
routes:
  pager: {default: {transports: [webhook]}}
  email: {default: {transports: [webhook, webhook, sms]}, "Bad": {transports: [webhook]}, none: {best-effort: true}}
  slack: {}
`, policy.RoleCache, "/etc")
	got := problems(t, err, "s3cr3t-value", "ABC")
	want := map[string]policy.Rule{
		"capabilities.notify.Routes":                            policy.RuleUnknownKey,
		"capabilities.notify.redis-role":                        policy.RuleCapabilityRole,
		"capabilities.notify.renderers":                         RuleRenderer,
		"capabilities.notify.default-locale":                    RuleRenderer,
		"capabilities.notify.intents.shards":                    policy.RuleType,
		"capabilities.notify.intents.retention":                 policy.RuleType,
		"capabilities.notify.intents.max-len":                   policy.RuleType,
		"capabilities.notify.intents.nope":                      policy.RuleUnknownKey,
		"capabilities.notify.dispatch.concurrency":              policy.RuleType,
		"capabilities.notify.dispatch.max-deliveries":           policy.RuleType,
		"capabilities.notify.dispatch.consumer":                 RuleBounds,
		"capabilities.notify.dispatch.backoff.cap":              RuleBounds,
		"capabilities.notify.dispatch.min-idle":                 RuleBounds,
		"capabilities.notify.dispatch.reclaim-every":            RuleBounds,
		"capabilities.notify.transports.<name>":                 RuleTransport,
		"capabilities.notify.transports.webhook.binary":         RuleTransport,
		"capabilities.notify.transports.webhook.sha256":         RuleTransport,
		"capabilities.notify.transports.webhook.settings":       RuleTransport,
		"capabilities.notify.routes.<channel>":                  RuleRoute,
		"capabilities.notify.routes.email.<route>":              RuleRoute,
		"capabilities.notify.routes.email.default.transports.1": RuleRoute,
		"capabilities.notify.routes.email.default.transports.2": RuleRoute,
		"capabilities.notify.routes.email.none.transports":      RuleRoute,
		"capabilities.notify.routes.slack":                      RuleRoute,
	}
	for path, rule := range want {
		assert.Equal(t, rule, got[path], "problem at %s", path)
	}

	_, err = decodeYAML(t, "transports: {}\n", policy.RoleCoordination, "")
	got = problems(t, err)
	assert.Equal(t, RuleTransport, got["capabilities.notify.transports"])
	assert.Equal(t, RuleRoute, got["capabilities.notify.routes"], "routes are required")
	_, err = Decode("other", policy.RoleCoordination, nil, "")
	got = problems(t, err)
	assert.Equal(t, policy.RuleCapabilityProvider, got["capabilities.notify.provider"])
}

// TestDecodeResolvesBinariesAndSecrets: a relative binary resolves against
// the configuration file's directory; a secret reference stays a
// policy.Secret (never a plain setting), and a setting the plugin would
// refuse is reported without its value.
func TestDecodeResolvesBinariesAndSecrets(t *testing.T) {
	raw := map[string]any{
		"transports": map[string]any{"webhook": map[string]any{"binary": "transports/webhook", "sha256": strings.Repeat("a", 64),
			"settings": map[string]any{"url": "http://127.0.0.1:9/h", "secret": policy.NewSecret([]byte("0123456789abcdef0123456789abcdef"))}}},
		"routes": map[string]any{"slack": map[string]any{"default": map[string]any{"transports": []any{"webhook"}}}},
	}
	cfg, err := Decode(ProviderRedis, "", raw, "/srv/caphost")
	require.NoError(t, err)
	tc := cfg.Transports["webhook"]
	assert.Equal(t, "/srv/caphost/transports/webhook", tc.Binary)
	assert.Equal(t, map[string]string{"url": "http://127.0.0.1:9/h"}, tc.Settings)
	require.Contains(t, tc.Secrets, "secret")
	assert.Equal(t, "0123456789abcdef0123456789abcdef", string(tc.Secrets["secret"].Reveal()))

	raw["transports"].(map[string]any)["webhook"].(map[string]any)["settings"] = map[string]any{
		"secret": policy.NewSecret([]byte("line\nbreak-secret-value"))}
	_, err = Decode(ProviderRedis, "", raw, "/srv/caphost")
	got := problems(t, err, "break-secret-value")
	assert.Equal(t, RuleTransport, got["capabilities.notify.transports.webhook.settings"])
}

// TestDecodeEncryption: intents.encryption builds the seal ring from
// secret references; every bad value is reported at its path without
// echoing material.
func TestDecodeEncryption(t *testing.T) {
	base := func(enc any) map[string]any {
		return map[string]any{
			"intents":    map[string]any{"encryption": enc},
			"transports": map[string]any{"webhook": map[string]any{"binary": "/bin/webhook", "sha256": strings.Repeat("a", 64)}},
			"routes":     map[string]any{"slack": map[string]any{"default": map[string]any{"transports": []any{"webhook"}}}},
		}
	}
	key := func(b byte, n int) policy.Secret { return policy.NewSecret([]byte(strings.Repeat(string(b), n))) }

	cfg, err := Decode(ProviderRedis, "", base(map[string]any{"write-version": 2, "accept-plaintext": true,
		"versions": map[string]any{"1": key('a', 32), "2": key('b', 64)}}), "")
	require.NoError(t, err)
	require.NotNil(t, cfg.Intents.Seal)
	assert.Equal(t, 2, cfg.Intents.Seal.WriteVersion())
	assert.True(t, cfg.Intents.AcceptPlaintext)
	assert.Equal(t, "seal.Ring(aes-256-gcm write v2 versions [1 2])", cfg.Intents.Seal.String())

	cfg, err = Decode(ProviderRedis, "", base(nil), "")
	require.NoError(t, err)
	assert.Nil(t, cfg.Intents.Seal, "no block, no encryption")

	const enc = "capabilities.notify.intents.encryption"
	for name, c := range map[string]struct {
		block any
		path  string
		rule  policy.Rule
	}{
		"write version missing":   {map[string]any{"versions": map[string]any{"1": key('a', 32)}}, enc + ".write-version", RuleEncryption},
		"write version unlisted":  {map[string]any{"write-version": 3, "versions": map[string]any{"1": key('a', 32)}}, enc + ".write-version", RuleEncryption},
		"write version range":     {map[string]any{"write-version": 0, "versions": map[string]any{"1": key('a', 32)}}, enc + ".write-version", policy.RuleType},
		"versions missing":        {map[string]any{"write-version": 1}, enc + ".versions", RuleEncryption},
		"versions empty":          {map[string]any{"write-version": 1, "versions": map[string]any{}}, enc + ".versions", RuleEncryption},
		"too many versions":       {map[string]any{"write-version": 1, "versions": map[string]any{"1": key('a', 32), "2": key('b', 32), "3": key('c', 32), "4": key('d', 32), "5": key('e', 32)}}, enc + ".versions", RuleEncryption},
		"version not a number":    {map[string]any{"write-version": 1, "versions": map[string]any{"1": key('a', 32), "v2": key('b', 32)}}, enc + ".versions.v2", RuleEncryption},
		"version not canonical":   {map[string]any{"write-version": 1, "versions": map[string]any{"1": key('a', 32), "02": key('b', 32)}}, enc + ".versions.02", RuleEncryption},
		"material too short":      {map[string]any{"write-version": 1, "versions": map[string]any{"1": key('a', 31)}}, enc + ".versions.1", RuleEncryption},
		"material too long":       {map[string]any{"write-version": 1, "versions": map[string]any{"1": key('a', 1025)}}, enc + ".versions.1", RuleEncryption},
		"literal material":        {map[string]any{"write-version": 1, "versions": map[string]any{"1": strings.Repeat("x", 32)}}, enc + ".versions.1", policy.RuleSecretLiteral},
		"unknown key":             {map[string]any{"write-version": 1, "versions": map[string]any{"1": key('a', 32)}, "cipher": "aes"}, enc + ".cipher", policy.RuleUnknownKey},
		"case variant":            {map[string]any{"Write-Version": 1, "write-version": 1, "versions": map[string]any{"1": key('a', 32)}}, enc + ".Write-Version", policy.RuleUnknownKey},
		"accept-plaintext string": {map[string]any{"write-version": 1, "versions": map[string]any{"1": key('a', 32)}, "accept-plaintext": "yes"}, enc + ".accept-plaintext", policy.RuleType},
		"not an object":           {"on", enc, policy.RuleType},
	} {
		_, err := Decode(ProviderRedis, "", base(c.block), "")
		got := problems(t, err, "aaaaaaaa", "xxxxxxxx")
		assert.Equal(t, c.rule, got[c.path], "%s: %v", name, got)
	}
}

// TestDescriptorAndCard: the descriptor validates and matches the
// registration; the card parses with the same readiness.
func TestDescriptorAndCard(t *testing.T) {
	info := CapabilityInfo()
	m := info.New()
	var ps policy.Problems
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(example), &raw))
	delete(raw, "provider")
	delete(raw, "redis-role")
	m.Decode(module.Block{Path: capPath, Provider: ProviderRedis, Role: policy.RoleCoordination, RoleRequired: true, Raw: raw}, &ps)
	require.NoError(t, ps.Err())
	d := m.Descriptor()
	require.NoError(t, d.Validate())
	assert.Equal(t, info.Readiness, d.Readiness)
	assert.Equal(t, capability.ImpactRequired, d.Impact)
	assert.Contains(t, d.NonGuarantees, capability.NonGuaranteeExactlyOnceDelivery)
	c, err := capability.ParseCard(info.Card)
	require.NoError(t, err)
	assert.Equal(t, info.Readiness, c.Readiness)
}

// TestDocsListEveryNotifyRule: docs/notify.md names every rule, key,
// endpoint and error code of the capability.
func TestDocsListEveryNotifyRule(t *testing.T) {
	doc, err := os.ReadFile("../../docs/notify.md")
	require.NoError(t, err)
	for _, r := range Rules() {
		assert.Contains(t, string(doc), "`"+string(r)+"`", "docs/notify.md misses rule %s", r)
	}
	for _, k := range []string{"provider", "redis-role", "renderers", "default-locale", "intents", "dispatch", "transports", "routes"} {
		assert.Contains(t, string(doc), "| `"+k+"` |", "docs/notify.md misses key %s", k)
	}
	for _, p := range SidecarPatterns() {
		assert.Contains(t, string(doc), strings.TrimPrefix(strings.TrimPrefix(p, "POST "), "GET "), "docs/notify.md misses endpoint %s", p)
	}
	for _, c := range []httpjson.Code{CodeKeyReused, CodeIndeterminate, CodeUnknownRoute, CodeBestEffortRefused, CodeRenderFailed} {
		assert.Contains(t, string(doc), string(c), "docs/notify.md misses code %s", c)
	}
}
