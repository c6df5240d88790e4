// Command quickstart is caphost's demo (run it with `make demo`).
//
// It builds the rate-policy guest twice: revision v1 in Go
// (guests/rate-policy, native flavour) and v2, in which every limit is
// doubled, in AssemblyScript (guests/rate-policy-as, Extism flavour, with
// the asc its lockfile pins: `make demo` runs `make guests`, which installs
// it), the cache's reference guests (guests/codec and guests/cache-region,
// Go) and the notify capability's renderer (guests/renderer, Go), bundles
// the self-test vectors into each, starts a private redis-server with ACL
// users (unless CAPHOST_REDIS_ADDR names one you run, configured with the
// same users: README "The demo against your own Redis"), creates a demo
// signing key and signs the five modules, runs the operator checks
// briefly, starts `caphost serve` (replica A), drives traffic from six
// simulated clients (two per plan) through POST /v1/ratelimit/evaluate,
// hot-swaps the guest to v2 mid-run through PUT /admin/guests/rate-tiers
// while traffic continues, prints both
// generations as GET /admin/guests reports them (flavour included), a
// per-plan allow/deny table per policy revision and the number of failed
// requests.
//
// Then it starts replica B, a second `caphost serve` with the same
// configuration but server.listen, on the same Redis, and shows the cache
// capability on region products through the sidecar API of both replicas,
// with a simulated product catalogue as the source (cache.go): a miss one
// client fills with a refresh token, then fresh reads and L1 hits on both
// replicas; 32 clients over both replicas missing one cold key at once,
// absorbed with exactly one source load; and a DELETE on A reaching B's L1
// through the invalidation hint, B's next read a miss. Each of these
// invariants fails the demo when it does not hold.
//
// Then it runs caphost embedded, as a Go library in its own process, on
// the same Redis as the same ACL user (coordination.go): a fenced lease
// whose paused holder's late write a SQLite database rejects with
// fence.ErrStaleToken while the newer holder's write stays, and a
// "create payment" handler behind the Idempotency-Key middleware whose
// retry after a dropped connection is replayed without charging again
// (and whose key, reused for another body, is refused 422). Then the
// notification scene (notify.go): the renderer guest renders in two
// locales, the webhook transport plugin delivers each intent once to a
// receiver that checks the signature, a repeat is a duplicate, the
// streams read raw hold no recipient or text (sealed at rest), the
// plugins are killed mid-call (that intent ends INDETERMINATE, never
// resent; the relaunched plugins deliver the next) and a malformed stream
// entry is quarantined. Finally it
// stops both replicas (SIGTERM, graceful, exit status 0 required) and
// Redis. Nothing it started is left running, whatever happens.
//
// This package owns the demo's orchestration and output only; it talks to
// caphost through the binary and its HTTP API, like a user, except in the
// coordination scene, which shows the embedded mode.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

const guestName = "rate-tiers"

// The variables that point the demo at a Redis you run, and the passwords
// of its two ACL users there.
const (
	envRedisAddr = "CAPHOST_REDIS_ADDR"
	envAppPass   = "CAPHOST_DEMO_APP_PASS"
	envAdminPass = "CAPHOST_DEMO_ADMIN_PASS"
)

