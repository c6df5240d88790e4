package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The cache scene: region products, declared by the cache-region guest and
// stored in the codec guest's schema product, read through the sidecar API
// (GET|PUT|DELETE /v1/cache/{region}/{key}) of two replicas that share one
// Redis and keep an L1 each.
const (
	cacheRegion = "products"
	// sourceLatency is what one read of the simulated catalogue takes.
	sourceLatency = 100 * time.Millisecond
	// hitReads are the reads of the hits step, half on each replica.
	hitReads = 40
	// stampedeClients miss one cold key at once, half on each replica.
	stampedeClients = 32
	// claimWait is the Caphost-Wait of a contended miss: the region's
	// refresh-lease wait (default 1s) bounds it.
	claimWait = time.Second
	// l1MaxAge is the default l1-limits.max-age: without the hint, B's L1
	// copy would answer the old value for up to this long.
	l1MaxAge = 5 * time.Second
	// hintBound bounds the wait for B's miss, well within l1MaxAge, so
	// the miss is the hint's doing and not the copy's expiry.
	hintBound = 2 * time.Second
)

// product is the interchange form of the codec guest's schema product, in
// its canonical member order: what the codec returns is byte for byte what
// json.Marshal writes here.
type product struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	PriceCents int64    `json:"price_cents"`
	Currency   string   `json:"currency"`
	Tags       []string `json:"tags,omitempty"`
}

// catalog is the demo's simulated source of truth, the product database a
// service reads on a miss: every read takes sourceLatency and is counted.
type catalog struct {
	products map[string]product
	loads    atomic.Int64
}

func (c *catalog) load(ctx context.Context, id string) ([]byte, error) {
	c.loads.Add(1)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(sourceLatency):
	}
	p, ok := c.products[id]
	if !ok {
		return nil, fmt.Errorf("catalog: no product %s", id)
	}
	return json.Marshal(p)
}

// cacheAnswer is one answer of the sidecar API.
type cacheAnswer struct {
	status  int
	cache   string // Caphost-Cache-Status: fresh, stale, negative, miss; reason=...
	refresh string // Caphost-Refresh: granted, contended or none
	token   string // Caphost-Refresh-Token, when granted
	body    []byte
}

func (a cacheAnswer) fresh() bool { return a.status == http.StatusOK && a.cache == "fresh" }
func (a cacheAnswer) miss() bool {
	return a.status == http.StatusNotFound && strings.HasPrefix(a.cache, "miss")
}

