package dispatch_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"time"

	"github.com/caphost/caphost/host/notify/dispatch"
	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// printer is a transport that accepts every message and prints what it
// may print: the attempt, never the recipient or the content.
type printer struct{}

func (printer) Name() string { return "printer" }
func (printer) Close() error { return nil }
func (printer) Deliver(_ context.Context, m transport.Message) transport.Receipt {
	fmt.Println("deliver attempt", m.Attempt, "channel", m.Channel, "to", m.Recipient)
	return transport.Receipt{Outcome: transport.Accepted, Code: "ok"}
}

// Example submits an intent and drains it with Poll, the synchronous form
// of the dispatcher's loop (Start runs it in the background; Close
// drains).
func Example() {
	addr, stop := redistest.ForExample()
	defer stop()
	ctx := context.Background()
	rt, err := runtime.New(ctx, redistest.ExampleConfig(addr, policy.RoleCoordination), runtime.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	defer func() { _ = rt.Close(ctx) }()
	store, err := intent.New(rt, intent.Config{Shards: 1})
	if err != nil {
		panic(err)
	}
	d, err := dispatch.New(store, dispatch.Config{Consumer: "worker-1", Logger: slog.New(slog.DiscardHandler),
		Transports: map[string]transport.Transport{"printer": printer{}}})
	if err != nil {
		panic(err)
	}
	to, _ := transport.NewRecipient("ops@example.com")
	now := time.UnixMilli(1_767_225_600_000).UTC()
	sub, err := store.Submit(ctx, []byte("order-42/welcome"), intent.Plan{Recipient: to, Transports: []string{"printer"}, CreatedAt: now,
		Message: render.Result{Module: "renderer", ModuleSHA256: sha256.Sum256([]byte("renderer.wasm")), Template: "welcome", Version: 1,
			RequestedLocale: "en", Locale: "en", Channel: render.Email, Now: now,
			Parts: []render.Part{{Name: "subject", ContentType: "text/plain; charset=utf-8", Body: []byte("Welcome")},
				{Name: "text", ContentType: "text/plain; charset=utf-8", Body: []byte("Hello\n")}}}})
	if err != nil {
		panic(err)
	}
	if _, err := d.Poll(ctx, 0); err != nil {
		panic(err)
	}
	st, _ := store.Get(ctx, sub.ID)
	fmt.Println(st.State, st.Attempts)
	// Output:
	// deliver attempt 1 channel email to ***
	// DELIVERED 1
}
