package runtime

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/internal/sentinelquorum"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// switchWatch records when the test's own subscriptions first saw
// +switch-master on any sentinel (the Sentinels' announcement, independent
// of caphost) and the address it named.
type switchWatch struct {
	mu    sync.Mutex
	first time.Time
	addr  string
	seen  chan struct{}
}

func watchSwitchMaster(t *testing.T, sen *redistest.Sentinel) *switchWatch {
	t.Helper()
	w := &switchWatch{seen: make(chan struct{})}
	var once sync.Once
	for _, s := range sen.Sentinels() {
		ps := s.Admin().Subscribe(context.Background(), "+switch-master")
		_, err := ps.Receive(ctxT(t, 5*time.Second)) // the subscription confirmation
		require.NoError(t, err)
		ch := ps.Channel()
		t.Cleanup(func() { _ = ps.Close() })
		go func() {
			for m := range ch {
				now := time.Now()
				sm, err := sentinelquorum.ParseSwitchMaster(m.Payload)
				once.Do(func() {
					w.mu.Lock()
					w.first = now
					if err == nil {
						w.addr = sm.New
					}
					w.mu.Unlock()
					close(w.seen)
				})
			}
		}()
	}
	return w
}

func (w *switchWatch) at() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

func (w *switchWatch) newAddr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addr
}

// seqBase offsets the limit argument that carries each call's sequence
// number into MONITOR (far above any count the test reaches).
const seqBase = 1 << 40

// decisions runs steady program traffic (4 workers, one fixed-window
// increment each call, a 1 s deadline) and records when each call started
// and how it ended.
type decisions struct {
	mu       sync.Mutex
	starts   map[int64]time.Time
	ok       []time.Time // completion times of successful calls
	fails    []time.Time // completion times of failed calls
	outcomes map[certainty.Outcome]int
	fail     atomic.Int64
	untyped  atomic.Int64 // failures without a certainty
	seq      atomic.Int64
	halt     func()
}

func runDecisions(t *testing.T, r *Runtime, dep *Deployment) *decisions {
	t.Helper()
	ctx := ctxT(t, 120*time.Second)
	var ks []keys.Key
	for _, s := range []string{"a", "b", "c", "d"} {
		k, err := r.Keys().Build(keys.Spec{Capability: keys.CapRate, Region: "failover", KeyVersion: 1,
			Kind: "window", Parts: [][]byte{[]byte(s)}})
		require.NoError(t, err)
		ks = append(ks, k)
	}
	d := &decisions{starts: map[int64]time.Time{}, outcomes: map[certainty.Outcome]int{}}
	d.halt = runWorkers(t, 4, func(i int) {
		seq := d.seq.Add(1)
		d.mu.Lock()
		d.starts[seq] = time.Now()
		d.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		res, err := dep.Programs().IncrementWithInitialTTL(cctx, ks[i%len(ks)], 1, seqBase+seq, time.Minute)
		cancel()
		now := time.Now()
		if err == nil && res.Status == programs.IncrementIncremented {
			d.mu.Lock()
			d.ok = append(d.ok, now)
			d.mu.Unlock()
			return
		}
		o := res.Outcome()
		if err != nil {
			var typed bool
			if o, typed = setOutcome(err); !typed {
				d.untyped.Add(1)
			}
		}
		d.fail.Add(1)
		d.mu.Lock()
		d.fails = append(d.fails, now)
		d.outcomes[o]++
		d.mu.Unlock()
		time.Sleep(5 * time.Millisecond) // a failing call returns at once; do not spin
	})
	return d
}

func (d *decisions) startTimes() map[int64]time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[int64]time.Time, len(d.starts))
	for k, v := range d.starts {
		out[k] = v
	}
	return out
}

func (d *decisions) outcomeCounts() map[certainty.Outcome]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[certainty.Outcome]int, len(d.outcomes))
	for k, v := range d.outcomes {
		out[k] = v
	}
	return out
}

// firstOKAfter is the completion time of the first successful call that
// completed after at (zero if none).
func (d *decisions) firstOKAfter(at time.Time) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ok := range d.ok {
		if ok.After(at) {
			return ok
		}
	}
	return time.Time{}
}

