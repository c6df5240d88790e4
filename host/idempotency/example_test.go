package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/caphost/caphost/host/idempotency"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// A client retries a payment after its connection dropped: the retry
// carries the same Idempotency-Key and gets the first response back; the
// payment handler ran once.
func ExampleExecutor_Middleware() {
	addr, stop := redistest.ForExample()
	defer stop()
	ctx := context.Background()
	rt, err := runtime.New(ctx, redistest.ExampleConfig(addr, policy.RoleCoordination), runtime.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)
	exec, err := idempotency.New(rt, idempotency.Config{})
	if err != nil {
		panic(err)
	}
	charges := 0
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"payment":%d}`, charges)
	})
	h, err := exec.Middleware(idempotency.MiddlewareConfig{Route: "create-payment",
		Principal: func(r *http.Request) ([]byte, error) { return []byte(r.Header.Get("X-Tenant")), nil }}, pay)
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"amount":500}`))
		req.Header.Set("X-Tenant", "shop-7")
		req.Header.Set("Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get(idempotency.HeaderReplayed) == "true")
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201 {"payment":1} replayed: false
	// 201 {"payment":1} replayed: true
	// charges: 1
}
