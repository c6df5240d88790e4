package notify_test

import (
	"fmt"

	"github.com/caphost/caphost/host/notify"
)

// An operator's capabilities.notify block, as the configuration loader
// hands it over (provider and redis-role already taken out): a relative
// transport binary resolves against the file's directory, and routes say
// which transports a channel's route tries, in order.
func ExampleDecode() {
	raw := map[string]any{
		"transports": map[string]any{
			"webhook": map[string]any{"binary": "transports/webhook", "sha256": "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
				"settings": map[string]any{"url": "https://hooks.example.com/notify", "secret": "0123456789abcdef0123456789abcdef"}},
			"file": map[string]any{"binary": "/opt/caphost/transports/file", "sha256": "fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9",
				"settings": map[string]any{"dir": "/var/spool/caphost"}},
		},
		"routes": map[string]any{
			"slack": map[string]any{
				"default": map[string]any{"transports": []any{"webhook", "file"}},
				"alerts":  map[string]any{"transports": []any{"webhook"}, "best-effort": true},
			},
		},
	}
	cfg, err := notify.Decode(notify.ProviderRedis, "", raw, "/etc/caphost")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("role:", cfg.Role)
	fmt.Println("webhook binary:", cfg.Transports["webhook"].Binary)
	fmt.Println("slack/default:", cfg.Routes["slack"]["default"].Transports)
	fmt.Println("slack/alerts best-effort:", cfg.Routes["slack"]["alerts"].BestEffort)

	_, err = notify.Decode(notify.ProviderRedis, "cache", raw, "/etc/caphost")
	fmt.Println(err)
	// Output:
	// role: coordination
	// webhook binary: /etc/caphost/transports/webhook
	// slack/default: [webhook file]
	// slack/alerts best-effort: true
	// invalid configuration (1 problem)
	//   capabilities.notify.redis-role: durable intents need a correctness role (coordination or session): an evicted intent is a lost notification [capability.role]
}

// The body of POST /v1/notify, decoded strictly: parameters come back
// sorted by name, and a durable request needs its idempotency key.
func ExampleDecodeSubmit() {
	req, mode, err := notify.DecodeSubmit([]byte(`{"idempotency-key":"welcome-ada-1","channel":"slack",
		"recipient":"ada@example.com","template":"welcome","version":1,"locale":"de-AT",
		"params":{"name":"Ada","account":"A-1"}}`))
	fmt.Println(mode, req.Template, req.Version, req.Locale, req.Params, err)
	_, _, err = notify.DecodeSubmit([]byte(`{"channel":"slack","recipient":"r","template":"welcome","version":1,"locale":"en"}`))
	fmt.Println(err)
	// Output:
	// durable welcome 1 de-AT [{account A-1} {name Ada}] <nil>
	// invalid-field: required for a durable notification: 1..256 bytes
}
