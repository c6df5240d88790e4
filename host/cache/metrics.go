package cache

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/host/cache/flight"
	"github.com/caphost/caphost/host/cache/l1"
)

// maxRegionLabels bounds the region label: ids come from configuration and
// guests, and a guest swapping ids over and over must not grow series
// without bound. Regions beyond it share the label "other".
const maxRegionLabels = 256

// metrics are the cache's instruments. Every label value is a region id of
// a compiled policy set (bounded, see maxRegionLabels) or a closed enum of
// this package: never a key, a value or a guest's detail.
type metrics struct {
	lookups       *prometheus.CounterVec   // region, outcome
	results       *prometheus.CounterVec   // region, result
	records       *prometheus.CounterVec   // region, outcome
	notRecorded   *prometheus.CounterVec   // region, reason
	invalidations *prometheus.CounterVec   // region, scope, outcome
	sourceLoads   *prometheus.CounterVec   // region, result
	sourceSeconds *prometheus.HistogramVec // region
	stale         *prometheus.CounterVec   // region, reason
	staleAge      *prometheus.HistogramVec // region
	payload       *prometheus.HistogramVec // region, op
	leases        *prometheus.CounterVec   // region, result
	guestFailures *prometheus.CounterVec   // region, op
	quarantines   *prometheus.CounterVec   // region, reason
	rewrites      *prometheus.CounterVec   // region, result
	verifications *prometheus.CounterVec   // region, verdict
	hints         *prometheus.CounterVec   // region, direction, result
	reloads       *prometheus.CounterVec   // result
	genReads      *prometheus.CounterVec   // region, generation

	mu      sync.Mutex
	regions map[string]*regionMetrics
}

// Closed label values.
var (
	lookupOutcomes    = lookupOutcomeNames[:]
	regionHintResults = regionHintResultNames[:]
	// unattributedHintResults are counted with region="" (noHintRegion):
	// what a rejected hint (forged, stale or malformed) names cannot be
	// believed, a region this host does not serve would let other hosts'
	// configurations mint labels, and the subscription's changes of state
	// concern every region.
	unattributedHintResults = []string{"rejected_forged", "rejected_stale", "rejected_malformed",
		"ignored_unknown_region", "subscription_down", "subscription_up"}
	hintResults = append(slices.Clone(regionHintResults), unattributedHintResults...)
)

// regionHintResultNames are the hint results counted per region, indexed
// by hintSent...: hints this host sent for one of its regions, and
// authenticated hints it received for one. (ignored_own is counted with
// region="" for a region a swap removed since the hint was sent.)
var regionHintResultNames = [...]string{"sent", "send_failed", "received", "ignored_own"}

const (
	hintSent = iota
	hintSendFailed
	hintReceived
	hintIgnoredOwn
)

// noHintRegion is the region label of the hint events no region of this
// host can be named for (unattributedHintResults). Region ids are slugs,
// never empty.
const noHintRegion = ""

// lookupOutcomeNames are the lookup outcome labels, indexed by
// lookupOutcome's answer.
var lookupOutcomeNames = [...]string{"hit_fresh", "hit_stale", "negative_hit", "miss_absent", "miss_expired",
	"miss_invalidated", "incompatible_schema", "unavailable", "overloaded", "error"}

const (
	outHitFresh = iota
	outHitStale
	outNegativeHit
	outMissAbsent
	outMissExpired
	outMissInvalidated
	outIncompatibleSchema
	outUnavailable
	outOverloaded
	outError
)

const hintsHelp = "L1 invalidation and refresh hints by region, direction and result; region is empty for a hint " +
	"rejected (forged, stale, malformed) or naming a region this host does not serve, and for the subscription's changes of state."

