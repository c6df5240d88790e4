package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/caphost/caphost/plugins/trust"
	"github.com/caphost/caphost/policy"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
)

// MaxFileBytes bounds the configuration file; a larger file is rejected
// before it is parsed.
const MaxFileBytes = 1 << 20

// MaxSecretBytes bounds a file secret.
const MaxSecretBytes = 64 << 10

// Config is the decoded, resolved and validated configuration.
type Config struct {
	// Redis holds the selected roles and only the deployments they reference.
	Redis policy.RedisConfig
	// Capabilities holds the active capabilities by name (absent or
	// `provider: disabled` blocks are not here).
	Capabilities map[string]Capability
	// Server configures `caphost serve`.
	Server Server
	// Guests lists the guest modules; every module file was read and its
	// sha256 pin (and signature, when configured) checked during Load.
	Guests policy.GuestsConfig
	// Security holds the guest trust settings.
	Security policy.SecurityConfig
	// TrustedKeys are the parsed security.trusted-keys, for the engine to
	// verify module bytes again when it loads them (the file may change
	// between Load and compilation).
	TrustedKeys trust.TrustedKeys
	// Source names where the configuration came from (the file path).
	Source string
	// Dir is the directory relative paths in the file resolve against
	// (the file's own).
	Dir string
}

// Capability is one active capability block. Only provider and redis-role
// are interpreted here; the rest is handed to the capability, which decodes
// Raw strictly itself.
type Capability struct {
	Name      string
	Provider  string
	RedisRole policy.Role
	// Raw holds the capability's own keys (everything except provider and
	// redis-role), as parsed from YAML and environment overrides.
	Raw map[string]any
}

// Server configures the HTTP listener of `caphost serve`.
type Server struct {
	// Listen is host:port; default 127.0.0.1:8080 (loopback unless told otherwise).
	Listen string
	// AdminToken is the bearer token of the /admin endpoints, resolved from
	// server.admin-token (a secret reference). Zero: the admin endpoints are
	// not served at all.
	AdminToken policy.Secret
	// AdminTokenRef is the reference AdminToken was resolved from (printable).
	AdminTokenRef policy.SecretRef
	// EnvoyRateLimit is server.envoy-rate-limit (nil: not served).
	EnvoyRateLimit *EnvoyRateLimit
}

// DefaultListen is Server.Listen when the file does not set it.
const DefaultListen = "127.0.0.1:8080"

// Option adjusts Load.
type Option func(*options)

type options struct {
	lookup   func(string) (string, bool)
	environ  func() []string
	roles    []policy.Role
	allRoles bool
	fsys     fs.FS
}

// WithEnv replaces the process environment (os.LookupEnv) for both
// CAPHOST_ overrides and secret://env references. Tests use it so they
// never mutate the process environment. With an injected lookup only the
// variable names derived from the configuration schema are consulted.
func WithEnv(lookup func(string) (string, bool)) Option {
	return func(o *options) { o.lookup, o.environ = lookup, nil }
}

// WithRoles selects roles in addition to those the active capabilities
// name, so their bindings and deployments are decoded and validated (used by
// `caphost check --role` and by runtime tests).
func WithRoles(roles ...policy.Role) Option {
	return func(o *options) { o.roles = append(o.roles, roles...) }
}

// WithAllRoles selects every role declared under redis.roles, as an
// operator validating a whole file expects (`caphost check` without
// --role). A service never uses it: it selects roles through capabilities.
func WithAllRoles() Option {
	return func(o *options) { o.allRoles = true }
}

// WithFS reads the configuration file from fsys instead of the operating
// system (path is then an fs.FS path). Secret files and TLS files are still
// read from the operating system; relative references resolve against the
// directory of path taken as an operating-system path.
func WithFS(fsys fs.FS) Option {
	return func(o *options) { o.fsys = fsys }
}

