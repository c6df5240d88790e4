package abi

// MsgTag is the first byte of every message; it makes a request sent to the
// wrong export fail decoding instead of being misread.
type MsgTag uint8

// Message tags of ABI v1.
const (
	TagCodecEncodeRequest MsgTag = iota + 1
	TagCodecEncodeResponse
	TagCodecDecodeRequest
	TagCodecDecodeResponse
	TagCanonicalizeRequest
	TagCanonicalizeResponse
	TagAdmitRequest
	TagAdmitResponse
	TagRateSelectRequest
	TagRateSelectResponse
	TagRenderRequest
	TagRenderResponse
)

// Per-message bounds beyond the generic ones in wire.go.
const (
	// MaxPayloadBytes bounds codec values and payloads.
	MaxPayloadBytes = MaxMessageBytes - 1024
	// MaxKeyParts bounds the logical key parts a cache region returns.
	MaxKeyParts = 16
	// MaxSelections bounds the policies one rate select may return.
	MaxSelections = 16
	// MaxDimensions bounds the dimension values of one selection.
	MaxDimensions = 8
	// MaxMessageParts bounds the parts of a rendered message.
	MaxMessageParts = 8
	// MaxPartBytes bounds one rendered part.
	MaxPartBytes = 256 << 10
)

// Attr is a named string attribute (request attributes, template parameters).
type Attr struct {
	Name  string
	Value string
}

func appendAttrs(b []byte, as []Attr) []byte {
	b = AppendUvarint(b, uint64(len(as)))
	for _, a := range as {
		b = AppendString(b, a.Name)
		b = AppendString(b, a.Value)
	}
	return b
}

func (d *Decoder) attrs(field string) []Attr {
	n := d.Count(field, MaxListItems)
	if n == 0 {
		return nil
	}
	as := make([]Attr, n)
	for i := range as {
		as[i].Name = d.String(field+".name", MaxNameBytes)
		as[i].Value = d.String(field+".value", MaxValueBytes)
	}
	return as
}

func appendStrings(b []byte, ss []string) []byte {
	b = AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = AppendString(b, s)
	}
	return b
}

func (d *Decoder) strings(field string, maxItems, maxBytes int) []string {
	n := d.Count(field, maxItems)
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.String(field, maxBytes)
	}
	return ss
}

// CodecEncodeRequest asks a codec to turn the service's interchange value into a stored payload.
type CodecEncodeRequest struct {
	Schema string
	Value  []byte
}

// AppendTo appends the encoding of m.
func (m *CodecEncodeRequest) AppendTo(b []byte) []byte {
	b = append(b, byte(TagCodecEncodeRequest))
	b = AppendString(b, m.Schema)
	return AppendBytes(b, m.Value)
}

// Unmarshal decodes b into m.
func (m *CodecEncodeRequest) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagCodecEncodeRequest)
	m.Schema = d.String("schema", MaxNameBytes)
	m.Value = d.Bytes("value", MaxPayloadBytes)
	return d.Finish()
}

// CodecEncodeResponse carries the payload and the schema version it was written with.
type CodecEncodeResponse struct {
	Version uint32
	Payload []byte
}

// AppendTo appends the encoding of m.
func (m *CodecEncodeResponse) AppendTo(b []byte) []byte {
	b = append(b, byte(TagCodecEncodeResponse))
	b = AppendUvarint(b, uint64(m.Version))
	return AppendBytes(b, m.Payload)
}

// Unmarshal decodes b into m.
func (m *CodecEncodeResponse) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagCodecEncodeResponse)
	m.Version = d.Uint32("version")
	m.Payload = d.Bytes("payload", MaxPayloadBytes)
	return d.Finish()
}

// CodecDecodeRequest asks a codec to read a payload stored with StoredVersion,
// upgrading it to the current interchange form when needed.
type CodecDecodeRequest struct {
	Schema        string
	StoredVersion uint32
	Payload       []byte
}

// AppendTo appends the encoding of m.
func (m *CodecDecodeRequest) AppendTo(b []byte) []byte {
	b = append(b, byte(TagCodecDecodeRequest))
	b = AppendString(b, m.Schema)
	b = AppendUvarint(b, uint64(m.StoredVersion))
	return AppendBytes(b, m.Payload)
}

// Unmarshal decodes b into m.
func (m *CodecDecodeRequest) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagCodecDecodeRequest)
	m.Schema = d.String("schema", MaxNameBytes)
	m.StoredVersion = d.Uint32("stored_version")
	m.Payload = d.Bytes("payload", MaxPayloadBytes)
	return d.Finish()
}