// firstFailAfter is the completion time of the first failed call that
// completed after at (zero if none).
func (d *decisions) firstFailAfter(at time.Time) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.fails {
		if f.After(at) {
			return f
		}
	}
	return time.Time{}
}

func (d *decisions) waitOKAfter(t *testing.T, at time.Time, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if ok := d.firstOKAfter(at); !ok.IsZero() {
			return ok
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no successful decision within %s after %s", within, at)
	return time.Time{}
}

func sentinelTestDeployment(sen *redistest.Sentinel) policy.Deployment {
	d := testDeployment("sen", &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs()})
	d.Lanes[policy.LaneScript] = policy.LaneConfig{PoolSize: 4, MaxInFlight: 8}
	d.Timeouts.Command = 500 * time.Millisecond
	return d
}

// awaitSwitch waits until caphost's route has installed a primary newer
// than generation 1 and returns it.
func awaitSwitch(t *testing.T, route *sentinelRoute) *sentinelTarget {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if cur := route.cur.Load(); cur != nil && cur.gen > 1 {
			return cur
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("caphost installed no new primary within 30 s")
	return nil
}

// sentinelsName asserts that every sentinel now names addr.
func sentinelsName(t *testing.T, sen *redistest.Sentinel, addr string) {
	t.Helper()
	for _, s := range sen.Sentinels() {
		got, err := s.Admin().Do(ctxT(t, 5*time.Second), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sen.MasterName()).StringSlice()
		require.NoError(t, err)
		require.Len(t, got, 2)
		assert.Equal(t, addr, net.JoinHostPort(got[0], got[1]), "sentinel %s", s.Addr())
	}
}

// TestSentinelKillUnderTraffic kills the primary under steady program
// traffic. Ordering: the Sentinels announce +switch-master, caphost's new
// primary is the one every Sentinel names (and the one the announcement
// names), then decisions succeed. The delay from +switch-master to the
// first successful decision is measured and logged, never asserted.
func TestSentinelKillUnderTraffic(t *testing.T) {
	sen := redistest.StartSentinel(t)
	watch := watchSwitchMaster(t, sen)
	r := newRuntime(t, testConfig(sentinelTestDeployment(sen)))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	require.Len(t, r.sentinels, 1)
	route := r.sentinels[0]
	traffic := runDecisions(t, r, dep)
	traffic.waitOKAfter(t, time.Now(), 10*time.Second)
	require.Equal(t, sen.Primary().Addr(), route.cur.Load().addr)

	old := sen.Primary()
	killed := time.Now()
	old.Kill()
	select {
	case <-watch.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("no +switch-master within 30 s of the kill")
	}
	switched := watch.at()
	cur := awaitSwitch(t, route)
	next := sen.AwaitFailover(t, old)
	assert.Equal(t, next.Addr(), cur.addr, "caphost's primary is the one the Sentinels promoted")
	assert.Equal(t, watch.newAddr(), cur.addr, "and the one +switch-master names")
	sentinelsName(t, sen, cur.addr)
	assert.GreaterOrEqual(t, cur.verdict.Agreeing, 2, "a quorum agreed")
	ok := traffic.waitOKAfter(t, cur.at, 20*time.Second)
	down := traffic.firstFailAfter(killed)
	traffic.halt()
	require.False(t, down.IsZero(), "calls failed while the primary was down")

	// go-redis's dial breaker opened on the script lane during the outage
	// and was closed by the parked probe at the switch (sentinelDialer).
	route.mu.Lock()
	script := route.dialers[policy.LaneScript]
	route.mu.Unlock()
	assert.Positive(t, script.probeSwitches.Load(), "the breaker probe reached the new primary")

	t.Logf("timeline: kill → first failed decision +%s → +switch-master +%s → caphost switched %s after it "+
		"(generation %d, %d of %d sentinels agreed, %d discoveries) → first successful decision %s after +switch-master "+
		"(%d failed calls)",
		down.Sub(killed).Round(time.Millisecond), switched.Sub(killed).Round(time.Millisecond),
		cur.at.Sub(switched).Round(time.Millisecond), cur.gen, cur.verdict.Agreeing, cur.verdict.Asked,
		route.runs.Load(), ok.Sub(switched).Round(time.Millisecond), traffic.fail.Load())
}

// TestSentinelPausedPrimaryGetsNoWriteAfterTheSwitch pauses the primary
// (SIGSTOP: its sockets keep accepting bytes, nothing executes), lets the
// Sentinels fail over, resumes it while traffic continues, and waits until
// it rejoined as a replica of the new primary. MONITOR on the old primary,
// started before the pause, then shows every EVALSHA it ever executed:
// each was started before caphost installed the new primary, none twice.
// The calls caught in the pause end INDETERMINATE (sent, no reply) and are
// not sent again.
func TestSentinelPausedPrimaryGetsNoWriteAfterTheSwitch(t *testing.T) {
	sen := redistest.StartSentinel(t)
	r := newRuntime(t, testConfig(sentinelTestDeployment(sen)))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	route := r.sentinels[0]
	traffic := runDecisions(t, r, dep)
	traffic.waitOKAfter(t, time.Now(), 10*time.Second)

	old := sen.Primary()
	mon := old.Monitor(t)
	// Pause only once MONITOR has seen a call: on a loaded machine the
	// traffic may not reach the primary between MONITOR's start and the
	// pause, and the check below needs calls from before the pause.
	require.Eventually(t, func() bool {
		for _, line := range mon.Lines() {
			if _, ok := seqOf(line); ok {
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "MONITOR saw no call before the pause")
	paused := time.Now()
	old.Pause()
	t.Cleanup(old.Resume)
	next := sen.AwaitFailover(t, old)
	cur := awaitSwitch(t, route)
	require.Equal(t, next.Addr(), cur.addr)
	traffic.waitOKAfter(t, cur.at, 20*time.Second)

	resumed := time.Now()
	old.Resume()
	sen.AwaitReplicaOf(t, old, next)
	rejoined := time.Now()
	traffic.waitOKAfter(t, rejoined, 10*time.Second) // traffic ran through the rejoin
	traffic.halt()

	starts := traffic.startTimes()
	seen := map[int64]int{}
	evalshas := 0
	for _, line := range mon.Lines() {
		seq, ok := seqOf(line)
		if !ok {
			continue
		}
		evalshas++
		seen[seq]++
		start, known := starts[seq]
		require.True(t, known, "a call the test did not make reached the old primary: %s", line)
		assert.True(t, start.Before(cur.at), "call %d started %s after the switch and reached the old primary",
			seq, start.Sub(cur.at))
	}
	for seq, n := range seen {
		assert.Equal(t, 1, n, "call %d reached the old primary %d times", seq, n)
	}
	require.Positive(t, evalshas, "MONITOR saw the traffic before the pause")
	after := 0
	for _, start := range starts {
		if start.After(cur.at) {
			after++
		}
	}
	require.Positive(t, after, "calls ran after the switch")
	outcomes := traffic.outcomeCounts()
	assert.Positive(t, outcomes[certainty.Indeterminate], "the calls caught in the pause stay INDETERMINATE")
	assert.Zero(t, outcomes[certainty.Applied], "no failed call reports APPLIED")
	assert.Zero(t, traffic.untyped.Load(), "every failure carries a certainty")
	t.Logf("pause → caphost switched +%s (generation %d); resume → rejoined as replica +%s; old primary executed %d EVALSHA "+
		"(all started before the switch), %d calls started after it; failed calls by outcome %v",
		cur.at.Sub(paused).Round(time.Millisecond), cur.gen, rejoined.Sub(resumed).Round(time.Millisecond),
		evalshas, after, outcomes)
}

// seqOf extracts the call sequence number from a MONITOR line of the
// increment program's EVALSHA (its limit argument is seqBase + seq).
func seqOf(line string) (int64, bool) {
	if !strings.Contains(line, `"EVALSHA"`) && !strings.Contains(line, `"evalsha"`) {
		return 0, false
	}
	f := strings.Fields(line)
	for _, a := range f {
		v, err := strconv.ParseInt(strings.Trim(a, `"`), 10, 64)
		if err == nil && v > seqBase {
			return v - seqBase, true
		}
	}
	return 0, false
}
