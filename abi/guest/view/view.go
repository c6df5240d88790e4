// Package view decodes caphost ABI v1 requests without copying or
// allocating, for guests. It owns only decoding; the encoding itself is
// defined in package abi, and this package must accept exactly what abi's
// Unmarshal methods accept (checked by a differential fuzz test), so change
// it only together with abi.
//
// Every allocation inside a Go wasm guest costs about a microsecond, more
// than the rest of a call, so requests are decoded as views: strings and byte
// slices alias the request bytes and attribute lists use caller-owned
// storage. Views are valid only while the input is unchanged (the host
// overwrites the request region on the next call); code that keeps request
// data must copy it. On a false result, decode with abi for the error text:
// only the error path allocates.
//
// It imports only abi and the standard library so that guests with their
// own glue (the Extism flavour) can use it without linking abi/guest's
// exports.
package view

import (
	"unicode/utf8"
	"unsafe"

	"github.com/caphost/caphost/abi"
)

// view is a minimal, allocation-free reader of the abi encoding.
//
// In a Go wasm guest a function call costs more than the work of decoding a
// short field, so each field is read by one call: the readers below carry
// the one-byte varint (the common length) and the ASCII check inline and
// call out only for longer varints and non-ASCII text.
type view struct {
	b   []byte
	off int
	bad bool
}

// uvarint reads a varint.
//
// After a violation the fast path may still advance off; that is harmless
// because every reader checks bad before slicing and ok reports failure.
func (d *view) uvarint() uint64 {
	if off := d.off; off < len(d.b) && d.b[off] < 0x80 {
		d.off = off + 1
		return uint64(d.b[off])
	}
	return d.uvarintSlow()
}

func (d *view) uvarintSlow() uint64 {
	if d.bad {
		return 0
	}
	var v uint64
	for i := 0; i < 10; i++ {
		if d.off+i >= len(d.b) {
			d.bad = true
			return 0
		}
		c := d.b[d.off+i]
		if i == 9 && c > 1 {
			d.bad = true // overflows 64 bits
			return 0
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if i > 0 && c == 0 {
				d.bad = true // non-minimal
				return 0
			}
			d.off += i + 1
			return v
		}
	}
	d.bad = true
	return 0
}

func (d *view) u32() uint32 {
	v := d.uvarint()
	if v > 1<<32-1 {
		d.bad = true
		return 0
	}
	return uint32(v)
}

