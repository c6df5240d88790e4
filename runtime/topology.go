package runtime

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

// This file owns when a Cluster lane client refreshes its slot map.
//
// go-redis v9.23.0's ClusterClient reloads its slot map (CLUSTER SLOTS)
// only after a MOVED/ASK or READONLY reply (osscluster.go, process) and when
// the map is older than ClusterOptions.ClusterStateReloadInterval (60 s by
// default). A dead primary produces neither: its slots keep routing to it, a
// dial is refused or a pooled connection reset, and after its replica is
// promoted every call on those slots kept failing until the periodic reload
// — about 55 s in the issue 15 measurement, 58 s after the promotion in
// TestClusterFailoverRefreshesTheSlotMap without this file.
//
// Here a hook on every Cluster lane client (not the node clients) watches the
// outcome of each top-level call and, on a topology-class failure (see
// topologyCause), asks go-redis for one slot-map reload through the lane's
// slotRefresher. It only refreshes the map: the failed call is returned
// unchanged with its own certainty (a dial failure stays
// UNAVAILABLE_BEFORE_SEND, a timeout or reset after the write stays
// INDETERMINATE, a MOVED/CLUSTERDOWN reply stays NOT_APPLIED) and nothing is
// ever sent again on the caller's behalf; the next call routes by the new
// map.
//
// The bound. A slotRefresher calls ClusterClient.ReloadState at most once per
// refreshInterval (a trailing call at the end of the window when requests
// were refused inside it, so the last failure of a burst is never left
// without a refresh). ReloadState is go-redis's LazyReload: single-flight
// per client, and a request that arrives while a load runs or during its
// 200 ms cooldown is coalesced into one more load. One load sends CLUSTER
// SLOTS to the known nodes in random order until one answers (a node whose
// dial fails is skipped without sending). So per lane client, however many
// calls fail, caphost asks for at most 1 + T/refreshInterval loads in any
// window T (4 per second), each sending one CLUSTER SLOTS when a node is
// reachable and at most one per known node otherwise. The Pub/Sub loop's
// reloads while it waits to resubscribe (pubsub.go) go through the same
// slotRefresher, so they count against the same bound. go-redis's own
// triggers — MOVED/ASK/READONLY replies and a map older than
// stateReloadInterval — go through the same single flight (go-redis skips
// the cooldown after a load that failed, so a stale map with every node
// unreachable is retried as fast as loads fail; no CLUSTER SLOTS is sent to
// a node that cannot be dialled). A deployment has one Cluster client per
// lane (policy.Lanes()), and only lanes that carry traffic see failures.
//
// A load runs in go-redis's background goroutine as a top-level call on a
// node client, so it passes admission and the guard like any call: it is
// refused once the runtime drains, and it takes one of the lane's in-flight
// slots, waiting at most Timeouts.Acquire — a lane saturated by calls stuck
// on a paused node can delay it until those time out.
//
// The recovery bound this gives after the cluster has promoted a replica:
// the next failing call on the lane requests a refresh, which runs within
// refreshInterval plus go-redis's 200 ms cooldown plus one CLUSTER SLOTS
// round trip — under a second — and the calls after it go to the new
// primary (TestClusterFailoverRefreshesTheSlotMap measures it).
const (
	// refreshInterval is the minimum spacing of the slot-map reloads the
	// runtime asks of one Cluster lane client.
	refreshInterval = 250 * time.Millisecond
	// stateReloadInterval is ClusterOptions.ClusterStateReloadInterval:
	// the backstop for a stale map that no failure reported (go-redis
	// default 60 s). go-redis checks it on each call's routing, so an idle
	// lane reloads nothing; a busy one sends one CLUSTER SLOTS per interval.
	stateReloadInterval = 10 * time.Second
	// refreshQuiet is how long a deployment must go without a refresh for
	// the next one to be logged at WARN; the ones in between (a failover's
	// burst) are logged at DEBUG. At most one WARN per deployment per
	// refreshQuiet, however long the failure lasts.
	refreshQuiet = 30 * time.Second
)

// Topology-failure causes: the bounded values slotRefresher logs.
const (
	causeDial       = "dial"
	causeTimeout    = "timeout"
	causeConnection = "connection"
	causeEOF        = "eof"
	// causeSubscribe is the Pub/Sub loop waiting to resubscribe (pubsub.go).
	causeSubscribe = "subscribe-retry"
)

