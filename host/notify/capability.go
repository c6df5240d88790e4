package notify

import (
	"context"
	_ "embed" // the capability card
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/internal/module"
	"github.com/caphost/caphost/host/notify/dispatch"
	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/policy"
)

// CapabilityID is the notify capability's id and configuration block name
// (capabilities.notify).
const CapabilityID = "notify"

// Readiness is the level this implementation claims: R2. Every part is
// proven against real processes — renders by the reference renderer
// guest with hostile parameters per channel, intents on standalone,
// Sentinel and Cluster redis-servers, dispatch across a killed primary on
// Sentinel and Cluster, with a killed plugin, a transport that accepts
// and then times out, a consumer that dies before XACK, the webhook, SMTP
// and file transports as sandboxed go-plugin processes against a real
// HTTP server, SMTP server and directory, plans sealed at rest, and the
// quarantine runbook rehearsed. R3 needs rehearsed rolling-upgrade and
// capacity runbooks (card.md, item 2).
const Readiness = capability.R2

// Implementation names the implementation in the descriptor.
const Implementation = "redis-streams-notify-v1"

//go:embed card.md
var card []byte

// example is a minimal valid capabilities.notify block.
const example = `provider: redis
redis-role: coordination
transports:
  webhook:
    binary: /opt/caphost/transports/webhook
    sha256: "0000000000000000000000000000000000000000000000000000000000000000"
    settings: {url: "https://hooks.example.com/notify", secret: "0123456789abcdef0123456789abcdef"}
routes:
  slack:
    default: {transports: [webhook]}
`

// CapabilityInfo registers the notify capability with the host.
func CapabilityInfo() module.Info {
	return module.Info{
		ID:        CapabilityID,
		Readiness: Readiness,
		Providers: []string{ProviderRedis},
		Card:      card,
		Example:   example,
		Routes:    SidecarPatterns(),
		New:       func() module.Module { return &capabilityModule{} },
	}
}

// capabilityModule is the notify capability's module lifecycle: the
// renderer on the renderer guests, the intent store on the role, the
// transport plugins, the dispatcher and the sidecar.
type capabilityModule struct {
	cfg          Config
	roleRequired bool
	log          *slog.Logger
	mods         []string
	gm           *plugins.Manager
	transports   map[string]transport.Transport
	disp         *dispatch.Dispatcher
	n            *Notifier
	side         *Sidecar
}

// Decode implements module.Module.
func (m *capabilityModule) Decode(b module.Block, ps *policy.Problems) {
	cfg, err := Decode(b.Provider, b.Role, b.Raw, b.Dir)
	b.AddDecodeError(ps, err)
	m.cfg = cfg
	m.cfg.Role = b.RoleOr(cfg.Role, policy.RoleCoordination)
	m.cfg.Intents.Role = m.cfg.Role
	m.roleRequired = b.RoleRequired
}

// Descriptor implements module.Module.
func (m *capabilityModule) Descriptor() capability.Descriptor {
	return capability.Descriptor{
		Capability: CapabilityID,
		Provider:   ProviderRedis,
		Readiness:  Readiness,
		Guarantees: []capability.Guarantee{
			capability.GuaranteeAtLeastOnceDelivery, capability.GuaranteeSubmitDedup,
			capability.GuaranteeFrozenContent, capability.GuaranteeNoBlindRetry, capability.GuaranteeTypedOutcome,
		},
		NonGuarantees: []capability.NonGuarantee{
			capability.NonGuaranteeExactlyOnceDelivery, capability.NonGuaranteeExactAcrossFailover,
			capability.NonGuaranteeOrdering,
		},
		// Durable submits fail closed; a route that says best-effort: true
		// opts into the fail-open path for its best-effort sends.
		FailureMode:      capability.FailClosed,
		FailureOverrides: []capability.FailureMode{capability.FailOpen},
		MultiInstance:    true,
		Role:             m.cfg.Role,
		Impact:           module.Impact(m.roleRequired),
		GuestKinds:       []string{string(abi.KindRenderer)},
		Implementation:   Implementation,
	}
}

