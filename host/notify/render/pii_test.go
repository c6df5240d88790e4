package render

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/plugins"
)

// capture is a slog.Handler keeping every record as text: message and
// every attribute, groups flattened.
type capture struct {
	mu    *sync.Mutex
	lines *[]string
	attrs []slog.Attr
}

func newCapture() *capture { return &capture{mu: &sync.Mutex{}, lines: new([]string)} }

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Message)
	for _, a := range c.attrs {
		fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value.Resolve())
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value.Resolve())
		return true
	})
	c.mu.Lock()
	*c.lines = append(*c.lines, sb.String())
	c.mu.Unlock()
	return nil
}

func (c *capture) WithAttrs(as []slog.Attr) slog.Handler {
	return &capture{mu: c.mu, lines: c.lines, attrs: append(append([]slog.Attr(nil), c.attrs...), as...)}
}

func (c *capture) WithGroup(string) slog.Handler { return c }

func (c *capture) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), *c.lines...)
}

// TestContentNeverLeaks renders successes, refusals and failures with a
// recipient address and a secret in the parameters, logging at debug, and
// asserts that neither those values nor any rendered body reaches a log
// line, an error's text or a metric (names, labels, help).
func TestContentNeverLeaks(t *testing.T) {
	const addr, secret = "ada.lovelace@example.com", "SECRET-7f3a9"
	logs := newCapture()
	log := slog.New(logs)
	reg := prometheus.NewPedanticRegistry()
	eng, err := plugins.NewEngine(plugins.Config{CacheDir: th.CacheDir, Logger: log})
	require.NoError(t, err)
	ctx := context.Background()
	t.Cleanup(func() { _ = eng.Close(ctx) })
	mgr := plugins.NewManager(eng, plugins.ManagerOptions{Verify: plugins.AcceptAnyModule, Logger: log})
	t.Cleanup(func() { _ = mgr.Close(ctx) })
	require.NoError(t, mgr.Load(ctx, "renderer", th.Wasm("renderer"), generous))
	require.NoError(t, mgr.Load(ctx, "bad", th.Wasm("badrenderer"), generous))
	r, err := New(Options{Guests: mgr, Modules: []string{"renderer", "bad"}, Logger: log, Registerer: reg})
	require.NoError(t, err)

	value := addr + " " + secret + ` <b>&"`
	var bodies []string
	var errs []error
	for _, ch := range []Channel{Email, Text, Slack} {
		res, err := r.Render(ctx, welcome("en-GB", ch, String("name", value), String("account", secret)))
		require.NoError(t, err)
		for _, p := range res.Parts {
			bodies = append(bodies, string(p.Body))
		}
		bodies = append(bodies, res.String())
	}
	for _, req := range []Request{
		bad(Email, "raw-html", value), bad(Email, "crlf-subject", "x\r\n"+value), bad(CSV, "raw-csv", "="+value),
		bad(Text, "trap", value), bad(Text, "internal", value), bad(Text, "refuse", value),
		welcome("en", Email, String("name", value+"\x00"), String("account", secret)),
		welcome("en", Email, String(addr, value)),
		welcome("xx", Email, String("name", value), String("account", secret)),
	} {
		_, err := r.Render(ctx, req)
		require.Error(t, err)
		errs = append(errs, err)
	}

	lines := logs.all()
	require.NotEmpty(t, lines, "debug and warning lines were written")
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var metricText strings.Builder
	for _, mf := range mfs {
		fmt.Fprintln(&metricText, mf.String())
	}
	for _, needle := range []string{addr, secret, "<b>&"} {
		for _, l := range lines {
			assert.NotContains(t, l, needle, "log line")
		}
		for _, e := range errs {
			assert.NotContains(t, e.Error(), needle, "error text")
		}
		assert.NotContains(t, metricText.String(), needle, "metrics")
	}
	for _, b := range bodies {
		for _, l := range lines {
			assert.NotContains(t, l, strings.TrimSpace(b), "a rendered body in a log line")
		}
	}
}
