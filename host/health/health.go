// Package health owns caphost's liveness and readiness semantics and the
// startup handshake that readiness waits for.
//
// Liveness never touches Redis: restarting a process because Redis is slow
// only adds a reconnect storm to an outage. Readiness composes the selected
// Redis roles (reference §9.1, §11.1): a role is UP only when its
// deployment's startup handshake passed (when the host runs one) and a
// cheap live check passes now — a PING alone would not say the node is a
// writable primary. A required role (coordination, session) that is not UP
// makes the host DOWN (not ready); an optional role (typically cache) makes
// it DEGRADED while it stays ready, because its capability has a declared
// fallback. An unselected role is not checked at all.
//
// The handshake (Checker.Start) runs runtime.Runtime.ProbeDeployment per
// deployment: auth, topology, version, cluster coverage, programs and
// digests, an ephemeral write/read, eviction and persistence attestation.
// A failed attempt is retried with bounded exponential backoff; the
// configured policy.StartupPolicy may end startup instead (Fatal,
// AwaitFirstHandshake). A live check that fails after the handshake passed
// makes the deployment run the handshake again, so a restarted server that
// lost its Functions library is not reported ready.
//
// Every failure carries its class — misconfiguration (an operator must act)
// or outage (it may heal) — in reports and logs. Reports carry only bounded
// facts: role, deployment id, topology, status, a reason word, the class
// and the failed checks' bounded details; never endpoints, users or driver
// messages. State transitions are always logged; a repeated identical
// failure at most once per Options.LogInterval; a role whose status flaps
// has at most a few transition lines per LogInterval, the rest counted.
// Every role status change is also reported to Options.OnTransition (the
// host's caphost_readiness_transitions_total).
//
// On Cluster, a role is UP only while every slot is covered: the live check
// asks each primary of a freshly read slot map (runtime.Runtime.Live), so a
// dead primary that still owns slots makes its roles DOWN/DEGRADED until a
// replica is promoted, and a failed node entry outside the map cannot make
// readiness flap afterwards.
//
// Readiness also listens to the data path (Checker.DataPath, fed by the
// certainty of every call): the first call that cannot reach a deployment
// drops the cached report, so no probe answers ready from the cache while
// calls fail; the first call that reaches it again cuts the handshake's
// backoff short, so readiness returns with the data path.
//
// What may change here: new cheap live facts and new report fields. What
// must not: liveness stays free of Redis, a required role that is not
// proven stays DOWN, and an unselected role gets no check.
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// Status is a health state.
type Status string

// Health states, from best to worst.
const (
	Up       Status = "UP"
	Degraded Status = "DEGRADED"
	Down     Status = "DOWN"
)

// HandshakeState is where a deployment's startup handshake stands.
type HandshakeState string

// Handshake states.
const (
	// HandshakeOff: the host was not asked to run one; readiness rests on
	// the live check alone.
	HandshakeOff HandshakeState = "off"
	// HandshakePending: no attempt has finished yet (or a live failure
	// asked for a new one and it has not finished).
	HandshakePending HandshakeState = "pending"
	HandshakePassed  HandshakeState = "passed"
	HandshakeFailed  HandshakeState = "failed"
)

// Reasons of a RoleReport (bounded words), besides the live check's
// runtime.LiveError reasons.
const (
	ReasonOK               = "ok"
	ReasonHandshakePending = "handshake-pending"
	ReasonHandshakeFailed  = "handshake-failed"
	ReasonNotRunning       = "not-running"
)

// Problem is one failed check, as readiness and logs show it: bounded
// words and the probe's bounded detail (digests, versions, policies,
// lanes, server error codes — never endpoints, users or server text).
type Problem struct {
	Check  string        `json:"check"`
	Class  runtime.Class `json:"class"`
	Detail string        `json:"detail"`
}

// maxDetailBytes bounds a Problem's detail in reports and logs.
const maxDetailBytes = 512

