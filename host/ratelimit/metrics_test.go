package ratelimit

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestMetricLabelsAreBounded drives every outcome kind with recognisable
// subject values and enumerates every label of every series: only the
// documented label names appear, and no subject value ever does.
func TestMetricLabelsAreBounded(t *testing.T) {
	s := redistest.StartStandalone(t)
	local := fixedWindow("local", 100)
	local.FailureMode = policy.FailLocal
	sh := fixedWindow("sh", 1)
	sh.Shadow = true
	f := newFixture(t, s.Addr(), s, localCfg(), nil, fixedWindow("p", 1), local, sh, dedupWindow("dd", 5))
	ctx := ctxT(t)
	subjects := []string{"tenant-secret-alice", "203.0.113.99", "apikey-SECRET"}
	for _, sub := range subjects {
		for _, id := range []string{"p", "p", "sh", "sh", "dd", "ghost-policy-from-caller"} {
			r := req(id, sub)
			r.EvaluationID = "eval-" + sub
			f.l.Evaluate(ctx, r)
		}
	}
	s.Kill()
	for _, sub := range subjects {
		f.l.Evaluate(ctx, req("local", sub))
		f.l.Evaluate(ctx, req("p", sub))
	}
	allowed := map[string]bool{"policy": true, "revision": true, "decision": true, "source": true, "kind": true, "reason": true}
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, mf := range mfs {
		require.True(t, strings.HasPrefix(mf.GetName(), "caphost_rate_"), mf.GetName())
		seen[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				assert.True(t, allowed[lp.GetName()], "label %s", lp.GetName())
				for _, sub := range subjects {
					assert.NotContains(t, lp.GetValue(), sub)
				}
				assert.NotContains(t, lp.GetValue(), "ghost")
				assert.NotContains(t, lp.GetValue(), "eval-")
			}
		}
	}
	for _, name := range []string{"caphost_rate_decisions_total", "caphost_rate_enforcement_total", "caphost_rate_shadow_would_deny_total", "caphost_rate_outcomes_total"} {
		assert.True(t, seen[name], name)
	}
	assert.Equal(t, 3.0, counter(t, f.reg, "caphost_rate_decisions_total", map[string]string{"policy": "unknown", "decision": "unavailable"}))
}
