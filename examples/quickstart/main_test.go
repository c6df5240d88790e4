package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
)

// repoRoot is where make runs the demo from (tests run in this directory).
const repoRoot = "../.."

func TestRedisTargetFrom(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	own, err := redisTargetFrom(env())
	require.NoError(t, err)
	assert.Empty(t, own.addr, "no CAPHOST_REDIS_ADDR: a private server")
	other, err := redisTargetFrom(env())
	require.NoError(t, err)
	assert.NotEqual(t, own.appPass, other.appPass, "a private server gets fresh passwords every run")
	assert.NotEqual(t, own.appPass, own.admPass)

	yours, err := redisTargetFrom(env(envRedisAddr, "10.0.0.1:6400", envAppPass, "a-pw", envAdminPass, "b-pw"))
	require.NoError(t, err)
	assert.Equal(t, redisTarget{addr: "10.0.0.1:6400", appPass: "a-pw", admPass: "b-pw"}, yours, "your Redis: your passwords, never random ones")

	for name, c := range map[string]struct {
		env     func(string) string
		missing []string
	}{
		"both":  {env(envRedisAddr, "10.0.0.1:6400"), []string{envAppPass, envAdminPass}},
		"app":   {env(envRedisAddr, "10.0.0.1:6400", envAdminPass, "b-pw"), []string{envAppPass}},
		"admin": {env(envRedisAddr, "10.0.0.1:6400", envAppPass, "a-pw"), []string{envAdminPass}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := redisTargetFrom(c.env)
			var miss *MissingEnvError
			require.ErrorAs(t, err, &miss)
			assert.Equal(t, c.missing, miss.Names)
			for _, n := range c.missing {
				assert.Contains(t, err.Error(), n)
			}
		})
	}
	_, err = redisTargetFrom(env(envRedisAddr, "no-port", envAppPass, "a", envAdminPass, "b"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "host:port")
}

// readmeACL returns the ACL SETUSER lines of the README's "own Redis"
// section, as written there (with $CAPHOST_DEMO_* password variables).
func readmeACL(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "ACL SETUSER ") {
			lines = append(lines, l)
		}
	}
	require.NoError(t, sc.Err())
	return lines
}

// readmeUsers configures s with the README's ACL SETUSER lines and
// returns the passwords it gave them, by environment variable.
func readmeUsers(ctx context.Context, t *testing.T, s *redistest.Server) map[string]string {
	t.Helper()
	pass := map[string]string{envAppPass: "app-" + randomHex(12), envAdminPass: "admin-" + randomHex(12)}
	lines := readmeACL(t)
	require.Len(t, lines, 2)
	for _, l := range lines {
		args := strings.Fields(os.Expand(l, func(k string) string { return pass[k] }))
		cmd := make([]any, len(args))
		for i, a := range args {
			cmd[i] = a
		}
		require.NoError(t, s.Admin().Do(ctx, cmd...).Err(), "README line %q", l)
	}
	return pass
}

// The README's users are the demo's users: the private server gets the same
// rules, so every `make demo` exercises the lines a reader copies.
func TestREADMEListsTheDemoUsers(t *testing.T) {
	assert.Equal(t, []string{
		"ACL SETUSER " + aclLine(appUser, "$"+envAppPass, appRules),
		"ACL SETUSER " + aclLine(adminUser, "$"+envAdminPass, adminRules),
	}, readmeACL(t))

	// Redis checks the commands a program calls against the caller's ACL,
	// so the app user needs every command any catalog program calls.
	b, err := os.ReadFile(filepath.Join(repoRoot, "runtime", "programs", "program-set.json"))
	require.NoError(t, err)
	var set struct {
		Programs []struct {
			ID          string   `json:"id"`
			ACLCommands []string `json:"aclCommands"`
		} `json:"programs"`
	}
	require.NoError(t, json.Unmarshal(b, &set))
	require.NotEmpty(t, set.Programs)
	granted := strings.Fields(appRules)
	for _, p := range set.Programs {
		for _, c := range p.ACLCommands {
			assert.Contains(t, granted, "+"+strings.ToLower(c), "program %s calls %s", p.ID, c)
		}
	}
}