// RoleReport is the health of one selected role.
type RoleReport struct {
	Role       policy.Role `json:"role"`
	Deployment string      `json:"deployment"`
	Topology   string      `json:"topology"`
	Required   bool        `json:"required"`
	Status     Status      `json:"status"`
	// Reason is a bounded word: ReasonOK, ReasonHandshakePending,
	// ReasonHandshakeFailed, ReasonNotRunning or a runtime.LiveError reason
	// ("timeout", "unreachable", "not-primary", "noperm", ...).
	Reason string `json:"reason"`
	// Class is the class of the failure that keeps the role from UP (empty
	// while the first handshake attempt is still running).
	Class     runtime.Class  `json:"class,omitempty"`
	Handshake HandshakeState `json:"handshake"`
	// Problems are the failed checks of the last handshake attempt while it
	// has not passed.
	Problems []Problem `json:"problems,omitempty"`
}

// Report is a readiness report. Ready is false exactly when a required role
// is DOWN.
type Report struct {
	Status Status       `json:"status"`
	Ready  bool         `json:"ready"`
	Roles  []RoleReport `json:"roles"`
	// UnsafeColocation is set when a correctness role shares a deployment
	// with the cache role by explicit operator choice: the host serves, but
	// makes no correctness claim beyond that deployment's eviction policy.
	UnsafeColocation bool      `json:"unsafeColocation,omitempty"`
	CheckedAt        time.Time `json:"checkedAt"`
}

// Source is what readiness needs from the Redis runtime; *runtime.Runtime
// implements it.
type Source interface {
	// ProbeDeployment runs the ordered startup handshake of one deployment.
	ProbeDeployment(ctx context.Context, deployment string) (runtime.DeploymentProbe, error)
	// Live runs the cheap live check of one deployment (nil, or an error
	// that is usually a *runtime.LiveError); identity is the handshake's
	// DeploymentProbe.Identity ("" skips the comparison).
	Live(ctx context.Context, deployment, identity string) error
}

// RuntimeSource returns rt as a Source.
func RuntimeSource(rt *runtime.Runtime) Source { return rt }

// Clock is the time source of the readiness cache, the retry backoff and
// the log rate limit; tests inject one to make them deterministic.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends (then it returns ctx.Err()).
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Options tune a Checker.
type Options struct {
	// Timeout bounds each deployment's live check (default 500ms).
	Timeout time.Duration
	// MinInterval caches a report (default 500ms; negative disables), so a
	// burst of probes becomes one live check per deployment.
	MinInterval time.Duration
	// Handshake makes readiness wait for each deployment's startup
	// handshake, which Start runs. Without it readiness rests on the live
	// check alone (HandshakeOff).
	Handshake bool
	// Startup is the retry and failure policy of the handshake (zero
	// fields: policy defaults).
	Startup policy.StartupPolicy
	// Log receives state transitions and rate-limited repeated failures
	// (default slog.Default()).
	Log *slog.Logger
	// LogInterval is the least time between two log lines of the same
	// repeated failure of one deployment (default 1m).
	LogInterval time.Duration
	// Clock defaults to the system clock.
	Clock Clock
	// Jitter maps a backoff to the wait actually used (default: uniformly
	// random in [d/2, d], so instances that failed together do not retry in
	// step). Tests pass the identity.
	Jitter func(time.Duration) time.Duration
	// OnTransition, when set, is told of every change of a role's status
	// after its first report (the host counts them in a metric). It runs
	// under the checker's lock: it must be fast and must not call back.
	OnTransition func(Transition)
}

// Transition is one change of a selected role's readiness status.
type Transition struct {
	Role       policy.Role
	Deployment string
	From, To   Status
	// Reason is the new report's reason word.
	Reason string
}

// transitionLogBurst is how many status changes of one role are logged per
// LogInterval; a role that flaps faster has the rest counted, and the next
// line logged carries that count ("suppressed_transitions"). Steady
// behaviour — down once, up once — is always logged in full.
const transitionLogBurst = 4

