package render

import (
	"context"
	"testing"

	"github.com/caphost/caphost/abi"
)

// BenchmarkRender is one render end to end: checks, the guest call on the
// native engine, verification and the frozen Result.
func BenchmarkRender(b *testing.B) {
	for _, ch := range []Channel{Email, Text} {
		b.Run(string(ch), func(b *testing.B) {
			r, _ := newRenderer(b, Options{})
			ctx := context.Background()
			req := welcome("de-AT", ch, String("name", `Jörg <b>&"`), String("account", "A-1002"))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := r.Render(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRenderParallel renders text from GOMAXPROCS×8 goroutines
// (b.SetParallelism), drawing on the module's instance pool.
func BenchmarkRenderParallel(b *testing.B) {
	r, _ := newRenderer(b, Options{})
	ctx := context.Background()
	req := welcome("de-AT", Text, String("name", "Jörg"), String("account", "A-1002"))
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := r.Render(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkVerify is the host's output check alone, on an email answer.
func BenchmarkVerify(b *testing.B) {
	params := []abi.Attr{{Name: "name", Value: `Jörg <b>&"`}, {Name: "account", Value: "A-1002"}}
	parts := []abi.MessagePart{
		{Name: "subject", ContentType: ctPlain, Body: []byte(`Willkommen, Jörg <b>&"`)},
		{Name: "text", ContentType: ctPlain, Body: []byte("Hallo Jörg <b>&\",\n\nIhr Konto A-1002 ist bereit.\n\nGesendet am 29.11.2026\n")},
		{Name: "html", ContentType: ctHTML, Body: []byte("<p>Hallo Jörg &lt;b&gt;&amp;&#34;,</p>\n<p>Ihr Konto A-1002 ist bereit.</p>\n<p><small>Gesendet am 29.11.2026</small></p>\n")},
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := Verify(Email, params, parts, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResultEncoding is one frozen Result encoded and decoded.
func BenchmarkResultEncoding(b *testing.B) {
	r := goldenResult()
	buf, err := r.AppendBinary(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = r.AppendBinary(buf[:0])
		var out Result
		if err := out.UnmarshalBinary(buf); err != nil {
			b.Fatal(err)
		}
	}
}