const verificationsHelp = "Background re-decodes of entries a codec guest ran into its deadline on, by verdict: " +
	"quarantined (the guest spent its call timeout on CPU, or failed on the bytes), inconclusive (a deadline " +
	"without the CPU: the host's load), healthy, dropped (one already running, or the entry verified recently)."

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "cache", Name: name, Help: help}, labels)
	}
	h := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "caphost", Subsystem: "cache", Name: name, Help: help, Buckets: buckets}, labels)
	}
	m := &metrics{
		lookups:       c("lookups_total", "Cache lookups by region and outcome.", "region", "outcome"),
		results:       c("get_or_load_total", "GetOrLoad results by region and result.", "region", "result"),
		records:       c("records_total", "Cache writes by region and outcome.", "region", "outcome"),
		notRecorded:   c("not_recorded_total", "Writes the region's policy refused, by reason.", "region", "reason"),
		invalidations: c("invalidations_total", "Invalidations by region, scope (key, region) and outcome.", "region", "scope", "outcome"),
		sourceLoads:   c("source_loads_total", "Source loads by region and classified result.", "region", "result"),
		sourceSeconds: h("source_load_seconds", "Source load duration.", prometheus.ExponentialBuckets(0.0005, 4, 9), "region"),
		stale:         c("stale_served_total", "Stale values served, by reason (revalidate, error, overload).", "region", "reason"),
		staleAge:      h("stale_age_seconds", "How far past its soft expiry a served stale value was.", prometheus.ExponentialBuckets(0.1, 4, 9), "region"),
		payload:       h("payload_bytes", "Payload sizes read from Redis (L1 hits read none) and written.", prometheus.ExponentialBuckets(64, 4, 9), "region", "op"),
		leases:        c("refresh_leases_total", "Refresh soft lease events by region.", "region", "result"),
		guestFailures: c("guest_failures_total", "Codec, canonicaliser and admission guest failures.", "region", "op"),
		quarantines:   c("quarantines_total", "Unreadable entries quarantined, by reason.", "region", "reason"),
		rewrites:      c("rewrites_total", "Background N-1 to N rewrites, by result.", "region", "result"),
		verifications: c("codec_verifications_total", verificationsHelp, "region", "verdict"),
		hints:         c("hints_total", hintsHelp, "region", "direction", "result"),
		reloads:       c("policy_reloads_total", "Region rebuilds after a codec or cache-region guest swap, by result (ok, failed).", "result"),
		genReads: c("generation_reads_total", "L2 reads of regions with generation trust, by how the shard generation was known: "+
			"trusted (only the entry read) or read (read with the entry).", "region", "generation"),
		regions: map[string]*regionMetrics{},
	}
	for _, r := range unattributedHintResults {
		m.hints.WithLabelValues(noHintRegion, hintDirection(r), r)
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("failed")
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.lookups, m.results, m.records, m.notRecorded, m.invalidations,
		m.sourceLoads, m.sourceSeconds, m.stale, m.staleAge, m.payload, m.leases, m.guestFailures, m.quarantines,
		m.rewrites, m.verifications, m.hints, m.reloads, m.genReads} {
		if err := reg.Register(col); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("cache: metrics already registered on this registry (one Cache per registry)")
			}
			return nil, err
		}
	}
	return m, nil
}

func hintDirection(result string) string {
	switch result {
	case "sent", "send_failed":
		return "out"
	case "subscription_down", "subscription_up":
		return "subscription"
	}
	return "in"
}

// hint counts a hint event no region of this host can be named for.
func (m *metrics) hint(result string) {
	m.hints.WithLabelValues(noHintRegion, hintDirection(result), result).Inc()
}

// region returns the instruments of region id, creating its series at zero.
func (m *metrics) region(id string) *regionMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.regions[id]; ok {
		return r
	}
	label := id
	if len(m.regions) >= maxRegionLabels {
		label = "other"
	}
	r := &regionMetrics{m: m, label: label, payloadRead: m.payload.WithLabelValues(label, "read"),
		genTrusted: m.genReads.WithLabelValues(label, "trusted"), genRead: m.genReads.WithLabelValues(label, "read")}
	for i, o := range lookupOutcomes {
		r.lookups[i] = m.lookups.WithLabelValues(label, o)
	}
	for i, h := range regionHintResults {
		r.hints[i] = m.hints.WithLabelValues(label, hintDirection(h), h)
	}
	m.regions[id] = r
	return r
}