// The demo's ACL users, one per credential in caphost.yaml: appUser serves
// the regular, script, blocking and pubsub lanes (auth.default), adminUser
// the admin lane. The rules grant what those lanes run against a standalone
// Redis for the rate-limit and cache capabilities, and nothing more; the
// demo's private redis-server gets exactly these users, and the README
// lists them as ACL SETUSER lines (a test keeps the two equal, checks the
// catalog programs' commands against them and runs the demo against a
// Redis configured with the README's lines). HELLO and AUTH need no grant:
// Redis never checks them against the ACL.
const (
	appUser   = "demo-app"
	adminUser = "demo-admin"
	// Every lane: CLIENT SETNAME on connect (client-name), PING (health, probe).
	connRules = "+client|setname +ping"
	appRules  = "~ca:demo:dev:* &ca:demo:dev:* " + connRules +
		// regular lane: the probe's ephemeral write/read (SET, GET, DEL) and
		// the cache lookup's bounded read, one pipeline of GET (the shard's
		// generation) and GETRANGE (the entry, at most the region's largest
		// value + 1 byte), then STRLEN only for an oversized entry
		" +set +get +del +strlen +getrange" +
		// script lane: catalog programs by digest, in both program modes
		" +evalsha +evalsha_ro +script|load +script|exists +fcall +fcall_ro" +
		// what the catalog programs call (runtime/programs/program-set.json
		// aclCommands): the rate limiter's, and the cache's cache-put-v2,
		// region-generation-init|bump-v1 and cache-refresh-claim|release-v1,
		// which call TYPE, GET, SET, DEL, PTTL, STRLEN and GETRANGE only; the
		// coordination scene's fenced-lease (TYPE, GET, SET, PTTL, PEXPIRE,
		// DEL) and idempotency programs (TYPE, HMGET, HGET, HSET, PTTL,
		// PEXPIRE) need nothing more; the v2 sliding-log and concurrency
		// programs check a key's presence with EXISTS; sliding-log v3 sets
		// its TTL with PEXPIREAT, concurrency v3 reads with ZMSCORE and
		// ZCARD; the notify programs
		// append, acknowledge and quarantine stream entries (XADD, XACK,
		// XPENDING, XRANGE)
		" +time +type +exists +incrby +pttl +pexpire +pexpireat +hdel +hexists +hget +hlen +hmget +hrandfield +hset" +
		" +zadd +zcard +zcount +zrangebyscore +zrem +zremrangebyscore +zrevrangebyscore +zmscore +zscore" +
		" +xadd +xack +xpending +xrange" +
		// the notify dispatcher's consumer group: create it, read new
		// entries (blocking lane), reclaim a dead consumer's, read its lag
		" +xgroup|create +xreadgroup +xautoclaim +xinfo|groups" +
		// pubsub lane: the runtime's Pub/Sub facade (the cache's L1
		// invalidation hints) uses sharded Pub/Sub on channels under the
		// namespace (&...)
		" +spublish +ssubscribe"
	// The admin lane touches no key: the probe's ROLE, INFO, CONFIG GET
	// (maxmemory-policy, appendfsync, save) and ACL GETUSER default (is the
	// default user enabled), and programs deploy | verify in
	// functions-provisioned mode.
	adminRules = connRules + " +role +info +config|get +acl|getuser +function|load +function|list"
)

// aclLine is one user as an ACL SETUSER argument list (and, after "user",
// an aclfile line): a reset user, on, with one password.
func aclLine(user, pass, rules string) string {
	return user + " reset on >" + pass + " " + rules
}

func main() {
	bin := flag.String("bin", "build/caphost", "the caphost binary")
	phase := flag.Duration("phase", 4*time.Second, "traffic before and after the swap")
	checkEnv := flag.Bool("check-env", false, "only check the demo's environment variables (make demo runs this before building)")
	flag.Parse()
	target, err := redisTargetFrom(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(2)
	}
	if *checkEnv {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	d := &demo{bin: *bin, phase: *phase, out: os.Stdout, target: target}
	err = d.run(ctx)
	var logs []string
	if err != nil {
		for _, r := range d.replicas { // read before cleanup removes them
			if b, _ := os.ReadFile(r.log); len(b) > 0 {
				logs = append(logs, fmt.Sprintf("--- caphost serve %s log (last lines)\n%s", r.name, tail(string(b), 15)))
			}
		}
	}
	d.cleanup()
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		for _, l := range logs {
			fmt.Fprint(os.Stderr, l)
		}
		os.Exit(1)
	}
}

// redisTarget is where the demo's Redis comes from: yours (addr set, with
// the passwords you configured there) or a private server it starts (with
// fresh random passwords).
type redisTarget struct {
	addr             string // "" = start a private redis-server
	appPass, admPass string
}

// MissingEnvError names the variables the demo needs and did not get.
type MissingEnvError struct{ Names []string }

func (e *MissingEnvError) Error() string {
	return fmt.Sprintf("%s is set, so the demo runs against your Redis as ACL users %s and %s: set %s "+
		"(the passwords you gave those users; README \"The demo against your own Redis\" lists them)",
		envRedisAddr, appUser, adminUser, strings.Join(e.Names, " and "))
}

