package cache

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// modelEntry is what the reference model believes a key's entry key holds.
type modelEntry struct {
	kind    string // "", "value", "negative", "tombstone"
	value   string
	rev     uint64 // 0: no revision
	written time.Time
}

// model is a pure-Go reference of one region's observable behaviour on one
// host, written from the contract rather than the implementation: it knows
// the TTLs and the jitter bound (10 %: a TTL lands in [0.9·ttl, ttl]) but
// not the jitter draws, so near an expiry it accepts either side.
type model struct {
	entries map[string]*modelEntry
	now     time.Time
}

const (
	mSoft, mHard, mNeg = 10 * time.Second, time.Minute, 5 * time.Second
	mJitter            = 0.1
)

// expect returns the acceptable lookup outcomes for key, as strings.
func (m *model) expect(key string) []string {
	e := m.entries[key]
	if e == nil || e.kind == "" {
		return []string{"MISS/ABSENT"}
	}
	if e.kind == "tombstone" {
		return []string{"MISS/INVALIDATED"}
	}
	age := m.now.Sub(e.written)
	within := func(ttl time.Duration) (sure, maybe bool) { // before the jittered ttl?
		lo := time.Duration(float64(ttl) * (1 - mJitter))
		return age < lo, age < ttl
	}
	if e.kind == "negative" {
		sure, maybe := within(mNeg)
		switch {
		case sure:
			return []string{"NEGATIVE_HIT"}
		case maybe:
			return []string{"NEGATIVE_HIT", "MISS/EXPIRED"}
		}
		return []string{"MISS/EXPIRED"}
	}
	hit := "HIT/" + e.value
	freshSure, freshMaybe := within(mSoft)
	hardSure, hardMaybe := within(mHard)
	var out []string
	if freshMaybe {
		out = append(out, hit+"/FRESH")
	}
	if !freshSure && hardMaybe {
		out = append(out, hit+"/STALE")
	}
	if !hardSure {
		out = append(out, "MISS/EXPIRED")
	}
	return out
}

// record applies a write the way the contract says and returns the
// expected outcome.
func (m *model) record(key, value string, rev uint64, newer bool) string {
	e := m.entries[key]
	if newer && e != nil && e.kind == "value" && e.rev >= rev {
		return "NOT_RECORDED_CONDITION"
	}
	m.entries[key] = &modelEntry{kind: "value", value: value, rev: rev, written: m.now}
	return "RECORDED"
}

func outcomeString(lk Lookup) string {
	switch lk.Kind {
	case Hit:
		return "HIT/" + string(lk.Value) + "/" + lk.Freshness.String()
	case Miss:
		return "MISS/" + lk.MissReason.String()
	}
	return lk.Kind.String()
}

// TestPropertyLookupMatchesModel drives random sequences of writes,
// absences, invalidations, region invalidations, clock moves and lookups
// against a real Redis and compares every lookup and write outcome with
// the reference model.
func TestPropertyLookupMatchesModel(t *testing.T) {
	srv := redistest.StartStandalone(t)
	topo := &policy.Standalone{Endpoint: srv.Addr()}
	rng := rand.New(rand.NewPCG(11, 12))
	keys := []string{"a", "b", "c", "d"}
	for seq := range 12 {
		clk := newClock()
		cfg := testConfig(t, func(d *policy.CacheRegionDecl, o *policy.CacheOps) {
			d.ID = fmt.Sprintf("prop-%d", seq) // a fresh region per sequence
			d.SoftTTL, d.HardTTL, d.NegativeTTL, d.Jitter = mSoft, mHard, mNeg, mJitter
		})
		r := newInstance(t, topo, cfg, clk, nil).region(t, cfg.Regions[0].ID)
		m := &model{entries: map[string]*modelEntry{}, now: clk.Now()}
		ctx := ctxT(t)
		var trace []string
		fail := func(format string, a ...any) {
			t.Fatalf("sequence %d: %s\ntrace:\n  %s", seq, fmt.Sprintf(format, a...), strings.Join(trace, "\n  "))
		}
		for step := range 60 {
			k := keys[rng.IntN(len(keys))]
			switch op := rng.IntN(10); {
			case op < 3:
				want := m.expect(k)
				lk, err := r.Lookup(ctx, Parts(k))
				require.NoError(t, err)
				got := outcomeString(lk)
				trace = append(trace, fmt.Sprintf("%d lookup %s -> %s (model %v)", step, k, got, want))
				ok := false
				for _, w := range want {
					ok = ok || w == got
				}
				if !ok {
					fail("lookup %s: got %s, model allows %v", k, got, want)
				}
			case op < 5:
				v, rev, newer := fmt.Sprint("v", step), uint64(rng.IntN(5)+1), rng.IntN(2) == 0
				meta := RecordMeta{Revision: SourceRevision(rev)}
				if newer {
					meta.Intent = OnlyIfSourceRevisionNewer
				}
				want := m.record(k, v, rev, newer)
				o, err := r.Record(ctx, Parts(k), []byte(v), meta)
				require.NoError(t, err)
				trace = append(trace, fmt.Sprintf("%d record %s=%s rev %d newer %t -> %s (model %s)", step, k, v, rev, newer, o, want))
				if o.String() != want {
					fail("record %s: got %s, model %s", k, o, want)
				}
			case op < 6:
				o, err := r.RecordAbsent(ctx, Parts(k), RecordMeta{})
				require.NoError(t, err)
				m.entries[k] = &modelEntry{kind: "negative", written: m.now}
				trace = append(trace, fmt.Sprintf("%d absent %s -> %s", step, k, o))
				if o != Recorded {
					fail("record absent %s: %s", k, o)
				}
			case op < 7:
				o, err := r.Invalidate(ctx, Parts(k))
				require.NoError(t, err)
				e := m.entries[k]
				want := AlreadyAbsent
				if e != nil && (e.kind == "value" || e.kind == "negative") {
					want = InvalidationDone // an envelope was there (expired or not)
				}
				m.entries[k] = &modelEntry{kind: "tombstone"}
				trace = append(trace, fmt.Sprintf("%d invalidate %s -> %s (model %s)", step, k, o, want))
				if o != want {
					fail("invalidate %s: got %s, model %s", k, o, want)
				}
			case op < 8:
				o, err := r.InvalidateRegion(ctx)
				require.NoError(t, err)
				m.entries = map[string]*modelEntry{}
				trace = append(trace, fmt.Sprintf("%d invalidate region -> %s", step, o))
				if o != InvalidationDone {
					fail("invalidate region: %s", o)
				}
			default:
				d := []time.Duration{time.Second, 4 * time.Second, 7 * time.Second, 30 * time.Second}[rng.IntN(4)]
				clk.Advance(d)
				m.now = clk.Now()
				trace = append(trace, fmt.Sprintf("%d advance %s", step, d))
			}
		}
	}
}
