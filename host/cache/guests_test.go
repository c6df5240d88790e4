package cache

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/cache/envelope"
	"github.com/caphost/caphost/internal/guesttest"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/programs"
)

// th holds the built guests; set once by TestMain.
var th *guesttest.Harness

func TestMain(m *testing.M) {
	os.Exit(guesttest.Main(m, guesttest.Options{Root: "../..", Race: raceEnabled, Set: func(h *guesttest.Harness) { th = h },
		Guests: []guesttest.Guest{
			{Name: "codec", Pkg: "guests/codec"},
			{Name: "cache-region", Pkg: "guests/cache-region"},
			{Name: "trapcodec", Pkg: "host/cache/testdata/guests/trapcodec"},
			{Name: "trapregion", Pkg: "host/cache/testdata/guests/trapregion"},
		}}))
}

// testGuests serves guest modules to a Cache the way the host does.
type testGuests struct {
	mgr  *plugins.Manager
	mods map[abi.Kind][]string
}

func (g *testGuests) Manager() *plugins.Manager         { return g.mgr }
func (g *testGuests) ModulesOfKind(k abi.Kind) []string { return slices.Clone(g.mods[k]) }

// loadGuests loads the named built guests (module name → built guest)
// through a Manager with every check (self-test, conformance) on.
func loadGuests(t testing.TB, mods map[string]string) *testGuests {
	t.Helper()
	// A generous call deadline: a loaded test machine must not turn a
	// correct guest into a deadline failure.
	return loadGuestsWith(t, mods, plugins.Limits{CallTimeout: 5 * time.Second})
}

// loadGuestsWith loads mods (module name → test guest) with lim. Every
// module may log (the trapcodec guest does); a guest's log line "wait"
// blocks its host call until the call is stopped (see waitLogs).
func loadGuestsWith(t testing.TB, mods map[string]string, lim plugins.Limits) *testGuests {
	t.Helper()
	ctx := context.Background()
	lim.Grants |= plugins.GrantLog
	eng, err := plugins.NewEngine(plugins.Config{CacheDir: th.CacheDir, Logger: slog.New(waitLogs{}), LogLinesPerSecond: 1000})
	require.NoError(t, err)
	t.Cleanup(func() { _ = eng.Close(ctx) })
	g := &testGuests{mgr: plugins.NewManager(eng, plugins.ManagerOptions{Verify: plugins.AcceptAnyModule}),
		mods: map[abi.Kind][]string{}}
	t.Cleanup(func() { _ = g.mgr.Close(ctx) })
	names := make([]string, 0, len(mods))
	for n := range mods {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		require.NoError(t, g.mgr.Load(ctx, n, th.Wasm(mods[n]), lim))
		require.NoError(t, g.mgr.Use(ctx, n, func(m plugins.Guest) error {
			for _, k := range m.Description().Kinds {
				g.mods[k] = append(g.mods[k], n)
			}
			return nil
		}))
	}
	return g
}

// waitLogs is the guests' log handler: it drops every line, and holds the
// guest's call on the line "wait" until the call is stopped (its deadline,
// or Close), or for a minute at most. The guest waits in a host function,
// so its call runs into its deadline without spending it on CPU: what a
// loaded host does to a healthy entry.
type waitLogs struct{}

func (waitLogs) Enabled(context.Context, slog.Level) bool { return true }
func (waitLogs) WithAttrs([]slog.Attr) slog.Handler       { return waitLogs{} }
func (waitLogs) WithGroup(string) slog.Handler            { return waitLogs{} }

func (waitLogs) Handle(ctx context.Context, r slog.Record) error {
	wait := false
	r.Attrs(func(a slog.Attr) bool {
		wait = wait || (a.Key == "guest_msg" && a.Value.String() == "wait")
		return true
	})
	if wait {
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
	}
	return nil
}

// guestConfig declares no region: the cache-region guest does.
func guestConfig() Config {
	return Config{Role: policy.RoleCache, Defaults: policy.DefaultCacheOps(), Bounds: policy.DefaultCacheBounds(),
		HintSecret: hintSecret, HintWindow: DefaultHintWindow}
}

