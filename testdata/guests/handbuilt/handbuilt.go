// Package handbuilt assembles hostile test guests that a Go guest cannot be:
// Wasm modules written instruction by instruction, whose runaway work has no
// loop (Go's compiler wraps every function that calls in one) or overflows
// the Wasm call stack before any memory limit (Go guests run out of linear
// memory first). Each is a complete native-flavour module: it exports
// memory, caphost_abi_version, caphost_alloc, caphost_describe and a codec
// (schema "x"), imports nothing, and answers describe and small inputs
// correctly.
//
// Both take the work's size from the last byte of the encode request, which
// ends with the value's last byte:
//
//   - CallTree encodes by computing tree(n), where tree(0) = 1 and
//     tree(n) = tree(n-1) + tree(n-1): 2^(n+1)-1 calls at a depth of n+1,
//     and no loop instruction anywhere in the module (ContainsLoop says so).
//     A value ending in 10 returns at once; one ending in 62 runs for
//     centuries unless its deadline stops it.
//   - Recursion encodes by computing down(n) = n == 0 ? 0 : down(n-1) + 1
//     with n the byte as a signed value: up to 127 frames, while a value
//     ending in 0xff (-1) recurses until the Wasm stack overflows.
//
// Only the host's tests use this package; it lives under testdata so that
// no build of caphost includes it.
package handbuilt

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

// Wasm opcodes and types used here.
const (
	opIf       = 0x04
	opElse     = 0x05
	opEnd      = 0x0b
	opLoop     = 0x03
	opCall     = 0x10
	opDrop     = 0x1a
	opLocalGet = 0x20
	opI32Load8 = 0x2c // i32.load8_s
	opI32Const = 0x41
	opI64Const = 0x42
	opI32Eqz   = 0x45
	opI32LeU   = 0x4d
	opI32Add   = 0x6a
	opI32Sub   = 0x6b
	tI32       = 0x7f
	tI64       = 0x7e
)

// Memory layout: one 64 KiB page; the host's requests go at inOffset.
const (
	describeOffset = 1024
	encodeOffset   = 16384
	decodeOffset   = 20480
	inOffset       = 32768
	inCap          = 65536 - inOffset
)

// CallTree returns the loop-free call-tree guest (see the package doc).
func CallTree() []byte {
	// tree(n i32) i32: function 6.
	tree := []byte{
		opLocalGet, 0, opI32Eqz,
		opIf, tI32,
		opI32Const, 1,
		opElse,
		opLocalGet, 0, opI32Const, 1, opI32Sub, opCall, 6,
		opLocalGet, 0, opI32Const, 1, opI32Sub, opCall, 6,
		opI32Add,
		opEnd, // if; code adds the function's end
	}
	return build("calltree", tree)
}

// Recursion returns the stack-overflow guest (see the package doc).
func Recursion() []byte {
	// down(n i32) i32: function 6.
	down := []byte{
		opLocalGet, 0, opI32Eqz,
		opIf, tI32,
		opI32Const, 0,
		opElse,
		opLocalGet, 0, opI32Const, 1, opI32Sub, opCall, 6,
		opI32Const, 1, opI32Add,
		opEnd, // if; code adds the function's end
	}
	return build("recursion", down)
}

// ContainsLoop reports whether any function body of a module built here
// holds a loop instruction. The bodies use no immediate that could be read
// as the loop opcode, so a byte scan is exact for them.
func ContainsLoop(wasm []byte) bool {
	for _, body := range codeBodies(wasm) {
		if slices.Contains(body, opLoop) {
			return true
		}
	}
	return false
}

