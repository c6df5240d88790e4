package config

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"

	"github.com/caphost/caphost/policy"
)

// secret parses and resolves a secret reference at path. Problems name the
// field and, for a well-formed reference, the variable or file (references
// are not secret); they never echo a rejected value or resolved material.
func (d *decoder) secret(path string, v any) (policy.SecretRef, policy.Secret, bool) {
	s, ok := d.Str(path, v)
	if !ok {
		return policy.SecretRef{}, policy.Secret{}, false
	}
	ref, err := policy.ParseSecretRef(s)
	if err != nil {
		if errors.Is(err, policy.ErrSecretLiteral) {
			d.Problems.Add(path, policy.RuleSecretLiteral, "literal secrets are not accepted; use secret://env/NAME or secret://file/PATH")
		} else {
			d.Problems.Add(path, policy.RuleSecretMalformed, "%v", err)
		}
		return policy.SecretRef{}, policy.Secret{}, false
	}
	switch ref.Source {
	case policy.SecretFromEnv:
		val, ok := d.lookup(ref.Name)
		if !ok {
			d.Problems.Add(path, policy.RuleSecretEnvMissing, "environment variable %s is not set", ref.Name)
			return ref, policy.Secret{}, false
		}
		if len(val) > MaxSecretBytes {
			d.Problems.Add(path, policy.RuleSecretTooLarge, "environment variable %s exceeds %d bytes", ref.Name, MaxSecretBytes)
			return ref, policy.Secret{}, false
		}
		if val == "" {
			d.Problems.Add(path, policy.RuleSecretEmpty, "environment variable %s resolved to nothing", ref.Name)
			return ref, policy.Secret{}, false
		}
		return ref, policy.NewSecret([]byte(val)), true
	default:
		b, rule, msg := readSecretFile(d.resolvePath(ref.Name))
		if rule != "" {
			d.Problems.Add(path, rule, "file %s %s", ref.Name, msg)
			return ref, policy.Secret{}, false
		}
		sec := policy.NewSecret(b)
		clear(b)
		return ref, sec, true
	}
}

// credential resolves a reference into a Redis credential; the reference's
// user@ part becomes the ACL user (empty: the default user).
func (d *decoder) credential(path string, v any) (policy.Credential, bool) {
	ref, sec, ok := d.secret(path, v)
	if !ok {
		return policy.Credential{}, false
	}
	return policy.Credential{Ref: ref, User: ref.User, Password: sec}, true
}

func (d *decoder) resolvePath(p string) string {
	if filepath.IsAbs(p) || d.base == "" {
		return p
	}
	return filepath.Join(d.base, p)
}

// readSecretFile reads at most MaxSecretBytes from a regular file and trims
// one trailing newline (files written by editors and `echo` end with one).
func readSecretFile(p string) ([]byte, policy.Rule, string) {
	f, err := os.Open(p)
	if err != nil {
		return nil, policy.RuleSecretFile, "cannot be opened"
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, policy.RuleSecretFile, "is not a regular file"
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretBytes+1))
	if err != nil {
		return nil, policy.RuleSecretFile, "cannot be read"
	}
	if len(b) > MaxSecretBytes {
		clear(b)
		return nil, policy.RuleSecretTooLarge, "exceeds the secret size limit (64 KiB)"
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return nil, policy.RuleSecretEmpty, "resolved to nothing"
	}
	return b, "", ""
}
