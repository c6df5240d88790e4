package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/caphost/caphost/host/ratelimit"
)

// SelectorMapping answers the descriptors of some domains through the
// rate-limit capability's own selector — its rate-policy guest when one is
// configured — instead of a static descriptor file: the descriptor's
// entries become the selector's attributes and the subject's identity, the
// selector chooses the policies and costs, and the capability's limiter
// evaluates them (failure modes, dedup and shadow as its policies say).
//
// Entry keys are caphost's vocabulary, matched exactly, each at most once:
// the attributes route, method, principal-tier, api-key-plan,
// client-ip-class and resource-class, and the identities tenant,
// principal, api-key and client-ip (only ever digested). The hits_addend
// (the descriptor's, else the request's) multiplies the cost the selector
// sets for each policy it selects. A descriptor of such a domain with
// another key, a repeated key or a hits_addend of 0 (a check without
// counting, which caphost cannot do) is refused in-band like any invalid
// descriptor: OVER_LIMIT, nothing counted, the request's other
// descriptors decided as usual.
type SelectorMapping struct {
	Limiter  *ratelimit.Limiter
	Selector ratelimit.Selector
	// Domains are answered through the selector; none may also be in the
	// descriptor configuration.
	Domains []string
}

// Selector entry keys.
var (
	attributeKeys = []string{"route", "method", "principal-tier", "api-key-plan", "client-ip-class", "resource-class"}
	identityKeys  = []string{"tenant", "principal", "api-key", "client-ip"}
)

// SelectorKeys lists the entry keys a selector-mapped descriptor may carry.
func SelectorKeys() []string { return append(slices.Clone(attributeKeys), identityKeys...) }

// resultSelectorError labels a selector-mapped descriptor the capability
// could not decide (selection failed or refused, a missing identity).
const resultSelectorError = "selector_error"

func (m *SelectorMapping) check() error {
	if m.Limiter == nil || m.Selector == nil || len(m.Domains) == 0 {
		return fmt.Errorf("%w: a selector mapping needs a limiter, a selector and at least one domain", ratelimit.ErrConfig)
	}
	return nil
}

// selectorQuery builds the capability query of a selector-mapped
// descriptor, or why it is refused (the field, never a key or value).
func selectorQuery(i int, entries []*ratelimitEntry, cost int64) (ratelimit.Query, *Refusal) {
	var q ratelimit.Query
	if cost == 0 {
		return q, &Refusal{Reason: ReasonCheckOnly, Field: fmt.Sprintf("descriptors[%d].hits_addend", i),
			Detail: "0 (a check without counting) is not supported by caphost on a selector-mapped domain"}
	}
	q.Hits = cost
	seen := make(map[string]bool, len(entries))
	for j, e := range entries {
		k, v := e.GetKey(), e.GetValue()
		if seen[k] {
			return q, &Refusal{Reason: ReasonSelectorKey, Field: fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), Detail: "repeated"}
		}
		seen[k] = true
		switch k {
		case "route":
			q.Attributes.Route = v
		case "method":
			q.Attributes.Method = v
		case "principal-tier":
			q.Attributes.PrincipalTier = v
		case "api-key-plan":
			q.Attributes.APIKeyPlan = v
		case "client-ip-class":
			q.Attributes.ClientIPClass = v
		case "resource-class":
			q.Attributes.ResourceClass = v
		case "tenant":
			q.Identity.Tenant = v
		case "principal":
			q.Identity.Principal = v
		case "api-key":
			q.Identity.APIKey = v
		case "client-ip":
			q.Identity.ClientIP = v
		default:
			return q, &Refusal{Reason: ReasonSelectorKey, Field: fmt.Sprintf("descriptors[%d].entries[%d].key", i, j),
				Detail: fmt.Sprintf("not a selector attribute or identity (want one of %v)", SelectorKeys())}
		}
	}
	return q, nil
}

// decideSelected answers one selector-mapped descriptor.
func (s *Service) decideSelected(ctx context.Context, q ratelimit.Query, rid string, i int) *rlsv3.RateLimitResponse_DescriptorStatus {
	if rid != "" {
		q.EvaluationID = rid + "/" + fmt.Sprint(i)
	}
	m := s.sel
	o, err := m.Limiter.Decide(ctx, m.Selector, q)
	if err != nil {
		// Nothing was evaluated; never an allow (Envoy's own failure mode
		// would let a gRPC error through).
		s.m.descriptors.WithLabelValues(resultSelectorError).Inc()
		s.log.Debug("envoy rate-limit selector failed", "category", selectorCategory(err))
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT}
	}
	d, ok := o.Decision()
	if !ok {
		s.m.descriptors.WithLabelValues(resultUnavailable).Inc()
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT,
			DurationUntilReset: durationpb.New(ceilSecond(o.RetryAfter()))}
	}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK,
		CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: o.Policy(), RequestsPerUnit: uint32(min(max(d.Limit, 0), math.MaxUint32)),
			Unit: windowUnit(d.Window)},
		LimitRemaining:     uint32(min(max(d.Remaining, 0), math.MaxUint32)),
		DurationUntilReset: durationpb.New(max(d.ResetAt.Sub(s.now()), 0)),
	}
	switch {
	case !d.Allowed:
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		s.m.descriptors.WithLabelValues(resultOverLimit).Inc()
	case d.Source == ratelimit.SourceShadow:
		s.m.descriptors.WithLabelValues(shadowResult(d)).Inc()
	case d.Source == ratelimit.SourceFailOpen:
		s.m.descriptors.WithLabelValues(resultFailOpen).Inc()
	case d.Source == ratelimit.SourceLocalEmergency:
		s.m.descriptors.WithLabelValues(resultLocal).Inc()
	default:
		s.m.descriptors.WithLabelValues(resultOK).Inc()
	}
	return st
}

// windowUnit is the Envoy unit of a policy window that is exactly one
// unit as the descriptor files count them (rlsconfig.Unit.Duration: a
// week 7 days, a month 30, a year 365). Any other window (15 s, 90 s) has none and
// says UNKNOWN rather than a unit that would misstate the limit's rate.
func windowUnit(w time.Duration) rlsv3.RateLimitResponse_RateLimit_Unit {
	for u, unit := range units {
		if u.Duration() == w {
			return unit
		}
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

func selectorCategory(err error) string {
	for _, c := range []struct {
		err  error
		name string
	}{{ratelimit.ErrSelector, "selector"}, {ratelimit.ErrSelectionRefused, "refused"}, {ratelimit.ErrBadSelection, "bad-selection"},
		{ratelimit.ErrInvalidQuery, "invalid-query"}, {ratelimit.ErrNoSource, "no-source"}} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "other"
}