const productV2 = `{"id":"sku-42","name":"Lamp","price_cents":1999,"currency":"EUR"}`

// TestGuestRegionsAndCodec: a cache-region guest declares the regions and
// canonicalises keys, a codec guest encodes and decodes payloads; the
// host clamps and freezes the guest's policy.
func TestGuestRegionsAndCodec(t *testing.T) {
	srv := redistest.StartStandalone(t)
	g := loadGuests(t, map[string]string{"codec": "codec", "regions": "cache-region"})
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, guestConfig(), newClock(), g)
	pol := in.c.Regions()
	require.Len(t, pol, 2)
	assert.Equal(t, "products", pol[0].ID)
	assert.Equal(t, "guest:regions", pol[0].Source)
	assert.Equal(t, "product", pol[0].Codec)
	assert.Equal(t, uint32(2), pol[0].CodecWrite)
	assert.True(t, pol[0].L1)
	assert.True(t, pol[0].Canonicalize)
	r := in.region(t, "products")
	ctx := ctxT(t)

	_, err := r.Lookup(ctx, Parts("sku-42"))
	assert.ErrorIs(t, err, ErrInvalidKey, "a canonicalising region takes attributes")
	_, err = r.Lookup(ctx, Attrs(Attr{"key", "../etc"}))
	assert.ErrorIs(t, err, ErrInvalidKey, "the guest refuses the key")

	o, err := r.Record(ctx, Attrs(Attr{"key", "sku-42"}, Attr{"locale", "DE"}), []byte(`{"currency":"EUR","price_cents":1999,"name":"Lamp","id":"sku-42"}`), RecordMeta{})
	require.NoError(t, err)
	require.Equal(t, Recorded, o)
	lk, err := r.Lookup(ctx, Attrs(Attr{"key", "sku-42"}, Attr{"locale", "de"}))
	require.NoError(t, err)
	require.Equal(t, Hit, lk.Kind, "equivalent attributes share one entry")
	assert.JSONEq(t, productV2, string(lk.Value))

	_, err = r.Record(ctx, Attrs(Attr{"key", "sku-1"}), []byte(`{"id":"sku-1"}`), RecordMeta{})
	assert.ErrorIs(t, err, ErrValueRefused)
}

// rawPut stores an envelope for key as another writer (an older or newer
// host) would, through the same program.
func rawPut(t testing.TB, in *instance, region string, key Key, env envelope.Envelope) {
	t.Helper()
	b, err := envelope.Encode(env, in.c.state.Load().regions[region].lim)
	require.NoError(t, err)
	rawPutBytes(t, in, region, key, b)
}

// rawPutBytes stores b, envelope or not, as key's entry in the current
// generation, through the same program.
func rawPutBytes(t testing.TB, in *instance, region string, key Key, b []byte) {
	t.Helper()
	ctx := ctxT(t)
	rg := in.c.state.Load().regions[region]
	loc, err := in.c.locate(ctx, rg, key)
	require.NoError(t, err)
	ref, err := in.c.currentRef(ctx, rg, loc)
	require.NoError(t, err)
	res, err := in.c.exec.CachePut(ctx, rg.layout.AnchorOf(loc), ref.entry, programs.CachePutRequest{
		Captured: ref.gen, Value: b, TTL: time.Minute, Condition: programs.CacheConditionAny})
	require.NoError(t, err)
	require.Equal(t, programs.CachePutStored, res.Status)
}

// rawBytes reads key's stored entry as it is.
func rawBytes(t testing.TB, in *instance, region string, key Key) []byte {
	t.Helper()
	ctx := ctxT(t)
	rg := in.c.state.Load().regions[region]
	loc, err := in.c.locate(ctx, rg, key)
	require.NoError(t, err)
	ref, err := in.c.currentRef(ctx, rg, loc)
	require.NoError(t, err)
	rd, err := in.c.dep.ReadScoped(ctx, rg.layout.AnchorOf(loc), ref.entry, rg.readBound)
	require.NoError(t, err)
	require.True(t, rd.Found)
	return rd.Value
}

// rawGet reads key's stored envelope.
func rawGet(t testing.TB, in *instance, region string, key Key) envelope.Envelope {
	t.Helper()
	env, err := envelope.Decode(rawBytes(t, in, region, key), in.c.state.Load().regions[region].lim)
	require.NoError(t, err)
	return env
}

