package render

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

// A welcome message for a German-speaking user in Austria: the template
// declares "de", so the host falls back from "de-AT" and records both.
// The frozen Result is what a notification plan stores.
func ExampleRenderer_Render() {
	ctx := context.Background()
	eng, err := plugins.NewEngine(plugins.Config{CacheDir: compileCache()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close(ctx)
	mgr := plugins.NewManager(eng, plugins.ManagerOptions{Verify: plugins.AcceptAnyModule, Logger: slog.New(slog.DiscardHandler)})
	defer mgr.Close(ctx)
	// In the host the module comes from configuration, pinned by sha256.
	if err := mgr.Load(ctx, "renderer", builtGuest("renderer"), plugins.Limits{}); err != nil {
		fmt.Println(err)
		return
	}

	r, err := New(Options{Guests: mgr, Modules: []string{"renderer"}, DefaultLocale: "en"})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := r.Render(ctx, Request{Template: "welcome", Version: 1, Locale: "de-AT", Channel: Text,
		Params: []Param{String("name", "Jörg"), String("account", "A-1002")},
		Now:    time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.RequestedLocale, "→", res.Locale)
	fmt.Print(string(res.Parts[0].Body))

	plan, err := res.MarshalBinary()
	if err != nil {
		fmt.Println(err)
		return
	}
	var frozen Result
	if err := frozen.UnmarshalBinary(plan); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(frozen.Parts[0].Body) == string(res.Parts[0].Body), frozen.ModuleSHA256 == res.ModuleSHA256)
	// Output:
	// de-AT → de
	// Hallo Jörg,
	//
	// Ihr Konto A-1002 ist bereit.
	//
	// Gesendet am 29.11.2026
	// true true
}

// Verify is the host's check of a renderer's answer; here the guest put a
// parameter into the HTML part without escaping it.
func ExampleVerify() {
	params := []abi.Attr{{Name: "name", Value: "<b>Ada</b>"}}
	err := Verify(Email, params, []abi.MessagePart{
		{Name: "subject", ContentType: "text/plain; charset=utf-8", Body: []byte("Welcome")},
		{Name: "text", ContentType: "text/plain; charset=utf-8", Body: []byte("Hello <b>Ada</b>\n")},
		{Name: "html", ContentType: "text/html; charset=utf-8", Body: []byte("<p>Hello <b>Ada</b></p>\n")},
	}, Limits{})
	fmt.Println(err)
	fmt.Println(errors.Is(err, ErrInvalidOutput))
	// Output:
	// render: channel email: part 2 (html): unescaped-param
	// true
}
