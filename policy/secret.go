package policy

import (
	"fmt"
	"log/slog"
)

// SecretSource is where a secret reference is resolved from.
type SecretSource string

// Secret sources. Literal values are never accepted in configuration.
const (
	SecretFromEnv  SecretSource = "env"
	SecretFromFile SecretSource = "file"
)

// SecretRef is a parsed secret reference: secret://env/NAME,
// secret://file/PATH, each optionally with a user: secret://user@env/NAME.
// The reference itself is not secret and may be printed.
type SecretRef struct {
	User   string       // ACL user name, empty when the reference has no user@ part
	Source SecretSource // env or file
	Name   string       // variable name or file path
}

// String renders the reference in its configuration form.
func (r SecretRef) String() string {
	if r.Source == "" {
		return ""
	}
	u := ""
	if r.User != "" {
		u = r.User + "@"
	}
	return "secret://" + u + string(r.Source) + "/" + r.Name
}

// IsZero reports whether no reference was configured.
func (r SecretRef) IsZero() bool { return r.Source == "" }

// Secret is resolved secret material. It prints as *** in every fmt verb,
// in slog and in GoString so it cannot leak through logs or errors; only
// Reveal hands out the bytes.
type Secret struct {
	b []byte
}

// NewSecret wraps resolved material. The slice is copied.
func NewSecret(b []byte) Secret { return Secret{b: append([]byte(nil), b...)} }

// Reveal returns the secret bytes. Callers must not log or retain them
// beyond the call that needs them.
func (s Secret) Reveal() []byte { return s.b }

// IsZero reports whether no material is present.
func (s Secret) IsZero() bool { return len(s.b) == 0 }

// Len returns the length of the material (useful for bounds checks).
func (s Secret) Len() int { return len(s.b) }

const redacted = "***"

// String implements fmt.Stringer.
func (Secret) String() string { return redacted }

// GoString implements fmt.GoStringer (the %#v verb).
func (Secret) GoString() string { return redacted }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// Format implements fmt.Formatter so that every verb (%v %+v %x %q ...) redacts.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalText redacts in text encodings (JSON, YAML) too.
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Credential is a resolved Redis credential: an ACL user (possibly empty for
// the default user) and its password.
type Credential struct {
	Ref      SecretRef
	User     string
	Password Secret
}

// IsZero reports whether no credential was configured.
func (c Credential) IsZero() bool { return c.Ref.IsZero() && c.Password.IsZero() && c.User == "" }
