package transport_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/plugins/transport/filesink"
)

// BenchmarkDeliverFile measures the go-plugin call overhead per delivery:
// the same file sink called in process and through its plugin process.
// "dedup" re-delivers one intent (the sink answers from an lstat, so the
// row is almost all call overhead); "write" writes a new intent each time
// (temp file, fsync, link, directory fsync). Each variant runs twice on
// separate instances, the second being the A/A control of the first.
func BenchmarkDeliverFile(b *testing.B) {
	inProcess := func(b *testing.B) transport.Transport {
		s, err := filesink.New(map[string]string{"dir": b.TempDir()}, transport.Env{})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	viaPlugin := func(b *testing.B) transport.Transport {
		path, sum := pluginBin(b, "file")
		p, err := transport.Launch(context.Background(), transport.Config{Name: "file", Path: path, SHA256: sum,
			Settings: map[string]string{"dir": b.TempDir()}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Close() })
		return p
	}
	for _, mode := range []string{"dedup", "write"} {
		for _, v := range []struct {
			name string
			make func(*testing.B) transport.Transport
		}{{"inprocess", inProcess}, {"inprocess-control", inProcess}, {"plugin", viaPlugin}, {"plugin-control", viaPlugin}} {
			b.Run(mode+"/"+v.name, func(b *testing.B) {
				tr := v.make(b)
				m := message(b, "bench-dedup")
				ctx := context.Background()
				if r := tr.Deliver(ctx, m); r.Outcome != transport.Accepted {
					b.Fatal(r)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					if mode == "write" {
						m.IntentID = "bench-" + strconv.Itoa(i)
					}
					if r := tr.Deliver(ctx, m); r.Outcome != transport.Accepted {
						b.Fatal(r)
					}
				}
			})
		}
	}
}