// CodecDecodeResponse carries the decoded interchange value.
type CodecDecodeResponse struct {
	Value []byte
}

// AppendTo appends the encoding of m.
func (m *CodecDecodeResponse) AppendTo(b []byte) []byte {
	b = append(b, byte(TagCodecDecodeResponse))
	return AppendBytes(b, m.Value)
}

// Unmarshal decodes b into m.
func (m *CodecDecodeResponse) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagCodecDecodeResponse)
	m.Value = d.Bytes("value", MaxPayloadBytes)
	return d.Finish()
}

// CanonicalizeRequest asks a cache region for the logical key parts of a request.
type CanonicalizeRequest struct {
	Region string
	Attrs  []Attr
}

// AppendTo appends the encoding of m.
func (m *CanonicalizeRequest) AppendTo(b []byte) []byte {
	b = append(b, byte(TagCanonicalizeRequest))
	b = AppendString(b, m.Region)
	return appendAttrs(b, m.Attrs)
}

// Unmarshal decodes b into m.
func (m *CanonicalizeRequest) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagCanonicalizeRequest)
	m.Region = d.String("region", MaxNameBytes)
	m.Attrs = d.attrs("attrs")
	return d.Finish()
}

// CanonicalizeResponse carries logical key parts. The host length-prefixes and
// HMACs them; the guest never sees the resulting key.
type CanonicalizeResponse struct {
	Parts []string
}

// AppendTo appends the encoding of m.
func (m *CanonicalizeResponse) AppendTo(b []byte) []byte {
	b = append(b, byte(TagCanonicalizeResponse))
	return appendStrings(b, m.Parts)
}

// Unmarshal decodes b into m.
func (m *CanonicalizeResponse) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagCanonicalizeResponse)
	m.Parts = d.strings("parts", MaxKeyParts, MaxValueBytes)
	return d.Finish()
}

// AdmitRequest asks a cache region whether a loaded value should be stored.
// It carries metadata only, never the value.
type AdmitRequest struct {
	Region      string
	SizeBytes   uint64
	Class       string
	CostHintUS  uint64
	LoadLatency uint64 // microseconds the source took
}

// AppendTo appends the encoding of m.
func (m *AdmitRequest) AppendTo(b []byte) []byte {
	b = append(b, byte(TagAdmitRequest))
	b = AppendString(b, m.Region)
	b = AppendUvarint(b, m.SizeBytes)
	b = AppendString(b, m.Class)
	b = AppendUvarint(b, m.CostHintUS)
	return AppendUvarint(b, m.LoadLatency)
}

// Unmarshal decodes b into m.
func (m *AdmitRequest) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagAdmitRequest)
	m.Region = d.String("region", MaxNameBytes)
	m.SizeBytes = d.Uvarint("size_bytes")
	m.Class = d.String("class", MaxNameBytes)
	m.CostHintUS = d.Uvarint("cost_hint_us")
	m.LoadLatency = d.Uvarint("load_latency_us")
	return d.Finish()
}

// AdmitResponse is the admission verdict.
type AdmitResponse struct {
	Admit bool
}

// AppendTo appends the encoding of m.
func (m *AdmitResponse) AppendTo(b []byte) []byte {
	b = append(b, byte(TagAdmitResponse))
	return AppendBool(b, m.Admit)
}

// Unmarshal decodes b into m.
func (m *AdmitResponse) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagAdmitResponse)
	m.Admit = d.Bool("admit")
	return d.Finish()
}

// RateSelectRequest carries the attributes a rate-policy guest selects on.
// Identifying values (principal, API key) are never sent, only their classes.
type RateSelectRequest struct {
	Route         string
	Method        string
	PrincipalTier string
	APIKeyPlan    string
	ClientIPClass string
	Attrs         []Attr
}

// AppendTo appends the encoding of m.
func (m *RateSelectRequest) AppendTo(b []byte) []byte {
	b = append(b, byte(TagRateSelectRequest))
	b = AppendString(b, m.Route)
	b = AppendString(b, m.Method)
	b = AppendString(b, m.PrincipalTier)
	b = AppendString(b, m.APIKeyPlan)
	b = AppendString(b, m.ClientIPClass)
	return appendAttrs(b, m.Attrs)
}