// regionMetrics are one region's instruments. The series every lookup
// touches are resolved once: a label lookup costs about what an L1 hit
// does.
type regionMetrics struct {
	m           *metrics
	label       string
	lookups     [len(lookupOutcomeNames)]prometheus.Counter
	hints       [len(regionHintResultNames)]prometheus.Counter
	payloadRead prometheus.Observer
	genTrusted  prometheus.Counter
	genRead     prometheus.Counter
	// runtimes carries the counters the region's L1 and single-flight
	// keep across the rebuilds that replace them (guarded by m.mu).
	runtimes runtimeTotals
}

// hint counts a hint event of the region (hintSent...).
func (r *regionMetrics) hint(result int) { r.hints[result].Inc() }

// generationRead counts an L2 read of a region with generation trust:
// under a trusted generation, or one that read the generation too.
func (r *regionMetrics) generationRead(trusted bool) {
	if trusted {
		r.genTrusted.Inc()
		return
	}
	r.genRead.Inc()
}

// guestErr counts a guest failure an operation ended with.
func (r *regionMetrics) guestErr(err error) {
	if err == nil {
		return // errors.As's target escapes: an allocation per successful call
	}
	var ce *CodecError
	if errors.As(err, &ce) {
		r.guestFailure(ce.Op)
	}
}

func (r *regionMetrics) lookup(lk *Lookup, err error) {
	r.guestErr(err)
	r.lookupOutcome(lk, err)
}

// lookupOutcome counts a lookup inside GetOrLoad, whose result counts the
// guest failure once. An L1 hit was counted when it was served (l1Hit). A
// payload read is a hit's value decoded from Redis: an L1 hit read none
// (l1_events_total counts it), and observing it would cost a good part of
// the hit.
func (r *regionMetrics) lookupOutcome(lk *Lookup, err error) {
	if lk.FromL1 {
		return
	}
	r.lookups[lookupOutcome(lk, err)].Inc()
	if err == nil && lk.Kind == Hit {
		r.payloadRead.Observe(float64(len(lk.Value)))
	}
}

// l1Hit counts a lookup served from L1.
func (r *regionMetrics) l1Hit(negative bool) {
	if negative {
		r.lookups[outNegativeHit].Inc()
		return
	}
	r.lookups[outHitFresh].Inc()
}

// lookupOutcome is the index in lookupOutcomeNames of a lookup's outcome.
func lookupOutcome(lk *Lookup, err error) int {
	if err != nil {
		return outError
	}
	switch lk.Kind {
	case Hit:
		if lk.Freshness == Stale {
			return outHitStale
		}
		return outHitFresh
	case NegativeHit:
		return outNegativeHit
	case Miss:
		switch lk.MissReason {
		case Expired:
			return outMissExpired
		case Invalidated:
			return outMissInvalidated
		}
		return outMissAbsent
	case IncompatibleSchema:
		return outIncompatibleSchema
	case Unavailable:
		if lk.Unavailable == Overloaded {
			return outOverloaded
		}
		return outUnavailable
	}
	return outError
}

func (r *regionMetrics) result(res Result, err error) {
	r.guestErr(err)
	v := "error"
	switch {
	case errors.Is(err, ErrOverloaded):
		v = "overloaded"
	case err == nil:
		v = res.Kind.String()
	}
	r.m.results.WithLabelValues(r.label, v).Inc()
	if err == nil && res.Kind == StaleHit {
		r.stale("revalidate", res.StaleAge)
	}
}

func (r *regionMetrics) record(o RecordOutcome, err error) {
	r.guestErr(err)
	v := "error"
	if err == nil {
		v = o.String()
	}
	r.m.records.WithLabelValues(r.label, v).Inc()
}

func (r *regionMetrics) notRecorded(reason string) {
	r.m.notRecorded.WithLabelValues(r.label, reason).Inc()
}