func productEnvelope(clk *clock, version uint32, payload string) envelope.Envelope {
	return envelope.Envelope{CodecID: "product", PayloadVersion: version, WrittenAt: clk.Now(),
		HardExpiresAt: clk.Now().Add(time.Minute), Payload: []byte(payload)}
}

// TestCodecUpgradesOnReadAndRewrites: an entry an older writer stored at
// payload version 1 is read through the codec's upgrade and rewritten at
// version 2 in the background, keeping its expiries.
func TestCodecUpgradesOnReadAndRewrites(t *testing.T) {
	srv := redistest.StartStandalone(t)
	g := loadGuests(t, map[string]string{"codec": "codec", "regions": "cache-region"})
	clk := newClock()
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, guestConfig(), clk, g)
	r := in.region(t, "products")
	ctx, key := ctxT(t), Attrs(Attr{"key", "sku-7"})
	old := productEnvelope(clk, 1, `{"id":"sku-7","name":"Lamp","price":"19.99","currency":"EUR"}`)
	rawPut(t, in, "products", key, old)

	lk, err := r.Lookup(ctx, key)
	require.NoError(t, err)
	require.Equal(t, Hit, lk.Kind)
	assert.JSONEq(t, `{"id":"sku-7","name":"Lamp","price_cents":1999,"currency":"EUR"}`, string(lk.Value))
	require.Eventually(t, func() bool { return rawGet(t, in, "products", key).PayloadVersion == 2 }, 10*time.Second, 5*time.Millisecond)
	now := rawGet(t, in, "products", key)
	assert.Equal(t, old.HardExpiresAt.UnixMilli(), now.HardExpiresAt.UnixMilli(), "the rewrite keeps the expiry")
	require.Eventually(t, func() bool {
		return metric(t, in.reg, "caphost_cache_rewrites_total", map[string]string{"region": "products", "result": "rewritten"}) == 1
	}, 10*time.Second, time.Millisecond, "the rewrite is counted once it returns")
}

// TestIncompatibleSchemaIsNeverAMiss: a newer writer's payload version is
// IncompatibleSchema; with fail-fast GetOrLoad neither loads nor
// overwrites it; a corrupt payload is an error and is quarantined; a
// codec guest that traps fails the lookup closed and quarantines the
// entry — none of them is ever a miss.
func TestIncompatibleSchemaIsNeverAMiss(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clk := newClock()
	g := loadGuests(t, map[string]string{"codec": "codec", "regions": "cache-region"})
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, guestConfig(), clk, g)
	r := in.region(t, "products")
	ctx := ctxT(t)
	never := func(context.Context) (LoadOutcome, error) {
		t.Error("the loader must not run")
		return Loaded(nil, Revision{}), nil
	}

	future := Attrs(Attr{"key", "future"})
	rawPut(t, in, "products", future, productEnvelope(clk, 3, `{"from":"the future"}`))
	lk, err := r.Lookup(ctx, future)
	require.NoError(t, err)
	assert.Equal(t, IncompatibleSchema, lk.Kind)
	assert.Equal(t, FutureVersion, lk.Schema)
	_, err = r.GetOrLoad(ctx, future, never)
	var se *SchemaError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, uint32(3), rawGet(t, in, "products", future).PayloadVersion, "fail-fast never overwrites")

	bad := Attrs(Attr{"key", "bad"})
	rawPut(t, in, "products", bad, productEnvelope(clk, 2, `{"id":`))
	_, err = r.Lookup(ctx, bad)
	assert.ErrorIs(t, err, ErrCorrupt)
	lk, err = r.Lookup(ctx, bad)
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind, "quarantined: the next lookup misses and may reload")
	assert.Equal(t, Invalidated, lk.MissReason)

	trapper := loadGuests(t, map[string]string{"codec": "trapcodec", "regions": "cache-region"})
	tin := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, guestConfig(), clk, trapper)
	tr := tin.region(t, "products")
	trap := Attrs(Attr{"key", "trap"})
	rawPut(t, tin, "products", trap, productEnvelope(clk, 2, `{"trap":1}`))
	_, err = tr.GetOrLoad(ctx, trap, never)
	var ce *CodecError
	require.ErrorAs(t, err, &ce, "a trapping codec fails closed")
	assert.Equal(t, "decode", ce.Op)
	var ge *plugins.GuestError
	require.ErrorAs(t, err, &ge)
	assert.ErrorIs(t, err, plugins.ClassTrap)
	assert.Equal(t, 1.0, metric(t, tin.reg, "caphost_cache_quarantines_total", map[string]string{"region": "products", "reason": "codec-failure"}))
	lk, err = tr.Lookup(ctx, trap)
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind, "the trapping entry was quarantined")
}