// redisTargetFrom reads the environment. It fails before anything is built
// when CAPHOST_REDIS_ADDR is set without both passwords: random ones could
// never match the users of a server the demo did not configure.
func redisTargetFrom(getenv func(string) string) (redisTarget, error) {
	addr := getenv(envRedisAddr)
	if addr == "" {
		return redisTarget{appPass: "app-" + randomHex(12), admPass: "admin-" + randomHex(12)}, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return redisTarget{}, fmt.Errorf("%s=%q is not host:port", envRedisAddr, addr)
	}
	t := redisTarget{addr: addr, appPass: getenv(envAppPass), admPass: getenv(envAdminPass)}
	var missing []string
	if t.appPass == "" {
		missing = append(missing, envAppPass)
	}
	if t.admPass == "" {
		missing = append(missing, envAdminPass)
	}
	if len(missing) > 0 {
		return redisTarget{}, &MissingEnvError{Names: missing}
	}
	return t, nil
}

type demo struct {
	bin    string
	phase  time.Duration
	out    io.Writer
	target redisTarget

	work     string
	env      []string
	redis    *exec.Cmd
	replicas []*replica // every caphost serve started, A first
	base     string     // replica A's http://127.0.0.1:port
	token    string
	plugin   string // the webhook transport plugin the replicas launch
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "\n\033[1m== "+format+"\033[0m\n", args...)
}

func (d *demo) line(format string, args ...any) { fmt.Fprintf(d.out, "   "+format+"\n", args...) }

