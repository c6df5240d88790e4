package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/caphost/caphost/host/internal/logsample"
	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// Options configure New.
type Options struct {
	// Policies say how rules without a caphost block become caphost
	// policies (algorithm, failure mode). Its LocalEmergency is set from
	// LocalEmergency below.
	Policies rlsconfig.PolicyOptions
	// LocalEmergency is the process-local emergency limiter that
	// local-emergency rules fall back to when Redis cannot decide (nil:
	// none, and such a rule is a configuration error).
	LocalEmergency *ratelimit.LocalEmergencyConfig
	// RedisRole holds the counters (default coordination; never cache).
	RedisRole policy.Role
	// AttemptTimeout bounds one program call (0: the request's deadline).
	AttemptTimeout time.Duration
	// ResponseHeaders adds RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset for Envoy to forward, from the descriptor closest to
	// its limit (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED).
	ResponseHeaders bool
	// HeaderNames rename those headers (envoyproxy/ratelimit's
	// LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER); an
	// empty name keeps the default. Each must be a valid header name
	// (rlsconfig.ValidHeaderName), the three distinct, and only with
	// ResponseHeaders.
	HeaderNames HeaderNames
	// ShadowMode is service-wide shadow (envoyproxy/ratelimit's
	// SHADOW_MODE): every descriptor is decided and counted as usual and
	// keeps its own status, but a call whose overall code would be
	// OVER_LIMIT is answered OK and counted in
	// caphost_envoy_rls_global_shadow_total, so Envoy never limits. Rules'
	// own shadow_mode is unaffected.
	ShadowMode bool
	// Selector, when set, answers its domains through the rate-limit
	// capability's selector (a rate-policy guest) instead of cfg.
	Selector *SelectorMapping
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Registerer receives the service's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Now is the clock of unit-aligned resets (default time.Now).
	Now func() time.Time
}

// MetricPrefix prefixes the names of the service's limiter metrics
// (envoy_rls_caphost_rate_...): the same series the rate-limit capability
// exports, for the Envoy rules.
const MetricPrefix = "envoy_rls_"

// Response header names (envoyproxy/ratelimit's defaults).
const (
	HeaderLimit     = rlsconfig.DefaultHeaderLimit
	HeaderRemaining = rlsconfig.DefaultHeaderRemaining
	HeaderReset     = rlsconfig.DefaultHeaderReset
)

// HeaderNames are the names of the three response headers.
type HeaderNames struct{ Limit, Remaining, Reset string }

// resolve fills the defaults and checks the names.
func (n HeaderNames) resolve(enabled bool) (HeaderNames, error) {
	if !enabled && n != (HeaderNames{}) {
		return n, fmt.Errorf("%w: header names without response headers", ratelimit.ErrConfig)
	}
	for _, f := range []struct {
		name *string
		def  string
	}{{&n.Limit, HeaderLimit}, {&n.Remaining, HeaderRemaining}, {&n.Reset, HeaderReset}} {
		if *f.name == "" {
			*f.name = f.def
		}
		if !rlsconfig.ValidHeaderName(*f.name) {
			return n, fmt.Errorf("%w: a header name is 1..%d bytes of an HTTP token", ratelimit.ErrConfig, rlsconfig.MaxHeaderNameBytes)
		}
	}
	if !rlsconfig.DistinctHeaderNames(n.Limit, n.Remaining, n.Reset) {
		return n, fmt.Errorf("%w: the three header names must differ", ratelimit.ErrConfig)
	}
	return n, nil
}

// Service implements envoy.service.ratelimit.v3.RateLimitService over
// caphost's rate limiter. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	// cur is the mapping requests are answered from; Reload replaces it.
	cur      atomic.Pointer[mapping]
	lim      *ratelimit.Limiter
	popts    rlsconfig.PolicyOptions
	reloadMu sync.Mutex // serialises Reload (build, swap, store)
	sel      *SelectorMapping
	headers  bool
	names    HeaderNames
	shadow   bool // service-wide shadow (Options.ShadowMode)
	refusals *logsample.Sampler
	log      *slog.Logger
	now      func() time.Time
	m        *metrics
}

