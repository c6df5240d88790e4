package vectors

import (
	"encoding/json"
	"fmt"

	"github.com/caphost/caphost/abi"
)

// The JSON shapes below mirror the ABI messages field for field, with the
// field names of abi/ABI.md §5; converting is all this file does.

type fileJSON struct {
	Format  string       `json:"format"`
	Module  string       `json:"module"`
	Vectors []vectorJSON `json:"vectors"`
}

type vectorJSON struct {
	Name     string          `json:"name"`
	Export   string          `json:"export"`
	Request  json.RawMessage `json:"request"`
	Response json.RawMessage `json:"response,omitempty"`
}

type responseJSON struct {
	Status string          `json:"status"`
	Detail string          `json:"detail,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
}

type attrJSON struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type codecEncodeRequestJSON struct {
	Schema string `json:"schema"`
	Value  Bytes  `json:"value"`
}

type codecEncodeResponseJSON struct {
	Version uint32 `json:"version"`
	Payload Bytes  `json:"payload"`
}

type codecDecodeRequestJSON struct {
	Schema        string `json:"schema"`
	StoredVersion uint32 `json:"stored_version"`
	Payload       Bytes  `json:"payload"`
}

type codecDecodeResponseJSON struct {
	Value Bytes `json:"value"`
}

type canonicalizeRequestJSON struct {
	Region string     `json:"region"`
	Attrs  []attrJSON `json:"attrs,omitempty"`
}

type canonicalizeResponseJSON struct {
	Parts []string `json:"parts"`
}

type admitRequestJSON struct {
	Region        string `json:"region"`
	SizeBytes     uint64 `json:"size_bytes"`
	Class         string `json:"class"`
	CostHintUS    uint64 `json:"cost_hint_us"`
	LoadLatencyUS uint64 `json:"load_latency_us"`
}

type admitResponseJSON struct {
	Admit bool `json:"admit"`
}

type rateSelectRequestJSON struct {
	Route         string     `json:"route"`
	Method        string     `json:"method"`
	PrincipalTier string     `json:"principal_tier,omitempty"`
	APIKeyPlan    string     `json:"api_key_plan,omitempty"`
	ClientIPClass string     `json:"client_ip_class,omitempty"`
	Attrs         []attrJSON `json:"attrs,omitempty"`
}

type rateSelectionJSON struct {
	PolicyID   string   `json:"policy_id"`
	Dimensions []string `json:"dimensions"`
	Cost       uint32   `json:"cost"`
}

type rateSelectResponseJSON struct {
	Selections []rateSelectionJSON `json:"selections"`
}

type renderRequestJSON struct {
	Template     string     `json:"template"`
	Version      uint32     `json:"version"`
	Locale       string     `json:"locale"`
	Channel      string     `json:"channel"`
	Params       []attrJSON `json:"params,omitempty"`
	NowUnixMilli int64      `json:"now_unix_milli"`
}

type messagePartJSON struct {
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Body        Bytes  `json:"body"`
}

type renderResponseJSON struct {
	Parts []messagePartJSON `json:"parts"`
}

func attrsFromJSON(as []attrJSON) []abi.Attr {
	if len(as) == 0 {
		return nil
	}
	out := make([]abi.Attr, len(as))
	for i, a := range as {
		out[i] = abi.Attr{Name: a.Name, Value: a.Value}
	}
	return out
}

func attrsToJSON(as []abi.Attr) []attrJSON {
	if len(as) == 0 {
		return nil
	}
	out := make([]attrJSON, len(as))
	for i, a := range as {
		out[i] = attrJSON{Name: a.Name, Value: a.Value}
	}
	return out
}

// nilIfEmpty keeps decoded messages equal to what abi's decoders produce
// (nil for an empty list or byte string), so tests can compare them.
func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func decodeRequest(e abi.Export, data json.RawMessage) (abi.Message, error) {
	switch e {
	case abi.ExportCodecEncode:
		var j codecEncodeRequestJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		return &abi.CodecEncodeRequest{Schema: j.Schema, Value: nilIfEmpty(j.Value)}, nil
	case abi.ExportCodecDecode:
		var j codecDecodeRequestJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		return &abi.CodecDecodeRequest{Schema: j.Schema, StoredVersion: j.StoredVersion, Payload: nilIfEmpty(j.Payload)}, nil
	case abi.ExportCacheCanonicalize:
		var j canonicalizeRequestJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		return &abi.CanonicalizeRequest{Region: j.Region, Attrs: attrsFromJSON(j.Attrs)}, nil
	case abi.ExportCacheAdmit:
		var j admitRequestJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		return &abi.AdmitRequest{Region: j.Region, SizeBytes: j.SizeBytes, Class: j.Class, CostHintUS: j.CostHintUS, LoadLatency: j.LoadLatencyUS}, nil
	case abi.ExportRateSelect:
		var j rateSelectRequestJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		return &abi.RateSelectRequest{Route: j.Route, Method: j.Method, PrincipalTier: j.PrincipalTier,
			APIKeyPlan: j.APIKeyPlan, ClientIPClass: j.ClientIPClass, Attrs: attrsFromJSON(j.Attrs)}, nil
	case abi.ExportRender:
		var j renderRequestJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		return &abi.RenderRequest{Template: j.Template, Version: j.Version, Locale: j.Locale, Channel: j.Channel,
			Params: attrsFromJSON(j.Params), NowUnixMilli: j.NowUnixMilli}, nil
	}
	return nil, fmt.Errorf("export %s has no request", e)
}

func decodeResponse(e abi.Export, data json.RawMessage) (abi.Message, error) {
	switch e {
	case abi.ExportCodecEncode:
		var j codecEncodeResponseJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		return &abi.CodecEncodeResponse{Version: j.Version, Payload: nilIfEmpty(j.Payload)}, nil
	case abi.ExportCodecDecode:
		var j codecDecodeResponseJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		return &abi.CodecDecodeResponse{Value: nilIfEmpty(j.Value)}, nil
	case abi.ExportCacheCanonicalize:
		var j canonicalizeResponseJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		return &abi.CanonicalizeResponse{Parts: nilIfEmpty(j.Parts)}, nil
	case abi.ExportCacheAdmit:
		var j admitResponseJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		return &abi.AdmitResponse{Admit: j.Admit}, nil
	case abi.ExportRateSelect:
		var j rateSelectResponseJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		r := &abi.RateSelectResponse{}
		for _, s := range j.Selections {
			r.Selections = append(r.Selections, abi.RateSelection{PolicyID: s.PolicyID, Dimensions: nilIfEmpty(s.Dimensions), Cost: s.Cost})
		}
		return r, nil
	case abi.ExportRender:
		var j renderResponseJSON
		if err := strict(data, &j); err != nil {
			return nil, err
		}
		r := &abi.RenderResponse{}
		for _, p := range j.Parts {
			r.Parts = append(r.Parts, abi.MessagePart{Name: p.Name, ContentType: p.ContentType, Body: nilIfEmpty(p.Body)})
		}
		return r, nil
	}
	return nil, fmt.Errorf("export %s has no response", e)
}

// encodeMessage is the inverse of decodeRequest and decodeResponse.
func encodeMessage(m abi.Message) (json.RawMessage, error) {
	var j any
	switch m := m.(type) {
	case *abi.CodecEncodeRequest:
		j = codecEncodeRequestJSON{Schema: m.Schema, Value: m.Value}
	case *abi.CodecEncodeResponse:
		j = codecEncodeResponseJSON{Version: m.Version, Payload: m.Payload}
	case *abi.CodecDecodeRequest:
		j = codecDecodeRequestJSON{Schema: m.Schema, StoredVersion: m.StoredVersion, Payload: m.Payload}
	case *abi.CodecDecodeResponse:
		j = codecDecodeResponseJSON{Value: m.Value}
	case *abi.CanonicalizeRequest:
		j = canonicalizeRequestJSON{Region: m.Region, Attrs: attrsToJSON(m.Attrs)}
	case *abi.CanonicalizeResponse:
		j = canonicalizeResponseJSON{Parts: m.Parts}
	case *abi.AdmitRequest:
		j = admitRequestJSON{Region: m.Region, SizeBytes: m.SizeBytes, Class: m.Class, CostHintUS: m.CostHintUS, LoadLatencyUS: m.LoadLatency}
	case *abi.AdmitResponse:
		j = admitResponseJSON{Admit: m.Admit}
	case *abi.RateSelectRequest:
		j = rateSelectRequestJSON{Route: m.Route, Method: m.Method, PrincipalTier: m.PrincipalTier,
			APIKeyPlan: m.APIKeyPlan, ClientIPClass: m.ClientIPClass, Attrs: attrsToJSON(m.Attrs)}
	case *abi.RateSelectResponse:
		r := rateSelectResponseJSON{Selections: []rateSelectionJSON{}}
		for _, s := range m.Selections {
			dims := s.Dimensions
			if dims == nil {
				dims = []string{}
			}
			r.Selections = append(r.Selections, rateSelectionJSON{PolicyID: s.PolicyID, Dimensions: dims, Cost: s.Cost})
		}
		j = r
	case *abi.RenderRequest:
		j = renderRequestJSON{Template: m.Template, Version: m.Version, Locale: m.Locale, Channel: m.Channel,
			Params: attrsToJSON(m.Params), NowUnixMilli: m.NowUnixMilli}
	case *abi.RenderResponse:
		r := renderResponseJSON{Parts: []messagePartJSON{}}
		for _, p := range m.Parts {
			r.Parts = append(r.Parts, messagePartJSON{Name: p.Name, ContentType: p.ContentType, Body: p.Body})
		}
		j = r
	default:
		return nil, fmt.Errorf("unsupported message %T", m)
	}
	return marshal(j)
}
