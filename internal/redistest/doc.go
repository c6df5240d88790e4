// Package redistest owns the real-Redis test harness: it starts private
// redis-server processes (standalone, 3+3 cluster, 1+2 sentinel with three
// sentinels), optionally with ACL users and TLS, on free loopback ports in
// per-test temporary directories, and an in-test TCP proxy for fault injection.
//
// It is test-support code only: it may import testing and go-redis (the only
// package outside runtime/... allowed to), and production packages must never
// import it. It never touches the shared server on 127.0.0.1:6379.
//
// Typical use:
//
//	s := redistest.StartStandalone(t, redistest.WithACL(redistest.ACLUser{
//		Name: "app", Password: "pw", Rules: []string{"~ca:*", "+@all", "-@dangerous"},
//	}))
//	// point the code under test at s.Addr() as user "app" ...
//	require.Zero(t, s.CommandCalls(t, "flushall")) // provably never sent
//
// Lifetime: every process runs in its own process group with Pdeathsig
// SIGKILL (so it dies with the test binary) and t.Cleanup kills it and waits.
// A missing redis-server fails the test with an install hint; nothing skips.
//
// Harness connections (Admin clients) are named "redistest-admin" and are
// excluded from ConnectedClients; commands they send (PING, INFO, CLIENT LIST,
// CLUSTER ..., SENTINEL ...) do appear in CommandCalls.
//
// What may be changed here: new helpers and options, as long as the exported
// names other packages code against keep their signatures and semantics.
package redistest