// Load reads the YAML file at path, applies CAPHOST_ environment
// overrides, decodes strictly and selectively, resolves secrets and
// validates, including reading every guest module and trusted key file and
// checking sha256 pins and signatures. On configuration problems it returns a *policy.ValidationError
// listing all of them (errors.Is(err, policy.ErrInvalid)); other errors
// (unreadable file, cancelled context) are returned as they are.
func Load(ctx context.Context, path string, opts ...Option) (*Config, error) {
	o := options{lookup: os.LookupEnv, environ: os.Environ}
	for _, opt := range opts {
		opt(&o)
	}
	data, err := readBounded(o.fsys, path)
	if err != nil {
		return nil, err
	}
	base := filepath.Dir(path)
	if o.fsys == nil {
		if abs, err := filepath.Abs(path); err == nil {
			base = filepath.Dir(abs)
		}
	}
	return load(ctx, data, path, base, o)
}

// ErrTooLarge is returned when the configuration file exceeds MaxFileBytes.
var ErrTooLarge = errors.New("configuration file too large")

func readBounded(fsys fs.FS, path string) ([]byte, error) {
	var (
		f   io.ReadCloser
		err error
	)
	if fsys != nil {
		f, err = fsys.Open(path)
	} else {
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("config: %s: %w (limit %d bytes)", path, ErrTooLarge, MaxFileBytes)
	}
	return data, nil
}

func load(ctx context.Context, data []byte, source, base string, o options) (*Config, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var ps policy.Problems
	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider(data), yaml.Parser()); err != nil {
		ps.Add("", policy.RuleSyntax, "not a YAML mapping: %s", sanitizeYAMLError(err))
		return nil, ps.Err()
	}
	applyEnv(k, o)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := &decoder{lookup: o.lookup, base: base, fsys: o.fsys}
	roles := o.roles
	if o.allRoles {
		roles = append(roles, declaredRoles(k.Raw())...)
	}
	cfg := d.decode(k.Raw(), roles)
	cfg.Source = source
	static := append(cfg.Redis.Problems(), policy.GuestProblems(cfg.Guests, cfg.Security)...)
	all := mergeProblems(d.Problems, static)
	keys, fileProblems, err := verifyGuests(ctx, cfg, all)
	if err != nil {
		return nil, err
	}
	cfg.TrustedKeys = keys
	all = append(all, fileProblems...)
	if err := all.Err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// mergeProblems keeps every decode problem and drops a validation problem
// that is only a consequence of one: a value that failed to decode (wrong
// type, unresolvable secret) is zero in the model, and reporting "must be
// > 0" on top would send the operator after a second, non-existent defect.
func mergeProblems(dec, val policy.Problems) policy.Problems {
	out := append(policy.Problems(nil), dec...)
	for _, v := range val {
		shadowed := false
		for _, p := range dec {
			if p.Path == v.Path && p.Rule == v.Rule {
				shadowed = true
			}
			if p.Rule != policy.RuleUnknownKey && p.Rule != policy.RuleTopologyExactlyOne &&
				(v.Path == p.Path || hasPathPrefix(v.Path, p.Path)) {
				shadowed = true
			}
		}
		if !shadowed {
			out = append(out, v)
		}
	}
	out.Sort()
	return out
}

// sanitizeYAMLError keeps the parser's line numbers and type names but drops
// the quoted value yaml.v3 includes in unmarshal errors (it may be a secret
// pasted in the wrong place) and folds the message onto one line.
func sanitizeYAMLError(err error) string {
	msg := backticked.ReplaceAllString(err.Error(), "a value")
	return strings.Join(strings.Fields(msg), " ")
}

var backticked = regexp.MustCompile("`[^`]*`")

func hasPathPrefix(path, prefix string) bool {
	return prefix != "" && len(path) > len(prefix) && path[:len(prefix)] == prefix && path[len(prefix)] == '.'
}

// declaredRoles lists the valid role names under redis.roles (invalid names
// are reported by the decoder itself).
func declaredRoles(root map[string]any) []policy.Role {
	redis, _ := root["redis"].(map[string]any)
	roles, _ := redis["roles"].(map[string]any)
	var out []policy.Role
	for _, r := range policy.Roles() {
		if _, ok := roles[string(r)]; ok {
			out = append(out, r)
		}
	}
	return out
}