func (d *demo) run(ctx context.Context) error {
	var err error
	if d.bin, err = filepath.Abs(d.bin); err != nil {
		return err
	}
	here, err := sourceDir()
	if err != nil {
		return err
	}
	if d.work, err = os.MkdirTemp("", "caphost-demo."); err != nil {
		return err
	}
	d.token = randomHex(24)
	// caphost.yaml names the passwords as secret://user@env/... references;
	// with your Redis they are already in the environment.
	d.env = append(os.Environ(),
		envAppPass+"="+d.target.appPass,
		envAdminPass+"="+d.target.admPass,
		"CAPHOST_DEMO_KEY_V1="+randomHex(32),
		"CAPHOST_DEMO_CACHE_HINT_KEY="+randomHex(32),
		"CAPHOST_DEMO_ADMIN_TOKEN="+d.token,
	)

	d.say("building the rate-policy guest: v1 in Go (native), v2 in AssemblyScript (Extism, every limit doubled)")
	v1, v2 := filepath.Join(d.work, guestName+".wasm"), filepath.Join(d.work, guestName+"-v2.wasm")
	root := filepath.Join(here, "..", "..")
	if err := buildGoGuest(ctx, root, "rate-policy", v1); err != nil {
		return err
	}
	if err := buildASGuest(ctx, root, v2, 2); err != nil {
		return err
	}
	// The cache's reference guests and the notify capability's renderer,
	// Go (native), as shipped.
	codec, regions := filepath.Join(d.work, "codec.wasm"), filepath.Join(d.work, "cache-region.wasm")
	renderer := filepath.Join(d.work, "renderer.wasm")
	for _, g := range []struct{ name, out string }{{"codec", codec}, {"cache-region", regions}, {"renderer", renderer}} {
		if err := buildGoGuest(ctx, root, g.name, g.out); err != nil {
			return err
		}
	}
	if _, err := d.caphost(ctx, "guest", "keygen", "--out", d.work, "--name", "demo"); err != nil {
		return err
	}
	for _, m := range []string{v1, v2, codec, regions, renderer} {
		if _, err := d.caphost(ctx, "guest", "sign", "--key", filepath.Join(d.work, "demo.key"), m); err != nil {
			return err
		}
	}
	d.line("v1 sha256 %s, v2 sha256 %s; both signed with a fresh demo key", short(fileDigest(v1)), short(fileDigest(v2)))
	d.line("and the cache's guests (Go, native): codec sha256 %s, cache-region sha256 %s; signed alike",
		short(fileDigest(codec)), short(fileDigest(regions)))
	// The notify capability's webhook transport, a go-plugin binary that
	// `make demo` builds (make transports): copied next to the
	// configuration, pinned by its sha256, posting to the demo's receiver.
	plugin := filepath.Join(d.work, "webhook")
	d.plugin = plugin
	if err := copyFile(filepath.Join(root, "build", "transports", "webhook"), plugin); err != nil {
		return fmt.Errorf("the webhook transport plugin: %w (run `make transports`)", err)
	}
	secret := randomHex(32)
	d.env = append(d.env, envWebhookSecret+"="+secret, envSealKey+"="+randomHex(32))
	rcv, err := startReceiver(secret)
	if err != nil {
		return err
	}
	defer rcv.close()
	d.line("and the renderer guest (sha256 %s, signed); the webhook transport plugin (sha256 %s) posts to %s",
		short(fileDigest(renderer)), short(fileDigest(plugin)), strings.TrimPrefix(rcv.url(), "http://"))

	addr, err := d.startRedis(ctx)
	if err != nil {
		return err
	}
	a, b := &replica{name: "A", log: filepath.Join(d.work, "serve.log")}, &replica{name: "B", log: filepath.Join(d.work, "serve-b.log")}
	tmpl, err := os.ReadFile(filepath.Join(here, "caphost.yaml"))
	if err != nil {
		return err
	}
	// Both replicas' files differ only in server.listen; the
	// functions-provisioned one serves programs deploy | verify.
	fcfg := filepath.Join(d.work, "caphost-functions.yaml")
	a.cfg, b.cfg = filepath.Join(d.work, "caphost.yaml"), filepath.Join(d.work, "caphost-b.yaml")
	for _, f := range []struct {
		r          *replica
		path, mode string
	}{{a, a.cfg, "evalsha-managed"}, {a, fcfg, "functions-provisioned"}, {b, b.cfg, "evalsha-managed"}} {
		if f.r.base == "" {
			listen, err := freeAddr()
			if err != nil {
				return err
			}
			f.r.base = "http://" + listen
		}
		s := strings.NewReplacer("@ADDR@", addr, "@MODE@", f.mode, "@LISTEN@", strings.TrimPrefix(f.r.base, "http://"),
			"@SHA256@", fileDigest(v1), "@CODEC_SHA256@", fileDigest(codec), "@REGION_SHA256@", fileDigest(regions),
			"@CACHE_DIR@", filepath.Join(root, "build", "wazero-cache"), "@RENDERER_SHA256@", fileDigest(renderer),
			"@WEBHOOK_SHA256@", fileDigest(plugin), "@WEBHOOK_URL@", rcv.url()).Replace(string(tmpl))
		if err := os.WriteFile(f.path, []byte(s), 0o600); err != nil {
			return err
		}
	}
	d.base = a.base
	cfg := a.cfg

	d.say("operator checks (caphost check | programs)")
	steps := []struct {
		what string
		args []string
		keep func(string) bool
	}{
		{"check: configuration, guests and signatures", []string{"check", "--config", cfg, "--all-roles"}, prefix("capabilities:", "programs:")},
		{"check --probe: auth, topology, version, programs, write/read, eviction", []string{"check", "--config", cfg, "--all-roles", "--probe"}, contains("version", "eviction")},
		{"programs list", []string{"programs", "list", "--config", cfg}, prefix("program set")},
		{"programs deploy (functions-provisioned: FUNCTION LOAD on the admin lane)", []string{"programs", "deploy", "--config", fcfg}, nil},
		{"programs verify (functions-provisioned: library version and digest match)", []string{"programs", "verify", "--config", fcfg}, nil},
	}
	for _, s := range steps {
		out, err := d.caphost(ctx, s.args...)
		if err != nil {
			return err
		}
		d.line("ok  %s", s.what)
		if s.keep != nil {
			for _, l := range strings.Split(out, "\n") {
				if s.keep(strings.TrimSpace(l)) {
					d.line("      %s", strings.TrimSpace(l))
				}
			}
		}
	}

	d.say("caphost serve --config caphost.yaml   (listening on %s)", strings.TrimPrefix(a.base, "http://"))
	if err := d.startReplica(ctx, a); err != nil {
		return err
	}
	d.line("/readyz 200 (pid %d; JSON logs in %s)", a.cmd.Process.Pid, filepath.Base(a.log))
	if _, err := d.showGuests(ctx, ""); err != nil {
		return err
	}

	d.say("traffic: 6 clients (2 per plan, 25 req/s each), GET /orders; swap to v2 after %s, then %s more", d.phase, d.phase)
	stats, swapped, err := d.traffic(ctx, v2)
	if err != nil {
		return err
	}
	d.line("swap: %s", swapped)
	if _, err := d.showGuests(ctx, guestName); err != nil {
		return err
	}
	stats.print(d.out)
	if stats.failed > 0 {
		return fmt.Errorf("%d of %d requests failed", stats.failed, stats.total)
	}

	if err := d.cacheScene(ctx, a, b); err != nil {
		return err
	}
	if err := d.coordinationScene(ctx, a.cfg); err != nil {
		return err
	}
	if err := d.notifyScene(ctx, a.cfg, addr, rcv, plugin); err != nil {
		return err
	}

	if d.redis != nil {
		d.say("stopping: SIGTERM to both caphost serve replicas (each drains in-flight, then closes Redis), then Redis")
	} else {
		d.say("stopping: SIGTERM to both caphost serve replicas (each drains in-flight, then closes Redis); your Redis keeps running")
	}
	if err := d.stopReplicas(); err != nil {
		return err
	}
	d.stopRedis()
	d.line("done: nothing the demo started is still running")
	return nil
}