func (r *regionMetrics) invalidation(scope string, o InvalidationOutcome, err error) {
	r.guestErr(err)
	v := "error"
	if err == nil {
		v = o.String()
	}
	r.m.invalidations.WithLabelValues(r.label, scope, v).Inc()
}

func (r *regionMetrics) sourceLoad(k loadKind, err error, d time.Duration) {
	v := "unclassified"
	if err == nil {
		switch k {
		case loadedKind:
			v = "loaded"
		case absentKind:
			v = "absent"
		case transientKind:
			v = "transient"
		case permanentKind:
			v = "permanent"
		case cancelledKind:
			v = "cancelled"
		default:
			v = "invalid"
		}
	}
	r.m.sourceLoads.WithLabelValues(r.label, v).Inc()
	r.m.sourceSeconds.WithLabelValues(r.label).Observe(d.Seconds())
}

func (r *regionMetrics) stale(reason string, age time.Duration) {
	r.m.stale.WithLabelValues(r.label, reason).Inc()
	r.m.staleAge.WithLabelValues(r.label).Observe(age.Seconds())
}

func (r *regionMetrics) payloadBytes(op string, n int) {
	r.m.payload.WithLabelValues(r.label, op).Observe(float64(n))
}

func (r *regionMetrics) lease(result string)    { r.m.leases.WithLabelValues(r.label, result).Inc() }
func (r *regionMetrics) guestFailure(op string) { r.m.guestFailures.WithLabelValues(r.label, op).Inc() }
func (r *regionMetrics) quarantine(reason string) {
	r.m.quarantines.WithLabelValues(r.label, reason).Inc()
}
func (r *regionMetrics) rewrite(result string) { r.m.rewrites.WithLabelValues(r.label, result).Inc() }
func (r *regionMetrics) verification(verdict string) {
	r.m.verifications.WithLabelValues(r.label, verdict).Inc()
}

// install stores a new policy set (store) and hands the runtimes it
// replaced to their regions' totals in one step for a scrape, so that no
// runtime's counters are seen twice or missed.
func (m *metrics) install(store func(), replaced []*region) {
	m.mu.Lock()
	defer m.mu.Unlock()
	store()
	for _, r := range replaced {
		r.m.runtimes.retire(r)
	}
}

// maxDraining bounds the replaced runtimes a region keeps reading while
// their loads run: a loader that ignores its context keeps one running
// forever.
const maxDraining = 8

// runtimeTotals keep a region's L1 and single-flight counters monotonic
// across rebuilds. Each runtime counts into itself, and a guest swap that
// changes the region's policy replaces its runtime, counters and all; the
// replaced runtime's counts carry on here. A replaced runtime is read
// while loads still run on it (their abandonments, time-outs and panics
// count), then its counts are folded in for good. A caller that resolved
// the region just before the swap and calls after the fold is not counted.
type runtimeTotals struct {
	folded   runtimeCounts
	draining []*region
}

// runtimeCounts are one region's L1 and single-flight counters by event.
type runtimeCounts struct {
	served bool // a runtime counted: the region has these series
	l1     map[string]uint64
	flight map[string]uint64
}

// add adds r's counters.
func (c *runtimeCounts) add(r *region) {
	c.served = true
	if r.l1 != nil {
		if c.l1 == nil {
			c.l1 = map[string]uint64{}
		}
		for ev, v := range l1Events(r.l1.Stats()) {
			c.l1[ev] += v
		}
	}
	if c.flight == nil {
		c.flight = map[string]uint64{}
	}
	for ev, v := range flightEvents(r.flight.Stats()) {
		c.flight[ev] += v
	}
}

// retire takes over the counters of r, a runtime a swap replaced.
func (t *runtimeTotals) retire(r *region) {
	t.draining = append(t.draining, r)
	t.fold()
}