// topologyCause reports whether err, the outcome of one call on a Cluster
// lane client, says the slot map may be stale, and a bounded cause for the
// log. It sees go-redis's errors before the admission hook refines them.
//
// Yes: a failed dial (refused, unreachable, timed out — the node is gone or
// moved), a connection that broke under the call (reset, EOF, closed), a
// socket i/o timeout (a paused or partitioned node), and the server replies
// that mean "not here" or "not now" because of the topology: MOVED, ASK,
// READONLY, CLUSTERDOWN, TRYAGAIN, MASTERDOWN, LOADING.
//
// No: success and nil replies, every other server reply (the node answered
// for the slot it owns), the caller's own cancellation, a deadline that
// ended while waiting for a pool turn (a bare context error: overload, not
// topology), pool timeouts and a closed client.
func topologyCause(err error) (string, bool) {
	if err == nil || err == redis.Nil || errors.Is(err, redis.Nil) {
		return "", false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		switch code := certainty.ServerCode(rerr.Error()); code {
		case "MOVED", "ASK", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING":
			return code, true
		}
		return "", false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) {
		return "", false
	}
	var op *net.OpError
	if errors.As(err, &op) {
		switch {
		case op.Op == "dial":
			return causeDial, true
		case op.Timeout():
			return causeTimeout, true
		}
		return causeConnection, true
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return causeDial, true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return causeEOF, true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return causeConnection, true
	}
	return "", false
}

// slotRefresher spaces the slot-map reloads of one Cluster lane client (see
// the bound above). It is safe for concurrent use; request never blocks on
// I/O (ReloadState only starts go-redis's background load).
type slotRefresher struct {
	deployment string
	lane       policy.Lane
	reload     func()
	every      time.Duration
	obs        Observer
	log        *refreshLog

	mu      sync.Mutex
	last    time.Time   // when reload last ran; zero before the first
	pending *time.Timer // the trailing reload of the current window
	cause   string      // the cause the trailing reload reports
	closed  bool
}

func newSlotRefresher(deployment string, l policy.Lane, cc *redis.ClusterClient, obs Observer, log *refreshLog) *slotRefresher {
	return &slotRefresher{
		deployment: deployment, lane: l, every: refreshInterval, obs: obs, log: log,
		reload: func() { cc.ReloadState(context.Background()) },
	}
}

// failed requests a refresh when err is a topology-class failure and
// reports whether it was one.
func (s *slotRefresher) failed(err error) bool {
	cause, ok := topologyCause(err)
	if ok {
		s.request(cause)
	}
	return ok
}

// request asks for one reload: now when the last one ran at least every
// ago, else once at the end of the window (requests meanwhile coalesce into
// that one).
func (s *slotRefresher) request(cause string) {
	s.mu.Lock()
	if s.closed || s.pending != nil {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	if wait := s.every - now.Sub(s.last); !s.last.IsZero() && wait > 0 {
		s.cause = cause
		s.pending = time.AfterFunc(wait, s.trailing)
		s.mu.Unlock()
		return
	}
	s.last = now
	s.mu.Unlock()
	s.run(cause)
}

func (s *slotRefresher) trailing() {
	s.mu.Lock()
	s.pending = nil
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.last = time.Now()
	cause := s.cause
	s.mu.Unlock()
	s.run(cause)
}

func (s *slotRefresher) run(cause string) {
	s.reload()
	s.obs.SlotMapRefresh(s.deployment, s.lane)
	s.log.note(s.deployment, s.lane, cause)
}

// close cancels a pending trailing reload; later requests do nothing. The
// runtime calls it before closing the lane's client.
func (s *slotRefresher) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.pending != nil {
		s.pending.Stop()
		s.pending = nil
	}
}

// refreshLog logs a deployment's refreshes: the first after refreshQuiet
// without one at WARN, the rest at DEBUG. It is shared by the deployment's
// lanes.
type refreshLog struct {
	log  *slog.Logger
	last atomic.Int64 // UnixNano of the deployment's latest refresh; 0 before the first
}

func (l *refreshLog) note(deployment string, ln policy.Lane, cause string) {
	now := time.Now().UnixNano()
	prev := l.last.Swap(now)
	if prev == 0 || time.Duration(now-prev) >= refreshQuiet {
		l.log.Warn("redis cluster: topology failure, refreshing the slot map",
			"deployment", deployment, "lane", string(ln), "cause", cause,
			"refresh_interval", refreshInterval, "quiet_before_next_warn", refreshQuiet)
		return
	}
	l.log.Debug("redis cluster: refreshing the slot map",
		"deployment", deployment, "lane", string(ln), "cause", cause)
}

// refreshHook is the hook of a Cluster lane client just outside
// redirectHook (cluster_redirect.go): it sees each top-level call's
// go-redis error — after a MOVED/ASK was followed, the second node's —
// returns it untouched, and requests a refresh on a topology-class
// failure. It never calls next more than once.
type refreshHook struct{ r *slotRefresher }

var _ redis.Hook = refreshHook{}

func (h refreshHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h refreshHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil {
			h.r.failed(err)
		}
		return err
	}
}

func (h refreshHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil && !h.r.failed(err) {
			for _, c := range cmds {
				if h.r.failed(c.Err()) {
					break
				}
			}
		}
		return err
	}
}