// caphost runs the binary and returns its stdout; on failure the output
// is part of the error.
func (d *demo) caphost(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, d.bin, args...)
	cmd.Env = d.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("caphost %s: %w\n%s%s", strings.Join(args[:min(2, len(args))], " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

func goCommand() string {
	if goBin := os.Getenv("GO"); goBin != "" {
		return goBin
	}
	return "go"
}

// buildGoGuest builds guests/<name> (Go, native flavour; rate-policy at
// revision 1) and bundles its self-test vectors.
func buildGoGuest(ctx context.Context, root, name, out string) error {
	cmd := exec.CommandContext(ctx, goCommand(), "build", "-buildmode=c-shared", "-o", out, "./guests/"+name)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the Go guest %s: %w\n%s", name, err, b)
	}
	return bundleVectors(ctx, root, name, out)
}

// asGuest is the AssemblyScript twin of guests/rate-policy.
const asGuest = "guests/rate-policy-as"

// buildASGuest builds guests/rate-policy-as (AssemblyScript, Extism
// flavour) at the given revision with the asc of its node_modules, which
// `make guests` installs from the lockfile.
func buildASGuest(ctx context.Context, root, out string, revision int) error {
	dir := filepath.Join(root, asGuest)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", "asc")); err != nil {
		return fmt.Errorf("%s/node_modules has no asc: run `make guests` (it runs npm ci there; needs Node.js 20+ and npm)", asGuest)
	}
	cmd := exec.CommandContext(ctx, "npx", "--no-install", "asc", "assembly/index.ts", "--config", "asconfig.json",
		"--target", "release", "--use", fmt.Sprintf("POLICY_REVISION=%d", revision), "-o", out)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the AssemblyScript guest: %w\n%s", err, b)
	}
	return bundleVectors(ctx, root, "rate-policy", out)
}

// bundleVectors bundles the self-test vectors of guests/<vectors> into out
// (as `make guests` does; the AssemblyScript twin gets the native guest's)
// before anything signs the module: the host runs them before every swap,
// and the section is covered by the sha256 pin and the signature. Checking
// them compiles the module into build/wazero-cache, the compilation cache
// caphost.yaml names, so no replica compiles it again.
func bundleVectors(ctx context.Context, root, vectors, out string) error {
	cmd := exec.CommandContext(ctx, goCommand(), "run", "./internal/tools/selftestpack",
		"-cache-dir", filepath.Join(root, "build", "wazero-cache"), "-vectors", "guests/"+vectors+"/selftest.json", out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bundling the self-test vectors of %s: %w\n%s", vectors, err, b)
	}
	return nil
}