// fold folds in the replaced runtimes with no load running, and the
// oldest beyond maxDraining.
func (t *runtimeTotals) fold() {
	keep := t.draining[:0]
	for i, r := range t.draining {
		if r.flight.Stats().Running > 0 && len(t.draining)-i <= maxDraining {
			keep = append(keep, r)
			continue
		}
		t.folded.add(r)
	}
	clear(t.draining[len(keep):])
	t.draining = keep
}

// counts returns the region's counters: its replaced runtimes' and those
// of cur, its serving runtime (nil: the current set has no such region).
func (t *runtimeTotals) counts(cur *region) runtimeCounts {
	t.fold()
	c := runtimeCounts{served: t.folded.served, l1: maps.Clone(t.folded.l1), flight: maps.Clone(t.folded.flight)}
	for _, r := range t.draining {
		c.add(r)
	}
	if cur != nil {
		c.add(cur)
	}
	return c
}

// collector reports the counters the regions' L1 and single-flight keep
// themselves (carried across rebuilds, see runtimeTotals) and their
// gauges, read at scrape time. A region a swap removed keeps its
// counters' series.
type collector struct {
	c     *Cache
	descs map[string]*prometheus.Desc
}

func newCollector(c *Cache) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("caphost_cache_"+name, help, labels, nil)
	}
	return &collector{c: c, descs: map[string]*prometheus.Desc{
		"l1":           d("l1_events_total", "L1 events by region (hit, miss, stored, raced, refused, evicted_size, evicted_expiry, flush).", "region", "event"),
		"l1_entries":   d("l1_entries", "Entries held in L1.", "region"),
		"l1_bytes":     d("l1_bytes", "Bytes charged in L1.", "region"),
		"flight":       d("single_flight_events_total", "Single-flight events by region (load, join, abandoned, timed_out, refused_keys, refused_waiters, panic).", "region", "event"),
		"flight_keys":  d("single_flight_keys", "Keys loading now.", "region"),
		"source_inuse": d("source_loads_in_flight", "Source loads holding a bulkhead permit.", "region"),
	}}
}

// Describe implements prometheus.Collector.
func (k *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range k.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (k *collector) Collect(ch chan<- prometheus.Metric) {
	m := k.c.m
	m.mu.Lock() // against install: a swap moves counters between runtimes
	defer m.mu.Unlock()
	st := k.c.state.Load()
	if st == nil {
		return
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for id, rm := range m.regions {
		label := rm.label
		if label == "other" {
			continue // beyond maxRegionLabels: one series per region is kept only for labelled regions
		}
		cur := st.regions[id]
		c := rm.runtimes.counts(cur)
		if !c.served {
			continue
		}
		for ev, v := range c.l1 {
			counter(k.descs["l1"], v, label, ev)
		}
		for ev, v := range c.flight {
			counter(k.descs["flight"], v, label, ev)
		}
		if cur == nil {
			continue
		}
		if cur.l1 != nil {
			s := cur.l1.Stats()
			gauge(k.descs["l1_entries"], s.Entries, label)
			gauge(k.descs["l1_bytes"], s.Bytes, label)
		}
		gauge(k.descs["flight_keys"], int64(cur.flight.Stats().InFlight), label)
		gauge(k.descs["source_inuse"], int64(cur.source.Stats().InUse), label)
	}
}

// l1Events names an L1's counters.
func l1Events(s l1.Stats) map[string]uint64 {
	return map[string]uint64{"hit": s.Hits, "miss": s.Misses, "stored": s.Stored, "raced": s.Raced,
		"refused": s.Refused, "evicted_size": s.EvictedSize, "evicted_expiry": s.EvictedExpiry, "flush": s.Flushes}
}

// flightEvents names a single-flight's counters.
func flightEvents(s flight.Stats) map[string]uint64 {
	return map[string]uint64{"load": s.Loads, "join": s.Joins, "abandoned": s.Abandoned, "timed_out": s.TimedOut,
		"refused_keys": s.RefusedKeys, "refused_waiters": s.RefusedWaiters, "panic": s.Panics}
}
