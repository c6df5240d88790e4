package redistest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// AwaitReplicated blocks until at least n replicas of primary acknowledged
// every write primary applied so far (WAIT n on the harness's admin
// connection), so a failover after it cannot lose those writes.
func AwaitReplicated(t testing.TB, primary *Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	got, err := primary.admin.Do(ctx, "WAIT", n, int64(sentinelTimeout/time.Millisecond)).Int64()
	if err != nil {
		t.Fatalf("redistest: WAIT %d on %s: %v", n, primary.Addr(), err)
	}
	if got < int64(n) {
		t.Fatalf("redistest: only %d of %d replicas of %s acknowledged its writes", got, n, primary.Addr())
	}
}

// DetachReplicas makes primary's next writes unreplicated, deterministically:
// it pauses every given replica (SIGSTOP), drops their replication links on
// primary (CLIENT KILL TYPE replica) and waits until primary reports no
// connected replica. A write primary acknowledges from then on reaches no
// replica until reattach resumes them (they reconnect and resync if
// primary is still alive); killing primary before reattach loses those
// writes for good — the asynchronous-replication failover window, made
// reproducible. reattach is idempotent and also runs at cleanup.
//
// Keep the detached span short (well under the deployment's
// down-after-milliseconds) when a failover follows: a replica paused for
// long is not a promotion candidate.
func DetachReplicas(t testing.TB, primary *Server, replicas ...*Server) (reattach func()) {
	t.Helper()
	var once sync.Once
	reattach = func() {
		once.Do(func() {
			for _, r := range replicas {
				r.Resume()
			}
		})
	}
	t.Cleanup(reattach)
	for _, r := range replicas {
		r.Pause()
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	if err := primary.admin.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		reattach()
		t.Fatalf("redistest: CLIENT KILL TYPE replica on %s: %v", primary.Addr(), err)
	}
	err := pollAll(ctx, "primary to drop its replicas", []*Server{primary}, func(n *Server) (bool, string, error) {
		repl, err := n.admin.Info(ctx, "replication").Result()
		if err != nil {
			return false, "", err
		}
		return strings.Contains(repl, "connected_slaves:0\r\n"), repl, nil
	})
	if err != nil {
		reattach()
		t.Fatal(fmt.Errorf("redistest: detach replicas: %w", err))
	}
	return reattach
}

// AwaitPromoted waits until replica reports ROLE master: after its
// primary died, the cluster (or the Sentinels) promoted it.
func AwaitPromoted(t testing.TB, replica *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	err := pollAll(ctx, "replica promotion", []*Server{replica}, func(n *Server) (bool, string, error) {
		role, err := n.admin.Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 {
			return false, "", nil // still loading or failing over: keep polling
		}
		return role[0] == "master", fmt.Sprint(role[0]), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