// startRedis starts a private redis-server (ACL on, default user off, the
// demo's two users) or, with CAPHOST_REDIS_ADDR, checks that your Redis
// accepts both users before anything runs against it.
func (d *demo) startRedis(ctx context.Context) (string, error) {
	app, adm := d.target.appPass, d.target.admPass
	if a := d.target.addr; a != "" {
		d.say("using your Redis at %s (%s) as ACL users %s and %s", a, envRedisAddr, appUser, adminUser)
		for _, u := range []struct{ name, pass, env string }{{appUser, app, envAppPass}, {adminUser, adm, envAdminPass}} {
			if err := waitRedis(ctx, a, u.name, u.pass); err != nil {
				return "", fmt.Errorf("your Redis at %s does not accept ACL user %s with the password in %s "+
					"(README \"The demo against your own Redis\" lists the users it needs): %w", a, u.name, u.env, err)
			}
		}
		return a, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server missing: run 'make ensure-redis'")
	}
	acl := "user default off\n" +
		"user " + aclLine(appUser, app, appRules) + "\n" +
		"user " + aclLine(adminUser, adm, adminRules) + "\n"
	if err := os.WriteFile(filepath.Join(d.work, "users.acl"), []byte(acl), 0o600); err != nil {
		return "", err
	}
	var lastErr error
	for range 5 {
		addr, err := freeAddr()
		if err != nil {
			return "", err
		}
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", d.work, "--aclfile", filepath.Join(d.work, "users.acl"), "--maxmemory", "64mb",
			"--maxmemory-policy", "noeviction", "--logfile", filepath.Join(d.work, "redis.log"))
		if err := cmd.Start(); err != nil {
			return "", err
		}
		d.redis = cmd
		if lastErr = waitRedis(ctx, addr, adminUser, adm); lastErr == nil {
			d.say("started a private redis-server at %s (ACL: default user off; users %s, %s)", addr, appUser, adminUser)
			return addr, nil
		}
		d.stopRedis()
	}
	return "", fmt.Errorf("could not start redis-server: %w", lastErr)
}

// waitRedis authenticates and pings over RESP until PONG (the demo does not
// link a Redis client: everything Redis is caphost's).
func waitRedis(ctx context.Context, addr, user, pass string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, _ = fmt.Fprintf(c, "*3\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n*1\r\n$4\r\nPING\r\n", len(user), user, len(pass), pass)
			r := bufio.NewReader(c)
			a, _ := r.ReadString('\n')
			p, _ := r.ReadString('\n')
			_ = c.Close()
			if strings.HasPrefix(a, "+OK") && strings.HasPrefix(p, "+PONG") {
				return nil
			}
			err = fmt.Errorf("redis answered %q %q", strings.TrimSpace(a), strings.TrimSpace(p))
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (d *demo) stopRedis() {
	if d.redis == nil {
		return
	}
	_ = d.redis.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.redis.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = d.redis.Process.Kill()
		<-done
	}
	d.redis = nil
}

// replica is one `caphost serve` process. The demo runs two, A and B, with
// the same configuration but server.listen, against the same Redis: A
// serves every scene, B joins for the cache's. Each writes its JSON logs to
// a file of its own.
type replica struct {
	name string // A or B
	cfg  string // its configuration file
	log  string // its log file
	base string // http://127.0.0.1:port

	cmd    *exec.Cmd  // nil: not running
	exited chan error // the result of cmd.Wait, once
}

// start starts the process and waits until /readyz answers 200; a process
// that exits meanwhile is an error.
func (r *replica) start(ctx context.Context, bin string, env []string) error {
	logf, err := os.Create(r.log)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "serve", "--config", r.cfg, "--drain-timeout", "5s")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	r.cmd = cmd
	r.exited = make(chan error, 1)
	go func() { r.exited <- cmd.Wait(); _ = logf.Close() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-r.exited:
			r.cmd = nil
			return fmt.Errorf("caphost serve %s exited during start-up: %v", r.name, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get(r.base + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("caphost serve %s did not become ready within 20s", r.name)
		}
	}
}

// stop sends SIGTERM and requires exit status 0.
func (r *replica) stop() error {
	if r.cmd == nil {
		return nil
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-r.exited:
	case <-time.After(15 * time.Second):
		_ = r.cmd.Process.Kill()
		err = <-r.exited
		err = fmt.Errorf("did not stop within 15s (killed): %v", err)
	}
	r.cmd = nil
	if err != nil {
		return fmt.Errorf("caphost serve %s: %w", r.name, err)
	}
	return nil
}

// kill ends the process if it still runs (cleanup on a failed or
// interrupted run).
func (r *replica) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
	r.cmd = nil
}