// goBuild builds pkg (a path from the repository root) into a temporary
// directory and returns the binary.
func goBuild(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command(goTool(t), "build", "-o", out, pkg)
	cmd.Dir = repoRoot
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s:\n%s", pkg, b)
	return out
}

func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	require.NoError(t, err, "the demo tests build caphost and the demo: install Go 1.26+ and put it on PATH")
	return p
}

// cleanEnv is the test's environment without CAPHOST_ variables, so a
// developer's own settings cannot steer the demo under test.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAPHOST_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func TestDemoWithoutPasswordsFailsAtOnce(t *testing.T) {
	cmd := exec.Command(goBuild(t, "./examples/quickstart"), "-bin", "/nonexistent/caphost")
	cmd.Dir = repoRoot
	cmd.Env = cleanEnv(envRedisAddr+"=127.0.0.1:1", envAppPass+"=set-but-not-the-admin-one")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Empty(t, stdout.String(), "nothing was built or started")
	assert.Contains(t, stderr.String(), envAdminPass)
	assert.NotContains(t, stderr.String(), envAppPass+" and", "only the missing variable is named")
	assert.NotContains(t, stderr.String(), "set-but-not-the-admin-one")
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// TestDemoAgainstYourRedis runs the demo as `make demo` does with
// CAPHOST_REDIS_ADDR: against a Redis the test configured with exactly the
// README's ACL SETUSER lines (default user off), and with a redis-server on
// PATH that only records being started.
func TestDemoAgainstYourRedis(t *testing.T) {
	goBin, caphost, demo := goTool(t), goBuild(t, "./cmd/caphost"), goBuild(t, "./examples/quickstart")
	s := redistest.StartStandalone(t, redistest.WithACL())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pass := readmeUsers(ctx, t, s)

	// A redis-server that only leaves a mark: the demo must not start one.
	shim := t.TempDir()
	mark := filepath.Join(shim, "started")
	require.NoError(t, os.WriteFile(filepath.Join(shim, "redis-server"), []byte("#!/bin/sh\ntouch '"+mark+"'\nexit 1\n"), 0o755))

	cmd := exec.CommandContext(ctx, demo, "-bin", caphost, "-phase", "2s")
	cmd.Dir = repoRoot
	cmd.Env = cleanEnv("PATH="+shim+string(os.PathListSeparator)+os.Getenv("PATH"), "GO="+goBin,
		envRedisAddr+"="+s.Addr(), envAppPass+"="+pass[envAppPass], envAdminPass+"="+pass[envAdminPass])
	// Own process group, so the check below sees anything the demo left.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := ansi.ReplaceAllString(out.String(), "")
	require.NoError(t, err, "demo output:\n%s", text)
	t.Logf("demo output:\n%s", text)

	assert.Contains(t, text, "using your Redis at "+s.Addr())
	assert.NotContains(t, text, "started a private redis-server")
	assert.NoFileExists(t, mark, "the demo started a redis-server of its own")
	assert.ErrorIs(t, syscall.Kill(-cmd.Process.Pid, 0), syscall.ESRCH, "a process the demo started is still running")
	for _, p := range pass {
		assert.NotContains(t, text, p, "a password reached the output")
	}

	m := regexp.MustCompile(`(?m)^\s*(\d+) requests, (\d+) failed requests`).FindStringSubmatch(text)
	require.NotNil(t, m, "no summary line")
	assert.NotEqual(t, "0", m[1], "no traffic")
	assert.Equal(t, "0", m[2], "failed requests")
	assert.Regexp(t, `swap: PUT /admin/guests/rate-tiers \(signed v2\) -> 200 in \S+: generation 2, flavour extism, `, text)
	// Both generations as the host reports them: the Go guest, then its
	// AssemblyScript twin.
	assert.Regexp(t, `GET /admin/guests: rate-tiers generation 1 flavour native `, text)
	assert.Regexp(t, `GET /admin/guests: rate-tiers generation 2 flavour extism `, text)
	assert.Regexp(t, `(?m)^\s+r2\s+free\s`, text, "no request was answered by v2's policies (revision r2)")

	// The cache scene on replicas A and B; the demo fails itself when an
	// invariant does not hold, and prints each.
	assert.Regexp(t, `(?m)^\s+replica B: caphost serve --config caphost-b\.yaml .*/readyz 200`, text)
	assert.Regexp(t, `(?m)^\s+hits\s+A: GET \S+ -> miss; reason=absent, refresh granted -> source read -> PUT with the token: RECORDED$`, text)
	assert.Regexp(t, `(?m)^\s+40 reads, half on A, half on B: 40 fresh, .*L1 hits A \d+, B [1-9]\d*`, text, "no L1 hit on replica B")
	assert.Regexp(t, `(?m)^\s+1 granted: read the source`, text)
	assert.Regexp(t, `(?m)^\s+source loads: 1 for 32 requests, 0 failed; latency p50 `, text, "the stampede reached the source more than once")
	assert.Regexp(t, `(?m)^\s+invalidate\s+B before: fresh, from its L1: \{"id":"lamp-`, text)
	assert.Regexp(t, `(?m)^\s+A: DELETE /v1/cache/products/lamp-\S+ -> INVALIDATED `, text)
	assert.Regexp(t, `(?m)^\s+B after:\s+miss; reason=invalidated on `, text, "B still answered the old value after A's DELETE")
	// The coordination scene, embedded in the demo's process.
	assert.Regexp(t, `(?m)^\s+worker A\s+wakes, writes balance 40 with token \d+\.1: REJECTED$`, text)
	assert.Regexp(t, `(?m)^\s+bank\.db\s+acct-7 balance 70: B's write kept`, text)
	assert.Regexp(t, `(?m)^\s+retry\s+same key, same body -> 201 .*Caphost-Idempotent-Replayed: true; charges still 1$`, text)
	// The notification scene, through replica A's sidecar API.
	assert.Regexp(t, `(?m)^\s+locales\s+en-GB -> 202 id \S+, rendered en: DELIVERED, the receiver got "\*Hello Ada,\*"$`, text)
	assert.Regexp(t, `(?m)^\s+de-AT -> 202 id \S+, rendered de: DELIVERED, the receiver got "\*Hallo Bea,\*"$`, text)
	assert.Regexp(t, `(?m)^\s*at rest\s+XRANGE of the 4 intent streams: [1-9]\d* entries, recipients and texts found 0 times \(sealed, AES-256-GCM\)$`, text)
	assert.Regexp(t, `(?m)^\s+-> INDETERMINATE \(plugin-lost-after-send\) after 1 attempt, no fallback$`, text)
	assert.Regexp(t, `(?m)^\s+quarantine stream \d+ -> \d+ entries; caphost_notify_quarantined_total\{reason="undecodable"\} \+1$`, text)
	assert.Regexp(t, `(?m)^\s+receiver\s+4 intents, 4 requests: deliveries per id all 1, forged signatures 0 `, text)
	assert.Contains(t, text, "caphost serve A exited 0")
	assert.Contains(t, text, "caphost serve B exited 0")

	// The traffic reached this server, through the README's users only.
	assert.Positive(t, s.CommandCalls(t, "evalsha")+s.CommandCalls(t, "evalsha_ro"), "rate-limit and cache programs")
	assert.Positive(t, s.CommandCalls(t, "function|load"), "programs deploy")
	assert.Positive(t, s.CommandCalls(t, "getrange"), "the cache lookup's bounded read")
	assert.Positive(t, s.CommandCalls(t, "ssubscribe"), "the invalidation-hint subscription")
	assert.Positive(t, s.CommandCalls(t, "spublish"), "invalidation hints")
	assert.Positive(t, s.CommandCalls(t, "xreadgroup"), "the notify dispatchers' consumer group")
	assertLeftClean(ctx, t, s, "the demo")
}

// assertLeftClean checks that what ran (the demo, a scene) closed every
// connection to s and that nothing was refused on the way: no denied
// command, no failed AUTH.
func assertLeftClean(ctx context.Context, t *testing.T, s *redistest.Server, what string) {
	t.Helper()
	assert.Eventually(t, func() bool { return s.ConnectedClients(t) == 0 }, 10*time.Second, 50*time.Millisecond,
		"%s left connections open", what)
	denied, err := s.Admin().Do(ctx, "ACL", "LOG").Slice()
	require.NoError(t, err)
	assert.Empty(t, denied, "ACL LOG: the README's users lack a permission %s used", what)
}