// mapping is one loaded configuration: its rules and the policy id of each
// counted rule. A request reads it once, so it is answered by one mapping
// even when a reload lands meanwhile.
type mapping struct {
	cfg   *rlsconfig.Config
	ids   map[*rlsconfig.Rule]string
	decls []policy.RatePolicyDecl // cfg's own
	set   *policy.RatePolicySet   // decls and what is carried from the previous mapping
	// detailed holds the rule label (KeyPath) of each rule with
	// detailed_metric.
	detailed map[*rlsconfig.Rule]string
}

// New builds the service: every counted rule of cfg becomes a caphost rate
// policy (see rlsconfig.Policies) evaluated by a limiter of its own on the
// runtime's role, so Envoy's rules never mix with the rate-limit
// capability's policies or their metrics.
func New(rt *runtime.Runtime, cfg *rlsconfig.Config, o Options) (*Service, error) {
	if rt == nil || cfg == nil {
		return nil, fmt.Errorf("%w: New needs a runtime and a descriptor configuration", ratelimit.ErrConfig)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	rc := ratelimit.Config{Provider: ratelimit.ProviderRedis, RedisRole: o.RedisRole,
		DegradedProvider: ratelimit.DegradedDisabled, AttemptTimeout: o.AttemptTimeout}
	o.Policies.LocalEmergency = nil
	if le := o.LocalEmergency; le != nil {
		rc.DegradedProvider, rc.LocalEmergency = ratelimit.DegradedLocalEmergency, le
		o.Policies.LocalEmergency = &policy.RateLocalEmergency{AssumedMaxPods: le.AssumedMaxPods, PerPodShare: le.PerPodShare}
	}
	names, err := o.HeaderNames.resolve(o.ResponseHeaders)
	if err != nil {
		return nil, err
	}
	s := &Service{popts: o.Policies, sel: o.Selector, headers: o.ResponseHeaders, names: names, shadow: o.ShadowMode, log: o.Log, now: o.Now,
		refusals: logsample.New(refusalLogsPerMinute, o.Now)}
	mp, err := s.build(cfg, nil)
	if err != nil {
		return nil, err
	}
	if s.sel != nil {
		if err := errors.Join(s.sel.check(), s.disjoint(cfg)); err != nil {
			return nil, err
		}
	}
	if s.m, err = newMetrics(o.Registerer); err != nil {
		return nil, err
	}
	// The limiter's metrics carry the rate-limit capability's names, so
	// they are registered under a prefix of their own. It exists even with
	// no counted rule, so that a reload can add some.
	opts := []ratelimit.Option{ratelimit.WithLogger(o.Log)}
	if o.Registerer != nil {
		opts = append(opts, ratelimit.WithRegisterer(prometheus.WrapRegistererWithPrefix(MetricPrefix, o.Registerer)))
	}
	if s.lim, err = ratelimit.New(rt, rc, mp.set, opts...); err != nil {
		return nil, err
	}
	s.cur.Store(mp)
	s.logRules(mp)
	return s, nil
}

// build turns a configuration into a mapping. Its policy set also keeps
// the policies of prev (the mapping being replaced) that cfg drops, so
// that a request still answered from prev finds its policy; they are
// dropped at the next reload. A policy cfg changes in place (same rule,
// new limit) is cfg's: such a request is answered with the new limit.
func (s *Service) build(cfg *rlsconfig.Config, prev *mapping) (*mapping, error) {
	decls, ids, err := rlsconfig.Policies(cfg, s.popts)
	if err != nil {
		return nil, err
	}
	all := decls
	if prev != nil {
		all = slices.Clip(decls)
		have := make(map[string]bool, len(decls))
		for _, d := range decls {
			have[d.ID] = true
		}
		for _, d := range prev.decls {
			if !have[d.ID] && len(all) < policy.RateMaxPolicies {
				all = append(all, d)
			}
		}
	}
	set, err := policy.CompileRatePolicies(all, policy.RateCompileOptions{PathPrefix: "envoy-rate-limit", LocalEmergency: s.popts.LocalEmergency})
	if err != nil {
		return nil, err
	}
	detailed := map[*rlsconfig.Rule]string{}
	for _, r := range cfg.Rules() {
		if r.DetailedMetric {
			detailed[r] = r.KeyPath()
		}
	}
	return &mapping{cfg: cfg, ids: ids, decls: decls, set: set, detailed: detailed}, nil
}

// logRules logs, once per load, which rule each policy id and rule label
// stands for: the ids (envoy-<hex>) name the limiter's metrics and logs,
// the labels caphost_envoy_rls_rule_descriptors_total.
func (s *Service) logRules(mp *mapping) {
	for _, r := range mp.cfg.Rules() {
		id, counted := mp.ids[r]
		if !counted && !r.DetailedMetric {
			continue
		}
		s.log.Info("envoy rate-limit rule", "policy", id, "rule", r.KeyPath(), "where", r.Where, "detailed_metric", r.DetailedMetric)
	}
}

// disjoint refuses a configuration that defines a selector-mapped domain.
func (s *Service) disjoint(cfg *rlsconfig.Config) error {
	if s.sel == nil {
		return nil
	}
	for _, d := range s.sel.Domains {
		if cfg.HasDomain(d) {
			return fmt.Errorf("%w: domain %q is both in the descriptor configuration and answered by the selector", ratelimit.ErrConfig, d)
		}
	}
	return nil
}

// selected reports whether the selector answers domain.
func (s *Service) selected(domain string) bool {
	return s.sel != nil && slices.Contains(s.sel.Domains, domain)
}

// Reload replaces the descriptor configuration atomically: requests that
// started on the old one finish on it, later ones use cfg. Rules whose
// place and behaviour are unchanged keep their counters (their policy id
// and revision are the same); a changed limit or mode starts fresh under a
// new revision. A configuration that cannot be served is refused with
// every problem and the old one keeps serving. Every outcome is counted in
// caphost_envoy_rls_reloads_total{result}.
func (s *Service) Reload(cfg *rlsconfig.Config) error {
	if cfg == nil {
		return s.reloaded(fmt.Errorf("%w: Reload needs a descriptor configuration", ratelimit.ErrConfig))
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	mp, err := s.build(cfg, s.cur.Load())
	if err == nil {
		err = s.disjoint(cfg)
	}
	if err == nil {
		// The limiter gets the new policies before any request can ask
		// for them.
		err = s.lim.Swap(mp.set)
	}
	if err != nil {
		return s.reloaded(err)
	}
	old := s.cur.Swap(mp)
	// A rule label the new mapping lacks loses its series, so that the
	// labels stay those of the configuration being served.
	keep := make(map[string]bool, len(mp.detailed))
	for _, label := range mp.detailed {
		keep[label] = true
	}
	for _, label := range old.detailed {
		if !keep[label] {
			s.m.rules.DeletePartialMatch(prometheus.Labels{"rule": label})
		}
	}
	return s.reloaded(nil)
}

// ReloadFiles reads and checks the descriptor files (see
// rlsconfig.LoadFiles) and Reloads them. A file that cannot be read or
// parsed is refused like any bad configuration.
func (s *Service) ReloadFiles(files []string) error {
	cfg, err := rlsconfig.LoadFiles(files)
	if err != nil {
		return s.reloaded(err)
	}
	return s.Reload(cfg)
}

func (s *Service) reloaded(err error) error {
	if err != nil {
		s.m.reloads.WithLabelValues(reloadFailed).Inc()
		// Problems name files, lines and descriptor paths of the
		// operator's configuration: no request data.
		s.log.Error("envoy rate-limit configuration refused; the previous one keeps serving", "error", err.Error())
		return err
	}
	s.m.reloads.WithLabelValues(reloadOK).Inc()
	mp := s.cur.Load()
	s.log.Info("envoy rate-limit configuration reloaded", "rules", len(mp.cfg.Rules()), "policies", len(mp.ids))
	s.logRules(mp)
	return nil
}

// Reload results (metric label values).
const (
	reloadOK     = "ok"
	reloadFailed = "failed"
)

// ShouldRateLimit decides every descriptor of the request. Each matched,
// counted descriptor is one evaluation of its rule's policy at cost
// hits_addend; the overall code is OVER_LIMIT when any descriptor is. A
// descriptor outside the bounds or using what caphost cannot act on (see
// Validate) is answered OVER_LIMIT on its own and counts nothing; only a
// request without a usable domain or without descriptors is an
// InvalidArgument.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	v, err := Validate(req)
	if err != nil {
		s.m.requests.WithLabelValues(requestInvalid).Inc()
		return nil, err
	}
	n := len(req.Descriptors)
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, n),
	}
	if n > MaxDescriptors {
		// Every descriptor is refused alike; nothing is decided.
		st := s.refuse(v.Refused[0], n)
		for i := range resp.Statuses {
			resp.Statuses[i] = st
		}
	} else {
		mp := s.cur.Load()
		rid := requestID(ctx)
		selected := s.selected(req.Domain)
		one := func(i int) *rlsv3.RateLimitResponse_DescriptorStatus {
			if r := v.Refused[i]; r != nil {
				return s.refuse(r, 1)
			}
			if selected {
				q, r := selectorQuery(i, req.Descriptors[i].Entries, v.Costs[i])
				if r != nil {
					return s.refuse(r, 1)
				}
				return s.decideSelected(ctx, q, rid, i)
			}
			return s.decide(ctx, mp, rid, i, req.Domain, req.Descriptors[i].Entries, v.Costs[i])
		}
		if n == 1 {
			resp.Statuses[0] = one(0)
		} else {
			// Descriptors are independent decisions (upstream pipelines
			// them too, never atomically): deciding them at once lets the
			// limiter share one pipeline among them. Identical
			// descriptors share a counter, so each group of them is
			// decided in request order, as upstream's pipeline applies
			// its INCRBYs: the earlier descriptor is charged first.
			first := sameAs(req.Descriptors)
			var wg sync.WaitGroup
			for i := range n {
				if first[i] != i {
					continue
				}
				wg.Go(func() {
					for j := i; j < n; j++ {
						if first[j] == i {
							resp.Statuses[j] = one(j)
						}
					}
				})
			}
			wg.Wait()
		}
	}
	// The response headers show the descriptor closest to its limit: the
	// last one over it, else the one with the least remaining. A refused
	// descriptor has no limit to show.
	var closest *rlsv3.RateLimitResponse_DescriptorStatus
	for _, st := range resp.Statuses {
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		switch {
		case st.CurrentLimit == nil:
		case st.Code == rlsv3.RateLimitResponse_OVER_LIMIT:
			closest = st
		case closest == nil || (closest.Code == rlsv3.RateLimitResponse_OK && st.LimitRemaining < closest.LimitRemaining):
			closest = st
		}
	}
	if s.headers && closest != nil {
		resp.ResponseHeadersToAdd = s.names.of(closest)
	}
	if s.shadow && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		// Service-wide shadow: the statuses and headers stay what they
		// are, only the code Envoy acts on says OK.
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		s.m.globalShadow.Inc()
	}
	s.m.requests.WithLabelValues(codeLabel(resp.OverallCode)).Inc()
	return resp, nil
}