// startReplica starts r and remembers it, so cleanup stops it whatever
// happens.
func (d *demo) startReplica(ctx context.Context, r *replica) error {
	d.replicas = append(d.replicas, r)
	return r.start(ctx, d.bin, d.env)
}

// stopReplicas stops every replica still running, B before A, each with
// SIGTERM and exit status 0 required.
func (d *demo) stopReplicas() error {
	for i := len(d.replicas) - 1; i >= 0; i-- {
		r := d.replicas[i]
		if r.cmd == nil {
			continue
		}
		if err := r.stop(); err != nil {
			return err
		}
		d.line("caphost serve %s exited 0 after a graceful shutdown", r.name)
	}
	return nil
}

func (d *demo) cleanup() {
	for _, r := range d.replicas {
		r.kill()
	}
	if d.plugin != "" {
		reapPlugins(d.plugin)
	}
	d.stopRedis()
	if d.work != "" {
		_ = os.RemoveAll(d.work)
	}
}

type guestView struct {
	Name       string   `json:"name"`
	Generation uint64   `json:"generation"`
	SHA256     string   `json:"sha256"`
	Flavour    string   `json:"flavour"`
	Kinds      []string `json:"kinds"`
	Declared   []string `json:"declared"`
}

// declared names what a guest of each kind declares.
var declared = map[string]string{"rate-policy": "policies", "codec": "schemas", "cache-region": "regions"}