// Unmarshal decodes b into m.
func (m *RateSelectRequest) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagRateSelectRequest)
	m.Route = d.String("route", MaxValueBytes)
	m.Method = d.String("method", MaxNameBytes)
	m.PrincipalTier = d.String("principal_tier", MaxNameBytes)
	m.APIKeyPlan = d.String("api_key_plan", MaxNameBytes)
	m.ClientIPClass = d.String("client_ip_class", MaxNameBytes)
	m.Attrs = d.attrs("attrs")
	return d.Finish()
}

// RateSelection names one declared policy to evaluate, the values of its
// subject dimensions (in declaration order) and the cost to charge.
type RateSelection struct {
	PolicyID   string
	Dimensions []string
	Cost       uint32
}

// RateSelectResponse lists the policies to evaluate, all of which must allow.
type RateSelectResponse struct {
	Selections []RateSelection
}

// AppendTo appends the encoding of m.
func (m *RateSelectResponse) AppendTo(b []byte) []byte {
	b = append(b, byte(TagRateSelectResponse))
	b = AppendUvarint(b, uint64(len(m.Selections)))
	for i := range m.Selections {
		s := &m.Selections[i]
		b = AppendString(b, s.PolicyID)
		b = appendStrings(b, s.Dimensions)
		b = AppendUvarint(b, uint64(s.Cost))
	}
	return b
}

// Unmarshal decodes b into m.
func (m *RateSelectResponse) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagRateSelectResponse)
	n := d.Count("selections", MaxSelections)
	m.Selections = nil
	if n > 0 {
		m.Selections = make([]RateSelection, n)
	}
	for i := range m.Selections {
		s := &m.Selections[i]
		s.PolicyID = d.String("policy_id", MaxNameBytes)
		s.Dimensions = d.strings("dimensions", MaxDimensions, MaxValueBytes)
		s.Cost = d.Uint32("cost")
	}
	return d.Finish()
}

// RenderRequest asks a renderer for a message. Now is supplied by the host so
// rendering stays a pure function.
type RenderRequest struct {
	Template     string
	Version      uint32
	Locale       string
	Channel      string
	Params       []Attr
	NowUnixMilli int64
}

// AppendTo appends the encoding of m.
func (m *RenderRequest) AppendTo(b []byte) []byte {
	b = append(b, byte(TagRenderRequest))
	b = AppendString(b, m.Template)
	b = AppendUvarint(b, uint64(m.Version))
	b = AppendString(b, m.Locale)
	b = AppendString(b, m.Channel)
	b = appendAttrs(b, m.Params)
	return AppendVarint(b, m.NowUnixMilli)
}

// Unmarshal decodes b into m.
func (m *RenderRequest) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagRenderRequest)
	m.Template = d.String("template", MaxNameBytes)
	m.Version = d.Uint32("version")
	m.Locale = d.String("locale", MaxNameBytes)
	m.Channel = d.String("channel", MaxNameBytes)
	m.Params = d.attrs("params")
	m.NowUnixMilli = d.Varint("now_unix_milli")
	return d.Finish()
}

// MessagePart is one rendered part, e.g. subject, text/plain body, text/html body.
type MessagePart struct {
	Name        string
	ContentType string
	Body        []byte
}

// RenderResponse carries the rendered parts.
type RenderResponse struct {
	Parts []MessagePart
}

// AppendTo appends the encoding of m.
func (m *RenderResponse) AppendTo(b []byte) []byte {
	b = append(b, byte(TagRenderResponse))
	b = AppendUvarint(b, uint64(len(m.Parts)))
	for i := range m.Parts {
		p := &m.Parts[i]
		b = AppendString(b, p.Name)
		b = AppendString(b, p.ContentType)
		b = AppendBytes(b, p.Body)
	}
	return b
}

// Unmarshal decodes b into m.
func (m *RenderResponse) Unmarshal(b []byte) error {
	var dd Decoder
	d := &dd
	d.Reset(b)
	d.Tag(TagRenderResponse)
	n := d.Count("parts", MaxMessageParts)
	m.Parts = nil
	if n > 0 {
		m.Parts = make([]MessagePart, n)
	}
	for i := range m.Parts {
		p := &m.Parts[i]
		p.Name = d.String("part.name", MaxNameBytes)
		p.ContentType = d.String("part.content_type", MaxNameBytes)
		p.Body = d.Bytes("part.body", MaxPartBytes)
	}
	return d.Finish()
}

// Message is implemented by every request and response type.
type Message interface {
	AppendTo(b []byte) []byte
	Unmarshal(b []byte) error
}