// outcome is the outcome of a PUT or DELETE ({"outcome": ...}).
func (a cacheAnswer) outcome() string {
	var o struct {
		Outcome string `json:"outcome"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &o) != nil {
		return fmt.Sprintf("status %d: %s", a.status, strings.TrimSpace(string(a.body)))
	}
	return o.Outcome
}

// cacheCall sends one request of the sidecar API for key of region
// products; headers come as name, value pairs.
func cacheCall(ctx context.Context, hc *http.Client, method string, r *replica, key string, body []byte, headers ...string) (cacheAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, method, r.base+"/v1/cache/"+cacheRegion+"/"+key, bytes.NewReader(body))
	if err != nil {
		return cacheAnswer{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return cacheAnswer{}, fmt.Errorf("%s %s on %s: %w", method, key, r.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return cacheAnswer{status: resp.StatusCode, cache: resp.Header.Get("Caphost-Cache-Status"),
		refresh: resp.Header.Get("Caphost-Refresh"), token: resp.Header.Get("Caphost-Refresh-Token"), body: b}, nil
}

// read is what a service does with the sidecar: GET with a refresh claim.
// On a miss one caller of many is granted the refresh lease: it reads the
// source and PUTs the value with the token. The others wait, bounded by
// Caphost-Wait, for that write and get the value.
type read struct {
	get      cacheAnswer // the GET's answer
	value    []byte
	recorded string // the PUT's outcome; "" when the GET had the value
}

func readThrough(ctx context.Context, hc *http.Client, r *replica, key string, src *catalog) (read, error) {
	get, err := cacheCall(ctx, hc, http.MethodGet, r, key, nil, "Caphost-Refresh", "claim",
		"Caphost-Wait", claimWait.String(), "Caphost-Deadline-Ms", "3000")
	if err != nil {
		return read{}, err
	}
	switch {
	case get.fresh():
		return read{get: get, value: get.body}, nil
	case get.miss() && get.refresh == "granted":
		v, err := src.load(ctx, key)
		if err != nil {
			return read{}, err
		}
		put, err := cacheCall(ctx, hc, http.MethodPut, r, key, v, "Caphost-Refresh-Token", get.token)
		if err != nil {
			return read{}, err
		}
		return read{get: get, value: v, recorded: put.outcome()}, nil
	}
	return read{}, fmt.Errorf("GET %s on %s: %d %q, refresh %q: neither the value nor the lease", key, r.name, get.status, get.cache, get.refresh)
}

// metric sums the samples of name whose labels include every one of want
// (name="value"), as GET /metrics of r reports them.
func metric(ctx context.Context, hc *http.Client, r *replica, name string, want ...string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics on %s: status %d", r.name, resp.StatusCode)
	}
	var sum float64
lines:
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, name+"{") {
			continue
		}
		labels, rest, ok := strings.Cut(l[len(name)+1:], "} ")
		if !ok {
			continue
		}
		for _, w := range want {
			if !slices.Contains(strings.Split(labels, ","), w) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(rest, 64)
		if err != nil {
			return 0, fmt.Errorf("GET /metrics on %s: %q", r.name, l)
		}
		sum += v
	}
	return sum, nil
}

// counters reads metric on each of rs (two readings make a delta).
func counters(ctx context.Context, hc *http.Client, rs []*replica, name string, want ...string) ([]int64, error) {
	out := make([]int64, len(rs))
	for i, r := range rs {
		v, err := metric(ctx, hc, r, name, want...)
		if err != nil {
			return nil, err
		}
		out[i] = int64(v)
	}
	return out, nil
}

// cacheScene starts replica B and shows, on one screen, hits (L1 hits on
// both replicas), a stampede absorbed and an invalidation on A reaching
// B's L1. Every invariant it prints is checked: one source load for the
// stampede, B's miss after A's DELETE.
func (d *demo) cacheScene(ctx context.Context, a, b *replica) error {
	d.say("cache: region %s (guests cache-region + codec) on replicas A and B, one Redis, an L1 in each", cacheRegion)
	if err := d.startReplica(ctx, b); err != nil {
		return err
	}
	d.line("replica B: caphost serve --config %s (%s): /readyz 200, pid %d, JSON logs in %s",
		filepath.Base(b.cfg), strings.TrimPrefix(b.base, "http://"), b.cmd.Process.Pid, filepath.Base(b.log))
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * stampedeClients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	// Product ids new to every run: the stampede needs a cold key, also on
	// a Redis that still holds an earlier run's entries.
	run := randomHex(3)
	lamp, chair := "lamp-"+run, "chair-"+run
	src := &catalog{products: map[string]product{
		lamp:  {ID: lamp, Name: "Desk lamp", PriceCents: 2999, Currency: "EUR"},
		chair: {ID: chair, Name: "Office chair", PriceCents: 18900, Currency: "EUR", Tags: []string{"furniture"}},
	}}
	if err := d.cacheHits(ctx, hc, src, lamp, a, b); err != nil {
		return err
	}
	if err := d.cacheStampede(ctx, hc, src, chair, a, b); err != nil {
		return err
	}
	return d.cacheInvalidation(ctx, hc, lamp, a, b)
}

// cacheHits: a miss one client fills through a refresh token, then fresh
// reads on both replicas, most of them from L1.
func (d *demo) cacheHits(ctx context.Context, hc *http.Client, src *catalog, key string, a, b *replica) error {
	first, err := readThrough(ctx, hc, a, key, src)
	if err != nil {
		return err
	}
	if !first.get.miss() || first.recorded != "RECORDED" {
		return fmt.Errorf("GET %s on A, a new key: %q refresh %q, PUT %q; want a miss, granted, RECORDED", key, first.get.cache, first.get.refresh, first.recorded)
	}
	d.line("hits        A: GET %s -> %s, refresh %s -> source read -> PUT with the token: %s", key, first.get.cache, first.get.refresh, first.recorded)
	rs := []*replica{a, b}
	l1Before, err := counters(ctx, hc, rs, "caphost_cache_l1_events_total", `region="products"`, `event="hit"`)
	if err != nil {
		return err
	}
	fresh, lat := 0, make([]time.Duration, 0, hitReads)
	for i := range hitReads {
		start := time.Now()
		ans, err := cacheCall(ctx, hc, http.MethodGet, rs[i%2], key, nil)
		if err != nil {
			return err
		}
		lat = append(lat, time.Since(start))
		if ans.fresh() && bytes.Equal(ans.body, first.value) {
			fresh++
		}
	}
	l1After, err := counters(ctx, hc, rs, "caphost_cache_l1_events_total", `region="products"`, `event="hit"`)
	if err != nil {
		return err
	}
	hitsA, hitsB := l1After[0]-l1Before[0], l1After[1]-l1Before[1]
	d.line("            %d reads, half on A, half on B: %d fresh, p50 %s; L1 hits A %d, B %d (caphost_cache_l1_events_total)",
		hitReads, fresh, ms(percentile(lat, 50)), hitsA, hitsB)
	if fresh != hitReads || hitsB == 0 {
		return fmt.Errorf("hits: %d of %d reads fresh, %d L1 hits on B; want every read fresh and L1 hits on B", fresh, hitReads, hitsB)
	}
	return nil
}

// cacheStampede: stampedeClients miss one cold key at once, spread over
// both replicas; one is granted the refresh lease and reads the source,
// the others wait for its write.
func (d *demo) cacheStampede(ctx context.Context, hc *http.Client, src *catalog, key string, a, b *replica) error {
	rs := []*replica{a, b}
	waitedBefore, err := counters(ctx, hc, rs, "caphost_cache_refresh_leases_total", `region="products"`, `result="waited"`)
	if err != nil {
		return err
	}
	loadsBefore := src.loads.Load()
	type outcome struct {
		lat     time.Duration
		granted bool
		value   []byte
		err     error
	}
	res := make([]outcome, stampedeClients)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range res {
		wg.Go(func() {
			<-gate
			start := time.Now()
			rd, err := readThrough(ctx, hc, rs[i%2], key, src)
			res[i] = outcome{lat: time.Since(start), granted: rd.get.refresh == "granted", value: rd.value, err: err}
			if err == nil && rd.recorded != "" && rd.recorded != "RECORDED" {
				res[i].err = fmt.Errorf("PUT %s with the token: %s", key, rd.recorded)
			}
		})
	}
	close(gate)
	wg.Wait()
	loads := src.loads.Load() - loadsBefore
	waitedAfter, err := counters(ctx, hc, rs, "caphost_cache_refresh_leases_total", `region="products"`, `result="waited"`)
	if err != nil {
		return err
	}
	want, _ := json.Marshal(src.products[key])
	granted, got, waited := 0, 0, (waitedAfter[0]-waitedBefore[0])+(waitedAfter[1]-waitedBefore[1])
	var lat []time.Duration
	var failure error
	for _, o := range res {
		switch {
		case o.err != nil:
			failure = o.err
		case !bytes.Equal(o.value, want):
			failure = fmt.Errorf("a client got %q, not the product", o.value)
		case o.granted:
			granted++
		default:
			got++
		}
		lat = append(lat, o.lat)
	}
	d.line("stampede    %d clients (%d on A, %d on B) GET cold %s at once: Caphost-Refresh: claim, Caphost-Wait: %s",
		stampedeClients, (stampedeClients+1)/2, stampedeClients/2, key, claimWait)
	d.line("            %d granted: read the source (%s), PUT with the token; %d got the value, %d by waiting for that write",
		granted, sourceLatency, got, waited)
	d.line("            \033[1msource loads: %d\033[0m for %d requests, %d failed; latency p50 %s, p99 %s, max %s",
		loads, stampedeClients, stampedeClients-granted-got, ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(percentile(lat, 100)))
	switch {
	case failure != nil:
		return fmt.Errorf("stampede: %w", failure)
	case loads != 1 || granted != 1:
		return fmt.Errorf("stampede: %d source loads, %d granted; want exactly 1", loads, granted)
	}
	return nil
}

// cacheInvalidation: B holds the product in L1; DELETE on A; B's next read
// misses, well before its L1 copy would expire, because A's invalidation
// hint reached B.
func (d *demo) cacheInvalidation(ctx context.Context, hc *http.Client, key string, a, b *replica) error {
	rs := []*replica{b}
	// The first read refills B's L1 should its copy have aged out; the
	// second must come from L1.
	if _, err := cacheCall(ctx, hc, http.MethodGet, b, key, nil); err != nil {
		return err
	}
	l1Before, err := counters(ctx, hc, rs, "caphost_cache_l1_events_total", `region="products"`, `event="hit"`)
	if err != nil {
		return err
	}
	before, err := cacheCall(ctx, hc, http.MethodGet, b, key, nil)
	if err != nil {
		return err
	}
	l1After, err := counters(ctx, hc, rs, "caphost_cache_l1_events_total", `region="products"`, `event="hit"`)
	if err != nil {
		return err
	}
	if !before.fresh() || l1After[0]-l1Before[0] != 1 {
		return fmt.Errorf("invalidate: B answered %d %q with %d L1 hits; want fresh, from its L1", before.status, before.cache, l1After[0]-l1Before[0])
	}
	d.line("invalidate  B before: %s, from its L1: %s", before.cache, before.body)
	hintsBefore, err := counters(ctx, hc, rs, "caphost_cache_hints_total", `direction="in"`, `result="received"`)
	if err != nil {
		return err
	}

	sent := time.Now()
	del, err := cacheCall(ctx, hc, http.MethodDelete, a, key, nil)
	if err != nil {
		return err
	}
	answered := time.Since(sent)
	if del.outcome() != "INVALIDATED" {
		return fmt.Errorf("DELETE %s on A: %s", key, del.outcome())
	}
	d.line("            A: DELETE /v1/cache/%s/%s -> %s (%s)", cacheRegion, key, del.outcome(), ms(answered))
	// Poll B until it misses, bounded.
	var after cacheAnswer
	reads := 0
	for {
		if after, err = cacheCall(ctx, hc, http.MethodGet, b, key, nil); err != nil {
			return err
		}
		reads++
		if after.miss() || time.Since(sent) > hintBound {
			break
		}
	}
	took := time.Since(sent)
	hintsAfter, err := counters(ctx, hc, rs, "caphost_cache_hints_total", `direction="in"`, `result="received"`)
	if err != nil {
		return err
	}
	if !after.miss() {
		return fmt.Errorf("invalidate: B still answered %d %q %s after A's DELETE", after.status, after.cache, hintBound)
	}
	which := "its first read"
	if reads > 1 {
		which = fmt.Sprintf("its read #%d", reads)
	}
	d.line("            B after:  %s on %s, %s after the DELETE was sent", after.cache, which, ms(took))
	d.line("            (B received %d invalidation hint; without it, its L1 copy would answer the old value up to %s)",
		hintsAfter[0]-hintsBefore[0], l1MaxAge)
	return nil
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}

// ms prints a duration in milliseconds, to 0.1 ms below 10 ms.
func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%dms", d.Round(time.Millisecond).Milliseconds())
}