// showGuests prints what GET /admin/guests reports, one line per guest, or
// for the guest named only when that is not empty.
func (d *demo) showGuests(ctx context.Context, only string) ([]guestView, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/admin/guests", nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list struct {
		Guests []guestView `json:"guests"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /admin/guests: status %d: %v", resp.StatusCode, err)
	}
	for _, g := range list.Guests {
		if only != "" && g.Name != only {
			continue
		}
		what := "declarations"
		if len(g.Kinds) == 1 && declared[g.Kinds[0]] != "" {
			what = declared[g.Kinds[0]]
		}
		d.line("GET /admin/guests: %s generation %d flavour %s sha256 %s kinds %s, %d %s",
			g.Name, g.Generation, g.Flavour, short(g.SHA256), strings.Join(g.Kinds, ","), len(g.Declared), what)
	}
	return list.Guests, nil
}

// client is one simulated API client.
type client struct {
	plan string
	key  string
}

type evalResponse struct {
	Kind     string `json:"kind"`
	Allowed  bool   `json:"allowed"`
	Limit    *int64 `json:"limit"`
	Policy   string `json:"policy"`
	Revision string `json:"revision"`
}

// traffic runs the clients for 2 phases and swaps the guest in between.
func (d *demo) traffic(ctx context.Context, v2 string) (*table, string, error) {
	clients := []client{
		{"free", "key-free-a"}, {"free", "key-free-b"},
		{"pro", "key-pro-a"}, {"pro", "key-pro-b"},
		{"enterprise", "key-ent-a"}, {"enterprise", "key-ent-b"},
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	t := newTable()
	tctx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(40 * time.Millisecond) // 25 requests/s per client
			defer tick.Stop()
			for {
				select {
				case <-tctx.Done():
					return
				case <-tick.C:
				}
				t.record(c.plan, d.evaluate(tctx, hc, c))
			}
		}()
	}
	var swapped string
	var swapErr error
	select {
	case <-ctx.Done():
		swapErr = ctx.Err()
	case <-time.After(d.phase):
		// Traffic keeps flowing during the swap; the second phase is
		// measured from the moment v2 serves.
		swapped, swapErr = d.swap(ctx, v2)
		select {
		case <-ctx.Done():
		case <-time.After(d.phase):
		}
	}
	stopTraffic()
	wg.Wait()
	return t, swapped, swapErr
}

// result of one evaluation for the table.
type result struct {
	resp evalResponse
	err  error
}

func (d *demo) evaluate(ctx context.Context, hc *http.Client, c client) result {
	body := fmt.Sprintf(`{"attributes":{"route":"/orders","method":"GET","api-key-plan":%q},"subject":{"api-key":%q}}`, c.plan, c.key)
	req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, d.base+"/v1/ratelimit/evaluate", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return result{err: fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))}
	}
	var r evalResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return result{err: err}
	}
	if r.Kind != "evaluated" {
		// Unavailable/indeterminate/degraded would be a failure of the demo's promise.
		return result{resp: r, err: fmt.Errorf("outcome %s", r.Kind)}
	}
	return result{resp: r}
}

func (d *demo) swap(ctx context.Context, v2 string) (string, error) {
	wasm, err := os.ReadFile(v2)
	if err != nil {
		return "", err
	}
	sig, err := os.ReadFile(v2 + ".sig")
	if err != nil {
		return "", err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, d.base+"/admin/guests/"+guestName, bytes.NewReader(wasm))
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("Caphost-Guest-Signature", base64.StdEncoding.EncodeToString(sig))
	req.Header.Set("Content-Type", "application/wasm")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("PUT /admin/guests/%s: %w", guestName, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("PUT /admin/guests/%s: status %d: %s", guestName, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var g guestView
	if err := json.Unmarshal(b, &g); err != nil {
		return "", err
	}
	return fmt.Sprintf("PUT /admin/guests/%s (signed v2) -> 200 in %s: generation %d, flavour %s, sha256 %s",
		guestName, time.Since(start).Round(time.Millisecond), g.Generation, g.Flavour, short(g.SHA256)), nil
}

// table counts outcomes per plan and policy revision.
type table struct {
	mu     sync.Mutex
	rows   map[[2]string]*row // plan, revision
	failed int
	total  int
	errs   map[string]int
}

type row struct {
	policy          string
	limit           int64
	allowed, denied int
}

func newTable() *table { return &table{rows: map[[2]string]*row{}, errs: map[string]int{}} }

func (t *table) record(plan string, r result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total++
	if r.err != nil {
		t.failed++
		msg := r.err.Error()
		if len(msg) > 120 {
			msg = msg[:120]
		}
		t.errs[msg]++
		return
	}
	k := [2]string{plan, r.resp.Revision}
	rw := t.rows[k]
	if rw == nil {
		rw = &row{policy: r.resp.Policy}
		t.rows[k] = rw
	}
	if r.resp.Limit != nil {
		rw.limit = *r.resp.Limit
	}
	if r.resp.Allowed {
		rw.allowed++
	} else {
		rw.denied++
	}
}

func (t *table) print(w io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	plans := map[string]int{"free": 0, "pro": 1, "enterprise": 2}
	keys := make([][2]string, 0, len(t.rows))
	for k := range t.rows {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][1] != keys[j][1] {
			return keys[i][1] < keys[j][1]
		}
		return plans[keys[i][0]] < plans[keys[j][0]]
	})
	fmt.Fprintf(w, "\n   %-9s %-11s %-17s %7s %8s %7s\n", "revision", "plan", "policy", "limit", "allowed", "denied")
	prev := ""
	for _, k := range keys {
		r := t.rows[k]
		if prev != "" && prev != k[1] {
			fmt.Fprintln(w, "   "+strings.Repeat("-", 64))
		}
		prev = k[1]
		fmt.Fprintf(w, "   %-9s %-11s %-17s %7d %8d %7d\n", k[1], k[0], r.policy, r.limit, r.allowed, r.denied)
	}
	fmt.Fprintf(w, "\n   %d requests, \033[1m%d failed requests\033[0m (a deny is an answer, not a failure)\n", t.total, t.failed)
	for msg, n := range t.errs {
		fmt.Fprintf(w, "   failure x%d: %s\n", n, msg)
	}
}

func sourceDir() (string, error) {
	// `go run ./examples/quickstart` runs from the repository root (the
	// Makefile does); the template sits next to this file.
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for _, dir := range []string{filepath.Join(wd, "examples", "quickstart"), wd} {
		if _, err := os.Stat(filepath.Join(dir, "caphost.yaml")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("run the demo from the repository root (make demo)")
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func fileDigest(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

func prefix(ps ...string) func(string) bool {
	return func(l string) bool {
		for _, p := range ps {
			if strings.HasPrefix(l, p) {
				return true
			}
		}
		return false
	}
}

func contains(ss ...string) func(string) bool {
	return func(l string) bool {
		for _, s := range ss {
			if strings.Contains(l, s) {
				return true
			}
		}
		return false
	}
}
