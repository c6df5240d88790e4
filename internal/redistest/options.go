package redistest

import (
	"fmt"
	"strings"
)

// ACLUser is an ACL user created on every data node (and, for sentinel
// deployments, on the monitored servers). Rules are passed to Redis verbatim,
// e.g. "~ca:*", "+@all", "-@dangerous". An empty Password means "nopass".
type ACLUser struct {
	Name     string
	Password string
	Rules    []string
}

// Option customises a server, cluster or sentinel deployment.
type Option func(*options)

type directive struct{ name, value string }

type options struct {
	acl   bool
	users []ACLUser
	tls   bool
	extra []directive
}

// WithACL turns the default user off and adds the given users. An "admin" user
// with full rights is always added so the harness itself can operate.
func WithACL(users ...ACLUser) Option {
	return func(o *options) {
		o.acl = true
		o.users = append(o.users, users...)
	}
}

// WithTLS makes every server listen on a TLS-only port. Certificates (a CA, a
// server certificate for 127.0.0.1/localhost and a client certificate) are
// generated at test time.
func WithTLS() Option {
	return func(o *options) { o.tls = true }
}

// WithConfig adds a redis.conf directive, e.g. ("maxmemory-policy", "allkeys-lfu").
// It is applied to data nodes only, never to sentinels, and written after the
// harness's own lines, so it overrides them (Redis keeps the last value).
func WithConfig(directive, value string) Option {
	return func(o *options) { o.extra = append(o.extra, directiveOf(directive, value)) }
}

func directiveOf(name, value string) directive { return directive{name: name, value: value} }

func buildOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// validate rejects option values that would let a test smuggle extra lines or
// words into redis.conf: the harness writes them verbatim.
func (o *options) validate() error {
	for _, d := range o.extra {
		if d.name == "" || strings.ContainsAny(d.name, " \t\r\n\"") || strings.ContainsAny(d.value, "\r\n") {
			return fmt.Errorf("redistest: invalid config directive %q", d.name)
		}
	}
	seen := map[string]bool{adminUser: true, discoveryUser: true}
	for _, u := range o.users {
		if !validWord(u.Name) {
			return fmt.Errorf("redistest: invalid ACL user name %q", u.Name)
		}
		if seen[u.Name] {
			return fmt.Errorf("redistest: ACL user %q is reserved or duplicated", u.Name)
		}
		seen[u.Name] = true
		if u.Password != "" && !validWord(u.Password) {
			return fmt.Errorf("redistest: ACL user %q: password must not contain spaces or quotes", u.Name)
		}
		for _, r := range u.Rules {
			if !validWord(r) {
				return fmt.Errorf("redistest: ACL user %q: invalid rule %q", u.Name, r)
			}
		}
	}
	return nil
}

func validWord(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n\"'")
}