// sameAs maps each descriptor's index to the index of the first
// descriptor with the same entries (the same keys and values in the same
// order): its own when none comes before it. There are at most
// MaxDescriptors, so comparing pairs costs less than keying a map by the
// entries.
func sameAs(ds []*commonv3.RateLimitDescriptor) []int {
	first := make([]int, len(ds))
	for i, d := range ds {
		first[i] = i
		for j := range i {
			if first[j] == j && slices.EqualFunc(ds[j].GetEntries(), d.GetEntries(), sameEntry) {
				first[i] = j
				break
			}
		}
	}
	return first
}

func sameEntry(a, b *ratelimitEntry) bool {
	return a.GetKey() == b.GetKey() && a.GetValue() == b.GetValue()
}

// refuse answers n descriptors refused for r: OVER_LIMIT, nothing counted
// — fail closed, and in-band, because Envoy's default lets a request whose
// rate-limit call failed through. It counts them by reason and logs the
// refusal (field and sizes, never a key or value), sampled: the cause may
// be a client sending one oversized header after another.
func (s *Service) refuse(r *Refusal, n int) *rlsv3.RateLimitResponse_DescriptorStatus {
	s.m.descriptors.WithLabelValues(resultInvalid).Add(float64(n))
	s.refused(r, n)
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT}
}