// TestCodecEncodeFailuresStoreNothing: a codec guest that traps, runs
// into its deadline or answers a frame the host cannot parse while it
// encodes fails Record and GetOrLoad closed with a *CodecError{Op:
// "encode"}: Record answers no outcome (in particular not RECORDED),
// GetOrLoad does not return the value it loaded, nothing reaches Redis
// and every failure is counted as op="encode".
func TestCodecEncodeFailuresStoreNothing(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg := testConfig(t, func(d *policy.CacheRegionDecl, _ *policy.CacheOps) { d.Codec = "product" })
	for _, tc := range []struct {
		value string
		class plugins.Class
		limit time.Duration // the guest's call deadline
	}{
		{`{"id":"trap"}`, plugins.ClassTrap, 5 * time.Second},
		{`{"id":"garble"}`, plugins.ClassMalformedOutput, 5 * time.Second},
		{`{"id":"spin"}`, plugins.ClassDeadline, 50 * time.Millisecond},
	} {
		t.Run(string(tc.class), func(t *testing.T) {
			g := loadGuestsWith(t, map[string]string{"codec": "trapcodec"}, plugins.Limits{CallTimeout: tc.limit})
			in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, cfg, newClock(), g)
			r := in.region(t, "items")
			ctx, key := ctxT(t), Parts(string(tc.class))
			lk, err := r.Lookup(ctx, key) // the shard's generation exists from here on
			require.NoError(t, err)
			require.Equal(t, Miss, lk.Kind)
			before := keyspace(t, srv)
			failed := func(err error) {
				t.Helper()
				var ce *CodecError
				require.ErrorAs(t, err, &ce, "an encode failure fails the operation")
				assert.Equal(t, "encode", ce.Op)
				assert.ErrorIs(t, err, tc.class)
			}

			o, err := r.Record(ctx, key, []byte(tc.value), RecordMeta{})
			failed(err)
			assert.Zero(t, o, "no record outcome, RECORDED least of all")
			loads := 0
			res, err := r.GetOrLoad(ctx, key, func(context.Context) (LoadOutcome, error) {
				loads++
				return Loaded([]byte(tc.value), Revision{}), nil
			})
			failed(err)
			assert.Equal(t, 1, loads)
			assert.Zero(t, res, "the loaded value is not returned")

			assert.Equal(t, before, keyspace(t, srv), "nothing was written")
			lk, err = r.Lookup(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, Miss, lk.Kind)
			assert.Equal(t, Absent, lk.MissReason)
			m := func(name string, labels map[string]string) float64 {
				labels["region"] = "items"
				return metric(t, in.reg, name, labels)
			}
			assert.Equal(t, 2.0, m("caphost_cache_guest_failures_total", map[string]string{"op": "encode"}))
			assert.Equal(t, 1.0, m("caphost_cache_records_total", map[string]string{"outcome": "error"}))
			assert.Zero(t, m("caphost_cache_records_total", map[string]string{"outcome": "RECORDED"}))
			assert.Equal(t, 1.0, m("caphost_cache_get_or_load_total", map[string]string{"result": "error"}))
		})
	}
}