// roleLog is the transition-log rate limit of one role. Guarded by Checker.mu.
type roleLog struct {
	windowStart time.Time
	logged      int
	suppressed  int
}

// ErrHandshake is matched by every *HandshakeError.
var ErrHandshake = errors.New("redis startup handshake failed")

// HandshakeError is a failed handshake that ended startup under the
// configured policy.StartupPolicy.
type HandshakeError struct {
	Deployment string
	Roles      []policy.Role
	Class      runtime.Class
	Problems   []Problem
}

func (e *HandshakeError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.Check + ": " + p.Detail
	}
	return fmt.Sprintf("redis deployment %s: startup handshake failed (%s): %s", e.Deployment, e.Class, strings.Join(parts, "; "))
}

// Is matches ErrHandshake.
func (e *HandshakeError) Is(target error) bool { return target == ErrHandshake }

// Checker computes readiness and runs the startup handshake. It is safe for
// concurrent use.
type Checker struct {
	src       Source
	roles     []policy.Role
	bindings  map[policy.Role]policy.RoleBinding
	deps      []*deployment // sorted by id; only those of selected roles
	byID      map[string]*deployment
	unsafe    bool
	timeout   time.Duration
	minPeriod time.Duration
	handshake bool
	startup   policy.StartupPolicy
	log       *slog.Logger
	logEvery  time.Duration
	clock     Clock
	jitter    func(time.Duration) time.Duration

	fatal     chan error
	fatalOnce sync.Once

	runMu   sync.Mutex
	started bool
	stop    context.CancelFunc
	wg      sync.WaitGroup

	onTransition func(Transition)

	// stale is set by DataPath when the data path contradicts the cached
	// report; the next Readiness computes a fresh one.
	stale atomic.Bool

	mu       sync.Mutex
	last     Report
	at       time.Time
	roleLogs map[policy.Role]*roleLog
}

// deployment is the handshake state of one deployment.
type deployment struct {
	id       string
	topology string
	roles    []policy.Role
	required bool // serves at least one required role
	wake     chan struct{}
	first    chan struct{}

	// failing is the data path's last verdict on the deployment (see
	// Checker.DataPath): true from a call that could not reach it until
	// one that did.
	failing atomic.Bool
	// lastWake is when DataPath last woke the handshake loop (UnixNano of
	// the checker's clock).
	lastWake atomic.Int64

	mu         sync.Mutex
	state      HandshakeState
	class      runtime.Class
	problems   []Problem
	everPassed bool
	identity   string // the primary the last passed handshake proved
	firstDone  bool
	fatal      error
	// log rate limit of repeated failures
	lastSig    string
	lastLogged time.Time
	suppressed int
}

