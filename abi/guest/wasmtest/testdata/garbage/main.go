// Command garbage is the guest of TestHeapStaysBounded. Its codecs' decode
// takes a size in decimal as the payload and answers it back:
//
//   - "garbage" allocates that many bytes and drops them at the next call,
//     like a decoder building a value it returns a copy of;
//   - "keep" allocates that many bytes and keeps the last 1,024 of them;
//   - "limit" sets the Go runtime's memory limit to that many bytes;
//   - "stats" (any payload) answers the guest's GC statistics instead: JSON
//     of runtime/metrics values by name.
package main

import (
	"encoding/json"
	"runtime/debug"
	"runtime/metrics"
	"strconv"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

var (
	sink  []byte       // the last "garbage" allocation, dropped at the next
	kept  [1024][]byte // the last "keep" allocations
	kepts int
)

var stats = []metrics.Sample{
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/gc/heap/goal:bytes"},
	{Name: "/gc/cycles/total:gc-cycles"},
	{Name: "/gc/cycles/forced:gc-cycles"},
	{Name: "/gc/limiter/last-enabled:gc-cycle"},
}

// sized is a decode that parses its payload as a size and hands it to f.
func sized(f func(n int)) func(uint32, []byte) ([]byte, error) {
	return func(_ uint32, b []byte) ([]byte, error) {
		n, err := strconv.Atoi(string(b))
		if err != nil || n < len(b) {
			return nil, guest.Errorf(abi.CodeCorrupt, "not a size")
		}
		f(n)
		return b, nil
	}
}

func init() {
	codec := func(id string, decode func(uint32, []byte) ([]byte, error)) guest.Codec {
		return guest.Codec{
			Decl:   abi.CodecDecl{SchemaID: id, WriteVersion: 1, ReadableVersions: []uint32{1}},
			Encode: func(b []byte) ([]byte, error) { return b, nil },
			Decode: decode,
		}
	}
	guest.Register(&guest.Module{Name: "garbage", Codecs: []guest.Codec{
		codec("garbage", sized(func(n int) { sink = make([]byte, n) })),
		codec("keep", sized(func(n int) {
			kept[kepts%len(kept)] = make([]byte, n)
			kepts++
		})),
		codec("limit", sized(func(n int) { debug.SetMemoryLimit(int64(n)) })),
		codec("stats", func(uint32, []byte) ([]byte, error) {
			metrics.Read(stats)
			m := map[string]uint64{}
			for _, s := range stats {
				m[s.Name] = s.Value.Uint64()
			}
			return json.Marshal(m)
		}),
	}})
}

func main() {}