// refused counts and logs n refusals for r.
func (s *Service) refused(r *Refusal, n int) {
	s.m.invalid.WithLabelValues(string(r.Reason)).Add(float64(n))
	if s.refusals.Take() {
		s.log.Warn("envoy rate-limit descriptor refused; answered OVER_LIMIT", "reason", string(r.Reason), "field", r.Field,
			"detail", r.Detail, "descriptors", n)
	}
}

// refusalLogsPerMinute bounds the refusal log lines; the metric counts
// every refusal.
const refusalLogsPerMinute = 10

// Descriptor results (metric label values).
const (
	resultOK          = "ok"
	resultOverLimit   = "over_limit"
	resultNoRule      = "no_rule"
	resultUnlimited   = "unlimited"
	resultShadowOver  = "shadow_over_limit"
	resultShadow      = "shadow"
	resultUnavailable = "unavailable"
	resultFailOpen    = "fail_open"
	resultLocal       = "local_emergency"
	resultInvalid     = "invalid"
)

// requestInvalid labels a request refused with InvalidArgument.
const requestInvalid = "invalid"

// decide answers one descriptor and counts its result, per rule too for
// a rule with detailed_metric.
func (s *Service) decide(ctx context.Context, mp *mapping, rid string, i int, domain string, entries []*ratelimitEntry, cost int64) *rlsv3.RateLimitResponse_DescriptorStatus {
	es := make([]rlsconfig.Entry, len(entries))
	for j, e := range entries {
		es[j] = rlsconfig.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	rule := mp.cfg.Match(domain, es)
	st, result := s.decideRule(ctx, mp, rid, i, domain, es, rule, cost)
	s.m.descriptors.WithLabelValues(result).Inc()
	if label, ok := mp.detailed[rule]; ok {
		s.m.rules.WithLabelValues(label, result).Inc()
	}
	return st
}

// decideRule answers a descriptor matched to rule (nil: none) and names
// its result.
// The descriptor's evaluation id, for rules with dedup, is the request's
// x-request-id and the descriptor's index (so that two descriptors of one
// request are two evaluations); without one the limiter mints its own.
func (s *Service) decideRule(ctx context.Context, mp *mapping, rid string, i int, domain string, es []rlsconfig.Entry, rule *rlsconfig.Rule, cost int64) (*rlsv3.RateLimitResponse_DescriptorStatus, string) {
	switch {
	case rule == nil:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, resultNoRule
	case rule.Unlimited:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}, resultUnlimited
	}
	limit := currentLimit(rule)
	if cost == 0 && rule.RequestsPerUnit > 0 {
		// hits_addend 0 asks whether the descriptor is over its limit
		// without counting (upstream's INCRBY 0). caphost's limiter cannot
		// evaluate a limit without consuming from it, so the check fails
		// closed; a shadow rule, which never limits, answers OK.
		s.refused(&Refusal{Reason: ReasonCheckOnly, Field: fmt.Sprintf("descriptors[%d].hits_addend", i),
			Detail: "0 (a check without counting) is not supported by caphost on a counted rule"}, 1)
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: limit}
		if rule.Shadow {
			st.Code = rlsv3.RateLimitResponse_OK
		}
		return st, resultInvalid
	}
	if rule.RequestsPerUnit == 0 || cost > int64(rule.RequestsPerUnit) {
		// Nothing can ever be admitted: no state to consult.
		return over(rule, limit, 0, s.alignedReset(rule.Unit))
	}
	var evalID string
	if rid != "" {
		evalID = rid + "/" + strconv.Itoa(i)
	}
	o := s.lim.Evaluate(ctx, ratelimit.Request{
		Policy: mp.ids[rule], Subject: ratelimit.Subject{rlsconfig.Dimension: subjectOf(domain, es)}, Cost: cost,
		EvaluationID: evalID,
	})
	d, ok := o.Decision()
	if !ok {
		// No decision (unavailable, indeterminate, refused): the policy's
		// failure mode has already been applied and did not allow, so the
		// descriptor fails closed. It is answered OVER_LIMIT, never a gRPC
		// error, because Envoy's failure_mode_deny defaults to allowing
		// requests whose rate-limit call fails.
		// Debug only: during an outage this happens on every request; the
		// unavailable counter and the limiter's metrics carry it.
		s.log.Debug("envoy rate-limit descriptor failed closed", "policy", o.Policy(), "kind", o.Kind().String(), "category", string(o.Category()))
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: limit,
			DurationUntilReset: durationpb.New(ceilSecond(o.RetryAfter()))}, resultUnavailable
	}
	reset := d.ResetAt.Sub(s.now())
	remaining := uint32(min(max(d.Remaining, 0), math.MaxUint32))
	result := resultOK
	switch {
	case !d.Allowed:
		return over(rule, limit, remaining, reset)
	case d.Source == ratelimit.SourceShadow:
		// caphost's shadow decision allows; the limiter says whether the
		// rule would have denied (as a cost over the limit does above).
		result = shadowResult(d)
	case d.Source == ratelimit.SourceFailOpen:
		result = resultFailOpen
	case d.Source == ratelimit.SourceLocalEmergency:
		result = resultLocal
	}
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: limit,
		LimitRemaining: remaining, DurationUntilReset: durationpb.New(max(reset, 0))}, result
}

