package transport

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
)

// Bounds of one plugin log line as the host logs it.
const (
	maxLogMessageBytes = 256
	maxLogAttrs        = 8
	maxLogValueBytes   = 128
)

// newLogBridge returns the hclog.Logger go-plugin is given: it writes JSON
// lines (go-plugin's own messages and the plugin's stderr lines, which
// go-plugin re-logs through it) into a writer that re-emits each line
// through log, bounded and sanitised.
func newLogBridge(log *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:        "plugin",
		Output:      &logWriter{log: log, name: name},
		JSONFormat:  true,
		Level:       hclog.Info,
		DisableTime: true,
	})
}

type logWriter struct {
	log  *slog.Logger
	name string
}

// sensitiveKey: attributes that could carry an address, content or a
// secret are dropped whatever the plugin put in them.
func sensitiveKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"secret", "password", "token", "key", "auth", "recipient", "rcpt", "to", "body", "subject", "content", "env", "args"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// Write takes one hclog line (hclog writes each entry with one Write).
func (w *logWriter) Write(p []byte) (int, error) {
	var entry map[string]any
	if err := json.Unmarshal(p, &entry); err != nil {
		w.log.Warn("transport plugin log line unreadable", slog.String("transport", w.name), slog.Int("bytes", len(p)))
		return len(p), nil
	}
	level := slog.LevelInfo
	switch entry["@level"] {
	case "trace", "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	msg, _ := entry["@message"].(string)
	attrs := []slog.Attr{slog.String("transport", w.name), slog.String("plugin_msg", bound(msg, maxLogMessageBytes))}
	keys := make([]string, 0, len(entry))
	for k := range entry {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if len(attrs) >= maxLogAttrs+2 {
			break
		}
		if !validToken(k, 32, true) || sensitiveKey(k) {
			continue
		}
		var v string
		switch x := entry[k].(type) {
		case string:
			v = x
		default:
			b, _ := json.Marshal(x)
			v = string(b)
		}
		attrs = append(attrs, slog.String("plugin_"+k, bound(v, maxLogValueBytes)))
	}
	w.log.LogAttrs(context.Background(), level, "transport plugin log", attrs...)
	return len(p), nil
}

// bound cuts s to limit bytes on a rune boundary and replaces control
// characters, so a log line stays one bounded line.
func bound(s string, limit int) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > limit {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