// NewChecker builds a readiness checker over the selected roles of cfg. It
// starts nothing: with opt.Handshake, Start runs the handshake.
func NewChecker(src Source, cfg policy.RedisConfig, opt Options) *Checker {
	if opt.Timeout <= 0 {
		opt.Timeout = 500 * time.Millisecond
	}
	if opt.MinInterval == 0 {
		opt.MinInterval = 500 * time.Millisecond
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.LogInterval <= 0 {
		opt.LogInterval = time.Minute
	}
	if opt.Clock == nil {
		opt.Clock = realClock{}
	}
	if opt.Jitter == nil {
		opt.Jitter = func(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }
	}
	c := &Checker{
		src: src, bindings: cfg.Roles, byID: map[string]*deployment{},
		unsafe:  cfg.AllowUnsafeColocation && colocated(cfg),
		timeout: opt.Timeout, minPeriod: opt.MinInterval, handshake: opt.Handshake,
		startup: opt.Startup.WithDefaults(), log: opt.Log, logEvery: opt.LogInterval,
		clock: opt.Clock, jitter: opt.Jitter, fatal: make(chan error, 1),
		onTransition: opt.OnTransition, roleLogs: map[policy.Role]*roleLog{},
	}
	for _, r := range policy.Roles() {
		b, ok := cfg.Roles[r]
		if !ok {
			continue
		}
		c.roles = append(c.roles, r)
		d, ok := c.byID[b.Deployment]
		if !ok {
			d = &deployment{id: b.Deployment, wake: make(chan struct{}, 1), first: make(chan struct{}), state: HandshakeOff}
			if dc, ok := cfg.Deployments[b.Deployment]; ok && dc.Topology != nil {
				d.topology = string(dc.Topology.TopologyKind())
			}
			if opt.Handshake {
				d.state = HandshakePending
			}
			c.byID[d.id] = d
			c.deps = append(c.deps, d)
		}
		d.roles = append(d.roles, r)
		d.required = d.required || b.Required
	}
	slices.SortFunc(c.deps, func(a, b *deployment) int { return strings.Compare(a.id, b.id) })
	return c
}

func colocated(cfg policy.RedisConfig) bool {
	c, ok := cfg.Roles[policy.RoleCache]
	if !ok {
		return false
	}
	for r, b := range cfg.Roles {
		if r.Correctness() && b.Deployment == c.Deployment {
			return true
		}
	}
	return false
}

// Start runs the startup handshake of every deployment in the background
// (one goroutine each), until it passes — and again after a live failure —
// or until Stop. It does nothing without Options.Handshake, and only once.
func (c *Checker) Start(ctx context.Context) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if !c.handshake || c.started {
		return
	}
	c.started = true
	// The loops belong to the checker, not to the caller's construction
	// context: Stop ends them.
	ctx, c.stop = context.WithCancel(context.WithoutCancel(ctx))
	for _, d := range c.deps {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.run(ctx, d)
		}()
	}
}

// Stop ends the handshake loops and waits for them. Readiness keeps
// answering from the last state.
func (c *Checker) Stop() {
	c.runMu.Lock()
	stop := c.stop
	c.runMu.Unlock()
	if stop != nil {
		stop()
	}
	c.wg.Wait()
}

// Fatal receives the *HandshakeError that ended startup under the startup
// policy, at most once. It never fires with policy.StartupRetry, for a
// deployment that serves only optional roles, or after a deployment's
// handshake once passed.
func (c *Checker) Fatal() <-chan error { return c.fatal }