// shadowResult labels an allowing shadow decision: shadow_over_limit when
// the policy would have denied, shadow otherwise.
func shadowResult(d ratelimit.Decision) string {
	if d.ShadowDenied {
		return resultShadowOver
	}
	return resultShadow
}

// over answers a descriptor over its limit: OVER_LIMIT, or OK for a
// shadow rule.
func over(rule *rlsconfig.Rule, limit *rlsv3.RateLimitResponse_RateLimit, remaining uint32, reset time.Duration) (*rlsv3.RateLimitResponse_DescriptorStatus, string) {
	code, result := rlsv3.RateLimitResponse_OVER_LIMIT, resultOverLimit
	if rule.Shadow {
		code, result = rlsv3.RateLimitResponse_OK, resultShadowOver
	}
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: limit, LimitRemaining: remaining,
		DurationUntilReset: durationpb.New(max(reset, 0))}, result
}

// alignedReset is envoyproxy/ratelimit's reset: the end of the current
// unit, aligned to the Unix epoch.
func (s *Service) alignedReset(u rlsconfig.Unit) time.Duration {
	unit := int64(u.Duration() / time.Second)
	return time.Duration(unit-s.now().Unix()%unit) * time.Second
}

func ceilSecond(d time.Duration) time.Duration {
	return max((d+time.Second-1)/time.Second*time.Second, time.Second)
}

