package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Self-test vectors (ABI 1.0, optional). A module may bundle golden vectors
// in a wasm custom section named SelfTestSection whose content is one
// SelfTestVectors message. The host runs each vector against the loaded
// module before a hot swap and requires the response frame to match byte for
// byte. A custom section needs no export and no new host code path, and it is
// covered by the module's sha256 and signature like the code it tests.
const (
	// SelfTestSection is the custom section name holding SelfTestVectors.
	SelfTestSection = "caphost.selftest.v1"
	// TagSelfTestVectors tags the SelfTestVectors message.
	TagSelfTestVectors MsgTag = 13
	// MaxSelfTestVectors bounds the vectors in one module.
	MaxSelfTestVectors = MaxListItems
)

// ErrSelfTestSection is matched (errors.Is) when a module's wasm section
// layout or its self-test section cannot be read.
var ErrSelfTestSection = errors.New("abi: bad self-test section")

// SelfTestVector is one request to an export and its exact expected response frame.
type SelfTestVector struct {
	Export   Export
	Request  []byte
	Response []byte
}

// SelfTestVectors is the content of the self-test custom section:
// list(64) of { export uvarint (a v1 export other than describe),
// request bytes(1 MiB), response frame bytes(1 MiB) }.
type SelfTestVectors struct {
	Vectors []SelfTestVector
}

// AppendTo appends the encoding of m.
func (m *SelfTestVectors) AppendTo(b []byte) []byte {
	b = append(b, byte(TagSelfTestVectors))
	b = AppendUvarint(b, uint64(len(m.Vectors)))
	for _, v := range m.Vectors {
		b = AppendUvarint(b, uint64(v.Export))
		b = AppendBytes(b, v.Request)
		b = AppendBytes(b, v.Response)
	}
	return b
}

// Unmarshal decodes b into m.
func (m *SelfTestVectors) Unmarshal(b []byte) error {
	if len(b) > 4*MaxMessageBytes {
		return malformed("message", 0, "self-test section too large")
	}
	var d Decoder
	d.Reset(b)
	d.Tag(TagSelfTestVectors)
	n := d.Count("vectors", MaxSelfTestVectors)
	m.Vectors = nil
	if n > 0 {
		m.Vectors = make([]SelfTestVector, n)
	}
	for i := range m.Vectors {
		v := &m.Vectors[i]
		e := d.Uvarint("vector.export")
		if d.Err() == nil && (e > 255 || !Export(e).Valid() || Export(e) == ExportDescribe) {
			d.fail("vector.export", "not a callable v1 export")
		}
		v.Export = Export(e)
		v.Request = d.Bytes("vector.request", MaxMessageBytes)
		v.Response = d.Bytes("vector.response", MaxMessageBytes)
	}
	return d.Finish()
}

// AppendSelfTestSection returns wasm with a self-test custom section
// appended (custom sections may follow any section). It is what a build step
// uses to bundle vectors into a module.
func AppendSelfTestSection(wasm []byte, v *SelfTestVectors) []byte {
	content := AppendString(nil, SelfTestSection)
	content = v.AppendTo(content)
	out := append([]byte(nil), wasm...)
	out = append(out, 0)
	out = binary.AppendUvarint(out, uint64(len(content)))
	return append(out, content...)
}

// ReadSelfTestSection walks the module's top-level sections and decodes the
// self-test section. A module without one returns (nil, nil); more than one
// such section, a broken section layout or a malformed message is an error
// matching ErrSelfTestSection.
func ReadSelfTestSection(wasm []byte) (*SelfTestVectors, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrSelfTestSection}, args...)...)
	}
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, bad("not a wasm module")
	}
	var found *SelfTestVectors
	for off := 8; off < len(wasm); {
		id := wasm[off]
		size, n := binary.Uvarint(wasm[off+1:])
		if n <= 0 || size > uint64(len(wasm)-off-1-n) {
			return nil, bad("section at offset %d overruns the module", off)
		}
		body := wasm[off+1+n : off+1+n+int(size)]
		off += 1 + n + int(size)
		if id != 0 {
			continue
		}
		nameLen, k := binary.Uvarint(body)
		if k <= 0 || nameLen > uint64(len(body)-k) {
			return nil, bad("custom section name overruns its section")
		}
		if string(body[k:k+int(nameLen)]) != SelfTestSection {
			continue
		}
		if found != nil {
			return nil, bad("more than one %s section", SelfTestSection)
		}
		found = &SelfTestVectors{}
		if err := found.Unmarshal(body[k+int(nameLen):]); err != nil {
			return nil, bad("%v", err)
		}
	}
	return found, nil
}