// Provision implements module.Module.
func (m *capabilityModule) Provision(ctx context.Context, env module.Env) error {
	m.log = env.Log
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if env.Runtime == nil {
		return errors.New("notify: no Redis runtime")
	}
	if env.Guests == nil {
		return errors.New("notify: no renderer guest: load a module of kind renderer under guests.modules")
	}
	mods, err := m.renderers(env.Guests)
	if err != nil {
		return err
	}
	m.mods, m.gm = mods, env.Guests.Manager()
	r, err := render.New(render.Options{Guests: m.gm, Modules: mods, DefaultLocale: m.cfg.DefaultLocale,
		Logger: m.log, Registerer: env.Registerer})
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	store, err := intent.New(env.Runtime, m.cfg.Intents)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	names := slices.Sorted(maps.Keys(m.cfg.Transports))
	met, err := newMetrics(env.Registerer, names, store.Shards())
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	m.transports = map[string]transport.Transport{}
	for _, name := range names {
		tc := m.cfg.Transports[name]
		p, err := launch(ctx, name, tc, m.log, transportObserver{met}) // the plugin adds transport=<name>
		if err != nil {
			return err
		}
		met.sandboxes.add(name, p)
		m.transports[name] = p
	}
	m.n = &Notifier{cfg: m.cfg, renderer: r, store: store, transports: m.transports, metrics: met, log: m.log, now: time.Now}
	env.Guests.Hook(abi.KindRenderer, module.GuestHook{Check: func(_ context.Context, mod string, d *abi.Description) error {
		if !slices.Contains(m.mods, mod) {
			return nil
		}
		return render.CheckTemplates(d, render.DefaultLimits())
	}})
	if !m.cfg.DispatchDisabled {
		m.disp, err = dispatch.New(store, dispatcherConfig(m.cfg.Dispatch, m.transports, met, m.log.With("part", "dispatch")))
		if err != nil {
			return fmt.Errorf("notify: %w", err)
		}
	}
	m.side = NewSidecar(m.n, m.log)
	return nil
}

// renderers resolves the configured renderer modules (or every loaded
// one) and checks each is loaded and declares kind renderer.
func (m *capabilityModule) renderers(gs module.Guests) ([]string, error) {
	loaded := gs.ModulesOfKind(abi.KindRenderer)
	if len(m.cfg.Renderers) == 0 {
		if len(loaded) == 0 {
			return nil, errors.New("notify: no guest module declares kind renderer: load one under guests.modules")
		}
		return loaded, nil
	}
	for _, r := range m.cfg.Renderers {
		if !slices.Contains(loaded, r) {
			return nil, fmt.Errorf("notify: %s.renderers: %q is not a loaded module of kind renderer", capPath, r)
		}
	}
	return slices.Clone(m.cfg.Renderers), nil
}

// launch starts one transport plugin (go-plugin checks its sha256 first).
func launch(ctx context.Context, name string, tc TransportConfig, log *slog.Logger, obs transport.Observer) (*transport.Plugin, error) {
	path, err := filepath.Abs(tc.Binary)
	if err != nil {
		return nil, fmt.Errorf("notify: transport %s: %w", name, err)
	}
	settings := make(map[string]string, len(tc.Settings)+len(tc.Secrets))
	maps.Copy(settings, tc.Settings)
	for k, s := range tc.Secrets {
		settings[k] = string(s.Reveal())
	}
	p, err := transport.Launch(ctx, transport.Config{Name: name, Path: path, SHA256: tc.SHA256, CallTimeout: tc.CallTimeout,
		Settings: settings, Logger: log, Observer: obs})
	clear(settings)
	if err != nil {
		// transport's errors name the key of a bad setting, never a value.
		return nil, fmt.Errorf("notify: transport %s: %w", name, err)
	}
	return p, nil
}

// Validate implements module.Module: every renderer module's templates
// must be servable (the check a swap candidate gets too), and the
// dispatcher starts once the capability is whole.
func (m *capabilityModule) Validate(ctx context.Context) error {
	var errs []error
	for _, mod := range m.mods {
		err := m.gm.Use(ctx, mod, func(g plugins.Guest) error {
			return render.CheckTemplates(g.Description(), render.DefaultLimits())
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("notify: renderer %s: %w", mod, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if m.disp != nil {
		return m.disp.Start()
	}
	return nil
}

// Routes implements module.Module.
func (m *capabilityModule) Routes() map[string]http.Handler {
	if m.side == nil {
		return nil
	}
	return m.side.Routes()
}

// Guests implements module.Module: the renderer modules in use.
func (m *capabilityModule) Guests() []string { return slices.Clone(m.mods) }

// Close implements module.Module: the dispatcher drains (deliveries in
// flight finish or, when ctx ends, have their transport calls cancelled
// and their receipts still recorded; see dispatch.Dispatcher.Close), then
// the transport processes stop.
func (m *capabilityModule) Close(ctx context.Context) error {
	var errs []error
	if m.disp != nil {
		errs = append(errs, m.disp.Close(ctx))
	}
	for _, name := range slices.Sorted(maps.Keys(m.transports)) {
		errs = append(errs, m.transports[name].Close())
	}
	return errors.Join(errs...)
}

// Notifier returns the provisioned notifier (nil before Provision).
func (m *capabilityModule) Notifier() *Notifier { return m.n }

// defaultConsumer names this process in the consumer group: its host name
// (sanitised, bounded) and pid, unique among live processes of a fleet.
func defaultConsumer() string {
	h, _ := os.Hostname()
	b := make([]byte, 0, 64)
	for i := 0; i < len(h) && len(b) < 48; i++ {
		c := h[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			b = append(b, c)
		}
	}
	if len(b) == 0 {
		b = append(b, "caphost"...)
	}
	return string(b) + "-" + strconv.Itoa(os.Getpid())
}