// AwaitFirstHandshake waits until the first attempt of every deployment
// serving a required role has finished, and returns the error that ended
// startup (a *HandshakeError) if one did; nil otherwise (including failed
// attempts the policy retries). It returns ctx.Err() when ctx ends first.
func (c *Checker) AwaitFirstHandshake(ctx context.Context) error {
	if !c.handshake {
		return nil
	}
	for _, d := range c.deps {
		if !d.required {
			continue
		}
		select {
		case <-d.first:
		case <-ctx.Done():
			return ctx.Err()
		}
		d.mu.Lock()
		err := d.fatal
		d.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// run is the handshake loop of one deployment.
func (c *Checker) run(ctx context.Context, d *deployment) {
	failures := 0
	for {
		actx, cancel := context.WithTimeout(ctx, c.startup.AttemptTimeout)
		probe, err := c.src.ProbeDeployment(actx, d.id)
		cancel()
		if ctx.Err() != nil {
			return
		}
		class, problems := outcome(probe, err)
		if fatal := c.record(d, class, problems, probe.Identity); fatal != nil {
			return
		}
		if class == "" {
			failures = 0
			select { // passed: wait until a live check asks again
			case <-d.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		wait := c.backoff(failures)
		failures++
		woken, err := c.sleepOrWake(ctx, d, wait)
		if err != nil {
			return
		}
		if woken {
			// The data path reaches the deployment: back off from the
			// start again, so an attempt that still fails (a pool that
			// repeats its last dial error for a moment) is retried soon
			// rather than after a backoff grown during the outage.
			failures = 0
		}
	}
}

// sleepOrWake waits out a backoff, or less when the data path reached the
// deployment again (DataPath wakes the loop): the handshake then runs at
// once instead of leaving the role not ready after decisions recovered.
func (c *Checker) sleepOrWake(ctx context.Context, d *deployment, wait time.Duration) (woken bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	woke := make(chan struct{})
	go func() {
		select {
		case <-d.wake:
			close(woke)
			cancel()
		case <-sctx.Done():
		}
	}()
	err = c.clock.Sleep(sctx, wait)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	select {
	case <-woke:
		return true, nil
	default:
	}
	return false, err
}

// DataPath takes the verdict of one call a capability made on deployment
// dep: reached is false for a call that could not reach Redis or whose
// reply was lost (UNAVAILABLE_BEFORE_SEND, INDETERMINATE), true for one
// Redis answered. Only a change of verdict acts: the first failure drops
// the cached report, so the next probe checks the deployment live instead
// of answering ready from the cache while calls fail; the first success
// after failures drops it too and wakes a failed handshake's backoff, so
// readiness follows the data path back without waiting for the next retry.
// It is cheap and safe for concurrent use on every call.
func (c *Checker) DataPath(dep string, reached bool) {
	d := c.byID[dep]
	if d == nil || !d.failing.CompareAndSwap(reached, !reached) {
		return // not a selected deployment, or no change of verdict
	}
	c.stale.Store(true)
	if !reached {
		return
	}
	d.mu.Lock()
	retrying := d.state == HandshakePending || d.state == HandshakeFailed
	d.mu.Unlock()
	// A role that half works (some Cluster slots lost) flips verdicts on
	// every other call: at most one early handshake per RetryInitial.
	now := c.clock.Now().UnixNano()
	last := d.lastWake.Load()
	if retrying && (last == 0 || time.Duration(now-last) >= c.startup.RetryInitial) && d.lastWake.CompareAndSwap(last, now) {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// backoff is the wait after the n-th consecutive failure (n from 0):
// RetryInitial doubled n times, capped at RetryMax, then jittered.
func (c *Checker) backoff(n int) time.Duration {
	d := c.startup.RetryInitial
	for i := 0; i < n && d < c.startup.RetryMax; i++ {
		d *= 2
	}
	d = min(d, c.startup.RetryMax)
	return c.jitter(d)
}

// outcome turns one attempt into a class ("" when it passed) and its failed
// checks.
func outcome(p runtime.DeploymentProbe, err error) (runtime.Class, []Problem) {
	if err != nil {
		return runtime.ClassOutage, []Problem{{Check: "handshake", Class: runtime.ClassOutage, Detail: "not run: " + boundedErr(err)}}
	}
	var ps []Problem
	for _, ch := range p.Checks {
		if ch.Status == runtime.CheckFailed {
			ps = append(ps, Problem{Check: ch.Name, Class: ch.Class, Detail: bound(ch.Detail)})
		}
	}
	return p.Class(), ps
}

func boundedErr(err error) string {
	if errors.Is(err, runtime.ErrUnknownDeployment) {
		return "deployment not selected"
	}
	return "runtime error"
}

func bound(s string) string {
	if len(s) <= maxDetailBytes {
		return s
	}
	cut := maxDetailBytes
	for cut > 0 && s[cut]&0xC0 == 0x80 { // keep UTF-8 whole
		cut--
	}
	return s[:cut] + "…"
}

// record stores an attempt's result, logs it and returns the error that
// ends startup, if the policy says so.
func (c *Checker) record(d *deployment, class runtime.Class, problems []Problem, identity string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	prev, prevClass := d.state, d.class
	if class == "" {
		d.state, d.class, d.problems = HandshakePassed, "", nil
		d.everPassed, d.identity = true, identity
	} else {
		d.state, d.class, d.problems = HandshakeFailed, class, problems
	}
	var fatal error
	if class != "" && d.required && !d.everPassed && c.ends(class) {
		fatal = &HandshakeError{Deployment: d.id, Roles: d.roles, Class: class, Problems: problems}
		d.fatal = fatal
		// Before first closes: whoever AwaitFirstHandshake releases finds
		// Fatal already fired. The channel holds one error; later ones drop.
		c.fatalOnce.Do(func() { c.fatal <- fatal })
	}
	if !d.firstDone {
		d.firstDone = true
		close(d.first)
	}
	c.logAttempt(d, prev, prevClass, fatal)
	return fatal
}

// ends reports whether a first-handshake failure of this class ends startup.
func (c *Checker) ends(class runtime.Class) bool {
	switch c.startup.OnFailure {
	case policy.StartupFail:
		return true
	case policy.StartupFailOnMisconfiguration:
		return class == runtime.ClassMisconfiguration
	}
	return false
}

// logAttempt logs every transition and a repeated identical failure at most
// once per LogInterval (with the count it suppressed). d.mu is held.
func (c *Checker) logAttempt(d *deployment, prev HandshakeState, prevClass runtime.Class, fatal error) {
	sig := string(d.state) + "/" + string(d.class)
	for _, p := range d.problems {
		sig += "/" + p.Check
	}
	now := c.clock.Now()
	transition := d.state != prev || d.class != prevClass || sig != d.lastSig
	if !transition && fatal == nil && now.Sub(d.lastLogged) < c.logEvery {
		d.suppressed++
		return
	}
	attrs := []any{"event", "redis-handshake", "deployment", d.id, "roles", d.roles, "state", string(d.state), "previous", string(prev)}
	if d.suppressed > 0 {
		attrs = append(attrs, "suppressed", d.suppressed)
	}
	d.lastSig, d.lastLogged, d.suppressed = sig, now, 0
	switch {
	case d.state == HandshakePassed:
		c.log.Info("redis handshake passed", attrs...)
		return
	case fatal != nil:
		attrs = append(attrs, "class", string(d.class), "problems", problemStrings(d.problems))
		c.log.Error("redis handshake failed; the startup policy ends startup", append(attrs, "on_failure", string(c.startup.OnFailure))...)
		return
	}
	attrs = append(attrs, "class", string(d.class), "problems", problemStrings(d.problems))
	if !transition {
		c.log.Warn("redis handshake still failing", attrs...)
		return
	}
	c.log.Warn("redis handshake failed; retrying", attrs...)
}

func problemStrings(ps []Problem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Check + " (" + string(p.Class) + "): " + p.Detail
	}
	return out
}

// invalidate records a live failure of a deployment whose handshake passed
// and wakes its loop to run the handshake again.
func (c *Checker) invalidate(d *deployment, le liveResult) {
	if !c.handshake {
		return
	}
	d.mu.Lock()
	if d.state != HandshakePassed {
		d.mu.Unlock()
		return
	}
	prev := d.state
	d.state, d.class = HandshakePending, le.class
	d.problems = []Problem{{Check: "live", Class: le.class, Detail: "live check failed: " + le.reason}}
	c.log.Warn("redis live check failed; running the handshake again", "event", "redis-handshake",
		"deployment", d.id, "roles", d.roles, "state", string(d.state), "previous", string(prev),
		"class", string(le.class), "reason", le.reason)
	d.lastSig, d.lastLogged, d.suppressed = "", c.clock.Now(), 0
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

type liveResult struct {
	class  runtime.Class
	reason string
}

// Readiness returns the current report: per deployment, the handshake state
// and, when it passed (or is off), one live check; cached for MinInterval.
// Role status transitions are logged.
func (c *Checker) Readiness(ctx context.Context) Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.minPeriod > 0 && !c.at.IsZero() && c.clock.Now().Sub(c.at) < c.minPeriod && !c.stale.Swap(false) {
		return c.last
	}
	c.stale.Store(false)
	type depView struct {
		state    HandshakeState
		class    runtime.Class
		problems []Problem
		identity string
		live     *liveResult // nil: passed
	}
	views := make([]depView, len(c.deps))
	var wg sync.WaitGroup
	for i, d := range c.deps {
		d.mu.Lock()
		views[i] = depView{state: d.state, class: d.class, problems: d.problems, identity: d.identity}
		d.mu.Unlock()
		if views[i].state != HandshakePassed && views[i].state != HandshakeOff {
			continue // not proven: no live check either
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, c.timeout)
			err := c.src.Live(lctx, d.id, views[i].identity)
			cancel()
			if err != nil {
				lr := liveOf(err)
				views[i].live = &lr
				c.invalidate(d, lr)
			}
		}()
	}
	wg.Wait()

	rep := Report{Status: Up, Ready: true, UnsafeColocation: c.unsafe, CheckedAt: c.clock.Now()}
	for _, role := range c.roles {
		b := c.bindings[role]
		d := c.byID[b.Deployment]
		v := views[slices.Index(c.deps, d)]
		rr := RoleReport{Role: role, Deployment: d.id, Topology: d.topology, Required: b.Required,
			Status: Up, Reason: ReasonOK, Handshake: v.state}
		switch {
		case v.state == HandshakePending:
			rr.Reason, rr.Class, rr.Problems = ReasonHandshakePending, v.class, v.problems
		case v.state == HandshakeFailed:
			rr.Reason, rr.Class, rr.Problems = ReasonHandshakeFailed, v.class, v.problems
		case v.live != nil:
			rr.Reason, rr.Class = v.live.reason, v.live.class
		}
		if rr.Reason != ReasonOK {
			if rr.Class == "" && v.state != HandshakePending {
				rr.Class = runtime.ClassOutage
			}
			rr.Status = Degraded
			if b.Required {
				rr.Status = Down
			}
		}
		switch {
		case rr.Status == Down:
			rep.Status, rep.Ready = Down, false
		case rr.Status == Degraded && rep.Status == Up:
			rep.Status = Degraded
		}
		rep.Roles = append(rep.Roles, rr)
	}
	c.logTransitions(rep)
	c.last, c.at = rep, c.clock.Now()
	return rep
}

// logTransitions reports every role whose status changed since the last
// computed report to OnTransition and logs it, at most transitionLogBurst
// lines per role per LogInterval. c.mu is held.
func (c *Checker) logTransitions(rep Report) {
	now := c.clock.Now()
	for _, rr := range rep.Roles {
		prev := Status("")
		for _, p := range c.last.Roles {
			if p.Role == rr.Role {
				prev = p.Status
			}
		}
		if prev == rr.Status {
			continue
		}
		if prev != "" && c.onTransition != nil {
			c.onTransition(Transition{Role: rr.Role, Deployment: rr.Deployment, From: prev, To: rr.Status, Reason: rr.Reason})
		}
		rl := c.roleLogs[rr.Role]
		if rl == nil {
			rl = &roleLog{}
			c.roleLogs[rr.Role] = rl
		}
		if now.Sub(rl.windowStart) >= c.logEvery {
			rl.windowStart, rl.logged = now, 0
		}
		if rl.logged >= transitionLogBurst {
			rl.suppressed++
			continue
		}
		rl.logged++
		attrs := []any{"event", "readiness", "role", string(rr.Role), "deployment", rr.Deployment, "required", rr.Required,
			"status", string(rr.Status), "previous", string(prev), "reason", rr.Reason, "handshake", string(rr.Handshake)}
		if rr.Class != "" {
			attrs = append(attrs, "class", string(rr.Class))
		}
		if rl.suppressed > 0 {
			attrs = append(attrs, "suppressed_transitions", rl.suppressed)
			rl.suppressed = 0
		}
		if rr.Status == Up {
			c.log.Info("redis role readiness changed", attrs...)
		} else {
			c.log.Warn("redis role readiness changed", attrs...)
		}
	}
}

func liveOf(err error) liveResult {
	var le *runtime.LiveError
	if errors.As(err, &le) {
		return liveResult{class: le.Class, reason: le.Reason}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return liveResult{class: runtime.ClassOutage, reason: "timeout"}
	}
	if errors.Is(err, runtime.ErrUnknownDeployment) {
		return liveResult{class: runtime.ClassMisconfiguration, reason: ReasonNotRunning}
	}
	return liveResult{class: runtime.ClassOutage, reason: "unreachable"}
}
