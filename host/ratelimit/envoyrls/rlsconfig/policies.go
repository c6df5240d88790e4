package rlsconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/caphost/caphost/policy"
)

// PolicyOptions say how rules become caphost rate policies.
type PolicyOptions struct {
	// Algorithm is the rate algorithm of every rule without its own
	// (Extension): fixed-window (the default: envoyproxy/ratelimit's only
	// one), sliding-counter, gcra or token-bucket (capacity
	// requests_per_unit, refilled by requests_per_unit per unit).
	Algorithm policy.RateAlgorithm
	// FailureMode is the failure mode of every rule without its own
	// (default fail-closed).
	FailureMode policy.RateFailureMode
	// LocalEmergency is the service's local emergency limiter (nil: none,
	// and a local-emergency rule is a problem).
	LocalEmergency *policy.RateLocalEmergency
	// PathPrefix prefixes the paths of problems.
	PathPrefix string
}

// Algorithms lists the algorithms a rule can map to.
func Algorithms() []policy.RateAlgorithm {
	return []policy.RateAlgorithm{policy.RateFixedWindow, policy.RateSlidingCounter, policy.RateGCRA, policy.RateTokenBucket}
}

// Dimension is the one subject dimension of every generated policy: the
// request's domain and descriptor entries, digested, are the subject.
const Dimension = policy.DimResourceClass

// Policies maps every counted rule (neither unlimited nor a limit of 0,
// which need no state) to a caphost rate policy declaration, and returns
// the policy id of each such rule. A rule's id derives from its place
// (domain and path) and its revision from its limit, algorithm and modes,
// so that changing a limit starts fresh state under a new revision while
// an unchanged rule keeps its state across reloads. Problems (too many
// rules, a limit beyond caphost's bounds, a year rule whose algorithm is
// not fixed-window) come back as a *policy.ValidationError.
//
// A year (unit year, 365 days) is one fixed window aligned to the Unix
// epoch, as upstream counts it: caphost's fixed window takes windows of
// up to 366 days, every other algorithm at most 30 days.
func Policies(c *Config, o PolicyOptions) ([]policy.RatePolicyDecl, map[*Rule]string, error) {
	if o.Algorithm == "" {
		o.Algorithm = policy.RateFixedWindow
	}
	if o.FailureMode == "" {
		o.FailureMode = policy.FailClosed
	}
	prefix := o.PathPrefix
	if prefix == "" {
		prefix = "envoy-rate-limit"
	}
	var (
		decls []policy.RatePolicyDecl
		ids   = map[*Rule]string{}
		ps    policy.Problems
	)
	for _, r := range c.rules {
		if r.Unlimited || r.RequestsPerUnit == 0 {
			continue
		}
		d := policy.RatePolicyDecl{
			ID:          "envoy-" + r.ID()[:24],
			Algorithm:   o.Algorithm,
			Dimensions:  []policy.RateDimension{Dimension},
			FailureMode: o.FailureMode,
			Shadow:      r.Shadow,
		}
		from := "the service's algorithm"
		if x := r.Caphost; x != nil {
			// The rule's own caphost block wins over the service's defaults.
			if x.Algorithm != "" {
				d.Algorithm, from = x.Algorithm, "its caphost block"
			}
			if x.FailureMode != "" {
				d.FailureMode = x.FailureMode
			}
			d.PerPodShare = x.PerPodShare
			if x.Dedup != nil {
				d.Dedup = *x.Dedup
			}
		}
		if r.Unit == Year && d.Algorithm != policy.RateFixedWindow {
			// Named here, at the rule, rather than as the compiler's window
			// bound.
			ps.Add(prefix+".window", policy.RuleRateParameters, "%s: %s", r.Where, yearNeedsFixedWindow(d.Algorithm, from))
			continue
		}
		limit, window := int64(r.RequestsPerUnit), r.Unit.Duration()
		if d.Algorithm == policy.RateTokenBucket {
			d.Parameters = policy.RateParameters{Capacity: limit, RefillTokens: limit, RefillPeriod: window}
		} else {
			d.Parameters = policy.RateParameters{Limit: limit, Window: window}
		}
		// A cost above the limit can never be admitted; the front end
		// answers it OVER_LIMIT without a call.
		d.MaxCost = min(limit, policy.RateMaxLimit)
		d.Revision = revision(d)
		ids[r] = d.ID
		decls = append(decls, d)
	}
	if _, err := policy.CompileRatePolicies(decls, policy.RateCompileOptions{PathPrefix: prefix, LocalEmergency: o.LocalEmergency}); err != nil {
		err = locate(err, prefix, ids)
		var verr *policy.ValidationError
		if len(ps) == 0 || !errors.As(err, &verr) {
			return nil, nil, err
		}
		ps = append(ps, verr.Problems...)
	}
	if err := ps.Err(); err != nil {
		return nil, nil, err
	}
	return decls, ids, nil
}

// revision digests what changes a rule's behaviour.
func revision(d policy.RatePolicyDecl) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%d|%d|%d|%d|%d|%s|%t|%d", d.Algorithm, d.Parameters.Limit, d.Parameters.Window,
		d.Parameters.Capacity, d.Parameters.RefillTokens, d.Parameters.RefillPeriod, d.FailureMode, d.Shadow, d.MaxCost)
	// Written only when set, so that rules without a caphost block keep
	// the revisions (and so the state) they had before the extension.
	if d.PerPodShare != 0 || d.Dedup.Enabled {
		fmt.Fprintf(h, "|%g|%t|%d|%d", d.PerPodShare, d.Dedup.Enabled, d.Dedup.TTL, d.Dedup.MaxEntries)
	}
	return "r" + hex.EncodeToString(h.Sum(nil))[:20]
}

// locate names the rule behind each problem of a generated policy: its
// file, line and descriptor path rather than a digest id.
func locate(err error, prefix string, ids map[*Rule]string) error {
	var verr *policy.ValidationError
	if !errors.As(err, &verr) {
		return err
	}
	where := make(map[string]string, len(ids))
	for r, id := range ids {
		where[prefix+"."+id] = r.Where
	}
	for i, p := range verr.Problems {
		for pre, w := range where {
			if rest, ok := strings.CutPrefix(p.Path, pre); ok {
				verr.Problems[i].Path = prefix + rest
				verr.Problems[i].Message = w + ": " + p.Message
				break
			}
		}
	}
	return verr
}
