package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// AwaitReplicated blocks until at least n replicas of primary acknowledged
// every write primary applied so far, so a failover after it cannot lose
// those writes. It reads primary's replication offset once and waits
// until n online replicas report an acknowledged offset at least as far
// (INFO replication; replicas acknowledge about once a second). A WAIT on
// the harness's own connection would not do: that connection wrote
// nothing, so WAIT answers as soon as the replicas are online, whatever
// they received.
func AwaitReplicated(t testing.TB, primary *Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	info, err := primary.admin.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatalf("redistest: INFO replication on %s: %v", primary.Addr(), err)
	}
	target, ok := replicationField(info, "master_repl_offset")
	if !ok {
		t.Fatalf("redistest: %s reports no master_repl_offset", primary.Addr())
	}
	err = pollAll(ctx, fmt.Sprintf("%d replicas to acknowledge offset %d", n, target), []*Server{primary},
		func(s *Server) (bool, string, error) {
			info, err := s.admin.Info(ctx, "replication").Result()
			if err != nil {
				return false, "", err
			}
			return acknowledgedReplicas(info, target) >= n, info, nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

// replicationField returns the integer field name of an INFO replication
// reply.
func replicationField(info, name string) (int64, bool) {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// acknowledgedReplicas counts the online replicas of an INFO replication
// reply ("slaveN:ip=…,port=…,state=online,offset=…,lag=…") whose
// acknowledged offset is at least target.
func acknowledgedReplicas(info string, target int64) int {
	n := 0
	for _, line := range strings.Split(info, "\r\n") {
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, ":ip=") {
			continue
		}
		_, fields, _ := strings.Cut(line, ":")
		online, offset := false, int64(-1)
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "state":
				online = v == "online"
			case "offset":
				offset, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if online && offset >= target {
			n++
		}
	}
	return n
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