// TestPoisonedClasses pins which guest failures quarantine an entry: those
// the stored bytes cause on every read, never those of the host's load or
// lifecycle.
func TestPoisonedClasses(t *testing.T) {
	poison := []plugins.Class{plugins.ClassTrap, plugins.ClassMemory, plugins.ClassOutputTooLarge,
		plugins.ClassMalformedOutput, plugins.ClassHostCallLimit, plugins.ClassBadHostCall}
	all := []plugins.Class{plugins.ClassTrap, plugins.ClassDeadline, plugins.ClassCanceled, plugins.ClassMemory,
		plugins.ClassOutputTooLarge, plugins.ClassMalformedOutput, plugins.ClassInputTooLarge, plugins.ClassHostCallLimit,
		plugins.ClassBadHostCall, plugins.ClassABIMismatch, plugins.ClassForbiddenImport, plugins.ClassInvalidModule,
		plugins.ClassInvalidDescription, plugins.ClassNotDeclared, plugins.ClassPoolTimeout, plugins.ClassClosed}
	for _, c := range all {
		err := &CodecError{Region: "r", Op: "decode", Err: &plugins.GuestError{Module: "m", Class: c}}
		assert.Equal(t, slices.Contains(poison, c), poisoned(err), "class %s", c)
	}
	assert.False(t, poisoned(&CodecError{Region: "r", Op: "decode", Err: abi.CodeInternal}), "a status the guest chose")
	assert.False(t, poisoned(errors.New("other")))
}

// TestQuarantineAndReload: with the quarantine-and-reload policy an
// unreadable entry is replaced by the load, only while it is still the
// entry observed.
func TestQuarantineAndReload(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clk := newClock()
	cfg := testConfig(t, func(_ *policy.CacheRegionDecl, o *policy.CacheOps) {
		o.SchemaPolicy = policy.CacheSchemaQuarantineAndReload
	})
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, cfg, clk, nil)
	r := in.region(t, "items")
	ctx, key := ctxT(t), Parts("retired")
	rawPut(t, in, "items", key, envelope.Envelope{CodecID: policy.CacheBuiltinCodec, PayloadVersion: 9,
		WrittenAt: clk.Now(), HardExpiresAt: clk.Now().Add(time.Minute), Payload: []byte("x")})
	res, err := r.GetOrLoad(ctx, key, func(context.Context) (LoadOutcome, error) {
		return Loaded([]byte("reloaded"), Revision{}), nil
	})
	require.NoError(t, err)
	assert.Equal(t, LoadedFromSource, res.Kind)
	assert.Equal(t, IncompatibleSchema, res.Lookup)
	assert.Equal(t, Recorded, res.Record)
	lk, err := r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []byte("reloaded"), lk.Value)
}

// TestAdmissionGuest: the search-results region admits only results that
// took at least 2 ms to load; a refused value is not stored and the
// caller's result stands.
func TestAdmissionGuest(t *testing.T) {
	srv := redistest.StartStandalone(t)
	g := loadGuests(t, map[string]string{"codec": "codec", "regions": "cache-region"})
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, guestConfig(), newClock(), g)
	r := in.region(t, "search-results")
	ctx := ctxT(t)
	page := []byte(`{"query":"red shoes","page":1,"ids":["a","b"]}`)
	load := func(d time.Duration) Loader {
		return func(context.Context) (LoadOutcome, error) {
			time.Sleep(d)
			return Loaded(page, Revision{}), nil
		}
	}
	res, err := r.GetOrLoad(ctx, Attrs(Attr{"key", "red shoes"}), load(0))
	require.NoError(t, err)
	assert.Equal(t, LoadedFromSource, res.Kind)
	assert.Equal(t, NotRecordedProviderPolicy, res.Record, "a fast load is not worth caching")
	res, err = r.GetOrLoad(ctx, Attrs(Attr{"key", "blue shoes"}), load(3*time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, Recorded, res.Record)
}

// TestGuestSwapChecked: a codec guest swap that drops a codec a region
// names is refused before it serves; the serving generation keeps serving.
func TestGuestSwapChecked(t *testing.T) {
	srv := redistest.StartStandalone(t)
	g := loadGuests(t, map[string]string{"codec": "codec", "regions": "cache-region"})
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, guestConfig(), newClock(), g)
	var cand abi.Description
	require.NoError(t, g.mgr.Use(context.Background(), "codec", func(m plugins.Guest) error { cand = *m.Description(); return nil }))
	cand.Codecs = slices.DeleteFunc(slices.Clone(cand.Codecs), func(c abi.CodecDecl) bool { return c.SchemaID == "search-page" })
	err := in.c.CheckSwap(context.Background(), "codec", &cand)
	require.Error(t, err, "search-results names search-page, which the candidate no longer declares")
	assert.Contains(t, err.Error(), "search-page")
	require.NoError(t, in.c.Reload(context.Background()))
	assert.Len(t, in.c.Regions(), 2)
}

