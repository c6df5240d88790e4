package rlsconfig

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/caphost/caphost/policy"
)

// ExtensionField is the descriptor field of caphost's extension to
// envoyproxy/ratelimit's format. It sits beside rate_limit on a counted
// descriptor and says, for that rule alone, what the upstream format cannot:
//
//	descriptors:
//	  - key: remote_address
//	    rate_limit: {unit: second, requests_per_unit: 10}
//	    caphost:
//	      algorithm: gcra                  # fixed-window, sliding-counter, gcra, token-bucket
//	      failure_mode: local-emergency    # fail-closed, fail-open, local-emergency
//	      per_pod_share: 0.25              # local-emergency only
//	      dedup: {ttl: 30s, max_entries: 64}   # or dedup: true
//
// A file without it is an upstream file, unchanged; a file with it is
// caphost's (upstream refuses the unknown key, so it cannot be served by
// envoyproxy/ratelimit by mistake with different semantics).
const ExtensionField = "caphost"

// Extension is a rule's caphost block. A zero field inherits the service's
// PolicyOptions.
type Extension struct {
	// Algorithm is one of Algorithms().
	Algorithm policy.RateAlgorithm
	// FailureMode is fail-closed, fail-open or local-emergency (the latter
	// needs the service's local emergency limiter, PolicyOptions.LocalEmergency).
	FailureMode policy.RateFailureMode
	// PerPodShare overrides the local emergency limiter's share for this
	// rule (local-emergency only).
	PerPodShare float64
	// Dedup turns on evaluation-id dedup for the rule (nil: off), which
	// also lets the limiter retry a call whose outcome it could not see.
	Dedup *policy.RateDedup
}

// extension decodes a caphost block. Bounds the policy compiler owns
// (dedup ttl and entries, the per-pod share's product with the assumed
// pods) are checked when the rule becomes a policy (Policies), located at
// the rule.
func (p *parser) extension(path string, n *yaml.Node) *Extension {
	f, ok := p.fields(path, n, "algorithm", "failure_mode", "per_pod_share", "dedup")
	if !ok {
		return nil
	}
	x := &Extension{}
	if v, ok := f["algorithm"]; ok {
		if s, ok := p.str(join(path, "algorithm"), v); ok {
			if a := policy.RateAlgorithm(s); slices.Contains(Algorithms(), a) {
				x.Algorithm = a
			} else {
				p.add(join(path, "algorithm"), v, "invalid algorithm %q (want %s)", clip(s), joinNames(Algorithms()))
			}
		}
	}
	if v, ok := f["failure_mode"]; ok {
		if s, ok := p.str(join(path, "failure_mode"), v); ok {
			if m := policy.RateFailureMode(s); slices.Contains(policy.RateFailureModes(), m) {
				x.FailureMode = m
			} else {
				p.add(join(path, "failure_mode"), v, "invalid failure mode %q (want %s)", clip(s), joinNames(policy.RateFailureModes()))
			}
		}
	}
	if v, ok := f["per_pod_share"]; ok {
		share, err := strconv.ParseFloat(v.Value, 64)
		switch {
		case v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!float" && v.ShortTag() != "!!int") || err != nil:
			p.add(join(path, "per_pod_share"), v, "want a number within (0, 1], got %s", kindName(v))
		case !(share > 0 && share <= 1):
			p.add(join(path, "per_pod_share"), v, "must be within (0, 1]")
		case x.FailureMode != policy.FailLocal:
			p.add(join(path, "per_pod_share"), v, "applies only with failure_mode: local-emergency")
		default:
			x.PerPodShare = share
		}
	}
	if v, ok := f["dedup"]; ok {
		x.Dedup = p.dedup(join(path, "dedup"), v)
	}
	return x
}

// dedup decodes `dedup: true|false` or `dedup: {ttl, max_entries}`.
func (p *parser) dedup(path string, n *yaml.Node) *policy.RateDedup {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		if on, _ := strconv.ParseBool(strings.ToLower(n.Value)); on {
			return &policy.RateDedup{Enabled: true}
		}
		return nil
	}
	f, ok := p.fields(path, n, "ttl", "max_entries")
	if !ok {
		return nil
	}
	d := &policy.RateDedup{Enabled: true}
	if v, ok := f["ttl"]; ok {
		s, ok := p.str(join(path, "ttl"), v)
		ttl, err := time.ParseDuration(s)
		switch {
		case !ok:
		case v.ShortTag() != "!!str" || err != nil:
			p.add(join(path, "ttl"), v, "want a duration such as 30s")
		case ttl <= 0:
			p.add(join(path, "ttl"), v, "must be positive")
		default:
			d.TTL = ttl
		}
	}
	if v, ok := f["max_entries"]; ok {
		n, err := strconv.ParseInt(v.Value, 10, 32)
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || err != nil || n < 1 {
			p.add(join(path, "max_entries"), v, "want a positive integer")
		} else {
			d.MaxEntries = int(n)
		}
	}
	return d
}

func joinNames[T ~string](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}