func (d *view) varint() int64 {
	u := d.uvarint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func (d *view) tag(t abi.MsgTag) {
	if len(d.b) > abi.MaxMessageBytes || len(d.b) == 0 || abi.MsgTag(d.b[0]) != t {
		d.bad = true
		return
	}
	d.off = 1
}

// span reads a length-prefixed field of at most max bytes and returns its
// bounds in d.b; on a violation it sets bad and returns an empty span.
func (d *view) span(max int) (start, end int) {
	var n uint64
	if off := d.off; off < len(d.b) && d.b[off] < 0x80 {
		n = uint64(d.b[off])
		d.off = off + 1
	} else {
		n = d.uvarintSlow()
	}
	if d.bad || n > uint64(max) || n > uint64(len(d.b)-d.off) {
		d.bad = true
		return 0, 0
	}
	start = d.off
	d.off += int(n)
	return start, d.off
}

func (d *view) bytes(max int) []byte {
	start, end := d.span(max)
	if start == end {
		return nil // abi decodes an empty byte string as nil
	}
	return d.b[start:end:end]
}

func (d *view) str(max int) string {
	var n uint64
	if off := d.off; off < len(d.b) && d.b[off] < 0x80 {
		n = uint64(d.b[off])
		d.off = off + 1
	} else {
		n = d.uvarintSlow()
	}
	if d.bad || n > uint64(max) || n > uint64(len(d.b)-d.off) {
		d.bad = true
		return ""
	}
	p := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	if len(p) == 0 {
		return ""
	}
	for _, c := range p {
		if c >= utf8.RuneSelf {
			if !utf8.Valid(p) {
				d.bad = true
				return ""
			}
			break
		}
	}
	return unsafe.String(unsafe.SliceData(p), len(p))
}

func (d *view) count(max int) int {
	n := d.uvarint()
	if d.bad || n > uint64(max) || n > uint64(len(d.b)-d.off) {
		d.bad = true
		return 0
	}
	return int(n)
}

// attrs decodes into buf's storage; nil when the list is empty, like abi.
func (d *view) attrs(buf *[]abi.Attr) []abi.Attr {
	n := d.count(abi.MaxListItems)
	if n == 0 {
		return nil
	}
	if cap(*buf) < n {
		*buf = make([]abi.Attr, abi.MaxListItems)
	}
	as := (*buf)[:n:n]
	for i := range as {
		as[i].Name = d.str(abi.MaxNameBytes)
		as[i].Value = d.str(abi.MaxValueBytes)
	}
	return as
}

func (d *view) ok() bool { return !d.bad && d.off == len(d.b) }

// CodecEncode decodes a CodecEncodeRequest as views into in.
func CodecEncode(in []byte, m *abi.CodecEncodeRequest) bool {
	d := view{b: in}
	d.tag(abi.TagCodecEncodeRequest)
	m.Schema = d.str(abi.MaxNameBytes)
	m.Value = d.bytes(abi.MaxPayloadBytes)
	return d.ok()
}

// CodecDecode decodes a CodecDecodeRequest as views into in.
func CodecDecode(in []byte, m *abi.CodecDecodeRequest) bool {
	d := view{b: in}
	d.tag(abi.TagCodecDecodeRequest)
	m.Schema = d.str(abi.MaxNameBytes)
	m.StoredVersion = d.u32()
	m.Payload = d.bytes(abi.MaxPayloadBytes)
	return d.ok()
}

// Canonicalize decodes a CanonicalizeRequest as views into in; Attrs use buf's storage.
func Canonicalize(in []byte, m *abi.CanonicalizeRequest, buf *[]abi.Attr) bool {
	d := view{b: in}
	d.tag(abi.TagCanonicalizeRequest)
	m.Region = d.str(abi.MaxNameBytes)
	m.Attrs = d.attrs(buf)
	return d.ok()
}

// Admit decodes an AdmitRequest as views into in.
func Admit(in []byte, m *abi.AdmitRequest) bool {
	d := view{b: in}
	d.tag(abi.TagAdmitRequest)
	m.Region = d.str(abi.MaxNameBytes)
	m.SizeBytes = d.uvarint()
	m.Class = d.str(abi.MaxNameBytes)
	m.CostHintUS = d.uvarint()
	m.LoadLatency = d.uvarint()
	return d.ok()
}

// RateSelect decodes a RateSelectRequest as views into in; Attrs use buf's
// storage (grown once to abi.MaxListItems).
func RateSelect(in []byte, m *abi.RateSelectRequest, buf *[]abi.Attr) bool {
	d := view{b: in}
	d.tag(abi.TagRateSelectRequest)
	m.Route = d.str(abi.MaxValueBytes)
	m.Method = d.str(abi.MaxNameBytes)
	m.PrincipalTier = d.str(abi.MaxNameBytes)
	m.APIKeyPlan = d.str(abi.MaxNameBytes)
	m.ClientIPClass = d.str(abi.MaxNameBytes)
	m.Attrs = d.attrs(buf)
	return d.ok()
}

// Render decodes a RenderRequest as views into in; Params use buf's storage.
func Render(in []byte, m *abi.RenderRequest, buf *[]abi.Attr) bool {
	d := view{b: in}
	d.tag(abi.TagRenderRequest)
	m.Template = d.str(abi.MaxNameBytes)
	m.Version = d.u32()
	m.Locale = d.str(abi.MaxNameBytes)
	m.Channel = d.str(abi.MaxNameBytes)
	m.Params = d.attrs(buf)
	m.NowUnixMilli = d.varint()
	return d.ok()
}