// build assembles a module whose encode calls work (function 6) on the last
// request byte, drops the result and answers a fixed frame.
func build(name string, work []byte) []byte {
	codec := guest.Codec{
		Decl:   abi.CodecDecl{SchemaID: "x", WriteVersion: 1, ReadableVersions: []uint32{1}},
		Encode: func(b []byte) ([]byte, error) { return b, nil },
		Decode: func(_ uint32, b []byte) ([]byte, error) { return b, nil },
	}
	d, err := guest.NewDispatcher(&guest.Module{Name: name, Codecs: []guest.Codec{codec}})
	if err != nil {
		panic(fmt.Sprintf("handbuilt %s: %v", name, err)) // a bug in this file, not an input
	}
	describe := d.Handle(abi.ExportDescribe, nil, nil)
	encoded := (&abi.CodecEncodeResponse{Version: 1, Payload: []byte(name)}).AppendTo(abi.AppendOKFrame(nil))
	decoded := abi.AppendErrorFrame(nil, abi.CodeUnsupported, name+" does not decode")
	if describeOffset+len(describe) > encodeOffset || len(encoded) > decodeOffset-encodeOffset {
		panic("handbuilt: data segments overlap")
	}

	var m []byte
	m = append(m, 0, 'a', 's', 'm', 1, 0, 0, 0)
	// Types: 0 () -> i32, 1 (i32) -> i32, 2 (i32, i32) -> i64, 3 () -> ().
	m = section(m, 1, vec(
		[]byte{0x60, 0, 1, tI32},
		[]byte{0x60, 1, tI32, 1, tI32},
		[]byte{0x60, 2, tI32, tI32, 1, tI64},
		[]byte{0x60, 0, 0},
	))
	// Functions: 0 version, 1 alloc, 2 describe, 3 encode, 4 decode, 5 _initialize, 6 work.
	m = section(m, 3, vec([]byte{0}, []byte{1}, []byte{2}, []byte{2}, []byte{2}, []byte{3}, []byte{1}))
	// Memory: exactly one page.
	m = section(m, 5, vec([]byte{0x01, 1, 1}))
	m = section(m, 7, vec(
		export("memory", 2, 0),
		export(abi.ExportVersion, 0, 0),
		export(abi.ExportAlloc, 0, 1),
		export(abi.ExportDescribe.Name(), 0, 2),
		export(abi.ExportCodecEncode.Name(), 0, 3),
		export(abi.ExportCodecDecode.Name(), 0, 4),
		export(abi.ExportInitialize, 0, 5),
	))
	version := append([]byte{opI32Const}, sleb(int64(abi.PackVersion(abi.Major, abi.Minor)))...)
	alloc := slices.Concat(
		[]byte{opLocalGet, 0, opI32Const}, sleb(inCap), []byte{opI32LeU, opIf, tI32, opI32Const}, sleb(inOffset),
		[]byte{opElse, opI32Const, 0, opEnd},
	)
	// The last request byte: load8_s at ptr+len-1 (alignment 0, offset 0).
	lastByte := []byte{opLocalGet, 0, opLocalGet, 1, opI32Add, opI32Const, 1, opI32Sub, opI32Load8, 0, 0}
	encode := slices.Concat(lastByte, []byte{opCall, 6, opDrop}, frame(encodeOffset, len(encoded)))
	m = section(m, 10, vec(
		code(version),
		code(alloc),
		code(frame(describeOffset, len(describe))),
		code(encode),
		code(frame(decodeOffset, len(decoded))),
		code(nil),
		code(work),
	))
	m = section(m, 11, vec(data(describeOffset, describe), data(encodeOffset, encoded), data(decodeOffset, decoded)))
	return m
}

// frame answers a response frame at ptr, len n: i64.const ptr<<32 | n.
func frame(ptr, n int) []byte {
	return append([]byte{opI64Const}, sleb(int64(ptr)<<32|int64(n))...)
}

func code(body []byte) []byte {
	fn := append([]byte{0}, body...) // no locals
	fn = append(fn, opEnd)
	return append(uleb(nil, uint64(len(fn))), fn...)
}

func export(name string, kind, index byte) []byte {
	return append(uleb(nil, uint64(len(name))), append([]byte(name), kind, index)...)
}

func data(offset int, init []byte) []byte {
	seg := append([]byte{0, opI32Const}, sleb(int64(offset))...)
	seg = append(seg, opEnd)
	seg = uleb(seg, uint64(len(init)))
	return append(seg, init...)
}

func section(m []byte, id byte, payload []byte) []byte {
	m = append(m, id)
	m = uleb(m, uint64(len(payload)))
	return append(m, payload...)
}

func vec(items ...[]byte) []byte {
	return append(uleb(nil, uint64(len(items))), slices.Concat(items...)...)
}

func uleb(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// codeBodies returns the function bodies (after their local declarations,
// which are empty here) of a module built by build.
func codeBodies(wasm []byte) [][]byte {
	var bodies [][]byte
	for p := 8; p < len(wasm); {
		id := wasm[p]
		n, k := binary.Uvarint(wasm[p+1:])
		start := p + 1 + k
		p = start + int(n)
		if id != 10 {
			continue
		}
		count, k := binary.Uvarint(wasm[start:])
		q := start + k
		for range count {
			size, k := binary.Uvarint(wasm[q:])
			q += k
			bodies = append(bodies, wasm[q+1:q+int(size)]) // skip the empty locals vector
			q += int(size)
		}
	}
	return bodies
}

// WithCustomSection returns a copy of wasm with a custom section (id 0:
// name, then payload) appended; custom sections may come after every other
// section, and nothing reads this one. Tests use it to make distinct
// modules (another digest, another wazero module ID) that compile to the
// same code.
func WithCustomSection(wasm []byte, name string, payload []byte) []byte {
	body := binary.AppendUvarint(nil, uint64(len(name)))
	body = append(append(body, name...), payload...)
	out := append(slices.Clip(wasm), 0)
	out = binary.AppendUvarint(out, uint64(len(body)))
	return append(out, body...)
}
