package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// SecretScheme prefixes every secret reference.
const SecretScheme = "secret://"

// Bounds on the parts of a secret reference. They keep hostile configuration
// from producing huge error messages, paths or environment look-ups.
const (
	MaxSecretRefBytes  = 4096
	MaxSecretUserBytes = 64
	MaxSecretEnvBytes  = 128
)

// Errors returned by ParseSecretRef; match them with errors.Is. Their
// messages never include the offending value, because a value that is not a
// well-formed reference may well be the secret itself.
var (
	// ErrSecretLiteral: the value does not start with secret:// (a literal
	// secret pasted into configuration).
	ErrSecretLiteral = errors.New("literal value where a secret reference (secret://env/NAME or secret://file/PATH) is required")
	// ErrSecretMalformed: the value starts with secret:// but does not follow
	// the grammar.
	ErrSecretMalformed = errors.New("malformed secret reference")
)

// ParseSecretRef parses secret://[user@]env/NAME or secret://[user@]file/PATH.
// An absolute file path is written with a double slash:
// secret://file//run/secrets/x names /run/secrets/x; a single slash gives a
// relative path (host/config resolves it against the configuration file's
// directory). Paths are cleaned; NAME must be a portable environment
// variable name.
func ParseSecretRef(s string) (SecretRef, error) {
	if !strings.HasPrefix(s, SecretScheme) {
		return SecretRef{}, ErrSecretLiteral
	}
	if len(s) > MaxSecretRefBytes {
		return SecretRef{}, fmt.Errorf("%w: longer than %d bytes", ErrSecretMalformed, MaxSecretRefBytes)
	}
	rest := s[len(SecretScheme):]
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		return SecretRef{}, fmt.Errorf("%w: want secret://[user@]env/NAME or secret://[user@]file/PATH", ErrSecretMalformed)
	}
	head, name := rest[:slash], rest[slash+1:]
	var ref SecretRef
	if at := strings.IndexByte(head, '@'); at >= 0 {
		ref.User = head[:at]
		head = head[at+1:]
		if !validSecretUser(ref.User) {
			return SecretRef{}, fmt.Errorf("%w: user must be 1-%d characters of [A-Za-z0-9._-]", ErrSecretMalformed, MaxSecretUserBytes)
		}
	}
	switch SecretSource(head) {
	case SecretFromEnv:
		if !validEnvName(name) {
			return SecretRef{}, fmt.Errorf("%w: env name must match [A-Za-z_][A-Za-z0-9_]* (at most %d bytes)", ErrSecretMalformed, MaxSecretEnvBytes)
		}
		ref.Source, ref.Name = SecretFromEnv, name
	case SecretFromFile:
		// Check after cleaning: "/." or "a/.." name a directory, not a file.
		clean := path.Clean(name)
		if name == "" || clean == "/" || clean == "." || strings.ContainsRune(name, 0) {
			return SecretRef{}, fmt.Errorf("%w: file path is empty or names a directory", ErrSecretMalformed)
		}
		ref.Source, ref.Name = SecretFromFile, clean
	default:
		return SecretRef{}, fmt.Errorf("%w: source must be env or file", ErrSecretMalformed)
	}
	return ref, nil
}

func validSecretUser(u string) bool {
	if u == "" || len(u) > MaxSecretUserBytes {
		return false
	}
	for i := 0; i < len(u); i++ {
		c := u[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func validEnvName(n string) bool {
	if n == "" || len(n) > MaxSecretEnvBytes {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