// TestRegionGuestFailuresFailClosed: a cache-region guest that traps in its
// canonicaliser fails the operation closed (a *CodecError: never a miss,
// never a source load), and one that traps in its admission predicate
// stores nothing; both are counted.
func TestRegionGuestFailuresFailClosed(t *testing.T) {
	srv := redistest.StartStandalone(t)
	g := loadGuests(t, map[string]string{"regions": "trapregion"})
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, guestConfig(), newClock(), g)
	r := in.region(t, "items")
	ctx := ctxT(t)
	ran := false
	_, err := r.GetOrLoad(ctx, Attrs(Attr{"key", "trap"}), func(context.Context) (LoadOutcome, error) {
		ran = true
		return Loaded([]byte("x"), Revision{}), nil
	})
	var ce *CodecError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "canonicalize", ce.Op)
	assert.ErrorIs(t, err, plugins.ClassTrap)
	assert.False(t, ran, "a failing canonicaliser never loads from the source")
	_, err = r.Lookup(ctx, Attrs(Attr{"key", "trap"}))
	require.ErrorAs(t, err, &ce, "never a miss")
	_, err = r.Invalidate(ctx, Attrs(Attr{"key", "trap"}))
	require.ErrorAs(t, err, &ce, "an invalidation the guest cannot key fails, it is not assumed done")
	assert.Equal(t, 3.0, metric(t, in.reg, "caphost_cache_guest_failures_total", map[string]string{"region": "items", "op": "canonicalize"}))

	res, err := r.GetOrLoad(ctx, Attrs(Attr{"key", "ok"}), func(context.Context) (LoadOutcome, error) {
		return Loaded([]byte("sevenby"), Revision{}), nil
	})
	require.NoError(t, err)
	assert.Equal(t, LoadedFromSource, res.Kind)
	assert.Equal(t, NotRecordedProviderPolicy, res.Record, "a failing admission stores nothing")
	o, err := r.Record(ctx, Attrs(Attr{"key", "ok"}), []byte("sevenby"), RecordMeta{})
	require.NoError(t, err)
	assert.Equal(t, NotRecordedProviderPolicy, o)
	assert.Equal(t, 2.0, metric(t, in.reg, "caphost_cache_guest_failures_total", map[string]string{"region": "items", "op": "admit"}))
}

// productCodec is the reference codec guest's product schema as a
// guest-codec region decodes it.
func productCodec(t *testing.T) guestCodec {
	g := loadGuests(t, map[string]string{"codec": "codec"})
	return guestCodec{module: "codec", schema: "product", region: "products",
		call: func(ctx context.Context, module string, fn func(plugins.Guest) error) error {
			return g.mgr.Use(ctx, module, fn)
		}}
}

// TestGuestCodecDecodePoolsItsCall: a guest decode, on every L2 hit of a
// guest-codec region, answers as before from pooled call state and leaves
// nothing of its call reachable from its pool.
// (TestGuestCodecDecodeAllocatesTheValue pins its allocations.)
func TestGuestCodecDecodePoolsItsCall(t *testing.T) {
	cd := productCodec(t)
	ctx := ctxT(t)
	payload := []byte(productV2)
	value, err := cd.decode(ctx, 2, payload)
	require.NoError(t, err)
	assert.JSONEq(t, productV2, string(value))
	_, err = cd.decode(ctx, 2, []byte(`{"id":`))
	assert.ErrorIs(t, err, errPayload, "a corrupt payload is the codec's verdict, as before")
	dc := decodeCalls.Get().(*decodeCall)
	defer decodeCalls.Put(dc)
	assert.Nil(t, dc.ctx)
	assert.Zero(t, dc.req)
	assert.Zero(t, dc.resp)
	assert.NotNil(t, dc.run)
}