var units = map[rlsconfig.Unit]rlsv3.RateLimitResponse_RateLimit_Unit{
	rlsconfig.Second: rlsv3.RateLimitResponse_RateLimit_SECOND,
	rlsconfig.Minute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	rlsconfig.Hour:   rlsv3.RateLimitResponse_RateLimit_HOUR,
	rlsconfig.Day:    rlsv3.RateLimitResponse_RateLimit_DAY,
	rlsconfig.Week:   rlsv3.RateLimitResponse_RateLimit_WEEK,
	rlsconfig.Month:  rlsv3.RateLimitResponse_RateLimit_MONTH,
	rlsconfig.Year:   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

func currentLimit(r *rlsconfig.Rule) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: units[r.Unit]}
}

// subjectOf is the counter's subject: the digest of the request's domain
// and entries, so each distinct descriptor is counted apart, as
// envoyproxy/ratelimit keys it; raw values never leave this process (the
// host HMACs the digest again).
func subjectOf(domain string, es []rlsconfig.Entry) []byte { return rlsconfig.Digest(domain, es) }

func (n HeaderNames) of(st *rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	reset := int64(0)
	if st.DurationUntilReset != nil {
		reset = int64(math.Ceil(st.DurationUntilReset.AsDuration().Seconds()))
	}
	return []*corev3.HeaderValue{
		{Key: n.Limit, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
		{Key: n.Remaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: n.Reset, Value: strconv.FormatInt(reset, 10)},
	}
}

func codeLabel(c rlsv3.RateLimitResponse_Code) string {
	if c == rlsv3.RateLimitResponse_OVER_LIMIT {
		return resultOverLimit
	}
	return resultOK
}

type metrics struct {
	requests     *prometheus.CounterVec
	descriptors  *prometheus.CounterVec
	rules        *prometheus.CounterVec // rule (KeyPath), result
	invalid      *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	globalShadow prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caphost_envoy_rls_requests_total",
			Help: "ShouldRateLimit calls of the Envoy rate-limit service by overall code (ok, over_limit) or invalid (refused with InvalidArgument: no domain or no descriptors).",
		}, []string{"code"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caphost_envoy_rls_descriptors_total",
			Help: "Descriptors answered by the Envoy rate-limit service, by result.",
		}, []string{"result"}),
		rules: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caphost_envoy_rls_rule_descriptors_total",
			Help: "Descriptors answered by the Envoy rate-limit service's rules with detailed_metric: true, by rule (its configuration key path: domain, keys and configured values, never a request's) and result.",
		}, []string{"rule", "result"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caphost_envoy_rls_invalid_descriptors_total",
			Help: "Descriptors the Envoy rate-limit service refused and answered OVER_LIMIT without counting, by reason.",
		}, []string{"reason"}),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caphost_envoy_rls_global_shadow_total",
			Help: "ShouldRateLimit calls whose overall code was OVER_LIMIT and that service-wide shadow mode answered OK.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caphost_envoy_rls_reloads_total",
			Help: "Reloads of the Envoy rate-limit service's descriptor configuration, by result (ok, failed: the previous configuration keeps serving).",
		}, []string{"result"}),
	}
	for _, r := range []string{reloadOK, reloadFailed} {
		m.reloads.WithLabelValues(r)
	}
	for _, c := range []string{resultOK, resultOverLimit, requestInvalid} {
		m.requests.WithLabelValues(c)
	}
	for _, r := range []string{resultOK, resultOverLimit, resultNoRule, resultUnlimited, resultShadowOver, resultShadow, resultUnavailable, resultFailOpen, resultLocal, resultSelectorError, resultInvalid} {
		m.descriptors.WithLabelValues(r)
	}
	for _, r := range Reasons() {
		m.invalid.WithLabelValues(string(r))
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.descriptors, m.rules, m.invalid, m.reloads, m.globalShadow} {
			if err := reg.Register(c); err != nil {
				return nil, errors.Join(ratelimit.ErrConfig, err)
			}
		}
	}
	return m, nil
}
