package intent_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"time"

	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// Example submits a frozen plan twice under one idempotency key: the
// second submit returns the first intent, and Get reports its state.
func Example() {
	addr, stop := redistest.ForExample()
	defer stop()
	ctx := context.Background()
	rt, err := runtime.New(ctx, redistest.ExampleConfig(addr, policy.RoleCoordination), runtime.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	defer func() { _ = rt.Close(ctx) }()
	store, err := intent.New(rt, intent.Config{})
	if err != nil {
		panic(err)
	}
	to, _ := transport.NewRecipient("ops@example.com")
	now := time.UnixMilli(1_767_225_600_000).UTC()
	plan := intent.Plan{Recipient: to, Transports: []string{"webhook", "smtp"}, CreatedAt: now, Message: render.Result{
		Module: "renderer", ModuleSHA256: sha256.Sum256([]byte("renderer.wasm")), Template: "welcome", Version: 1,
		RequestedLocale: "en", Locale: "en", Channel: render.Email, Now: now,
		Parts: []render.Part{{Name: "subject", ContentType: "text/plain; charset=utf-8", Body: []byte("Welcome")},
			{Name: "text", ContentType: "text/plain; charset=utf-8", Body: []byte("Hello\n")}}}}

	first, err := store.Submit(ctx, []byte("order-42/welcome"), plan)
	if err != nil {
		panic(err)
	}
	again, _ := store.Submit(ctx, []byte("order-42/welcome"), plan)
	st, _ := store.Get(ctx, first.ID)
	fmt.Println(first.Duplicate, again.Duplicate, again.ID == first.ID, first.Certainty, st.State)
	// Output: false true true APPLIED PENDING
}
