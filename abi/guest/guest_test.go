package guest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
)

func testModule() *Module {
	return &Module{
		Name: "all",
		Codecs: []Codec{{
			Decl:   abi.CodecDecl{SchemaID: "s", WriteVersion: 2, ReadableVersions: []uint32{1, 2}},
			Encode: func(v []byte) ([]byte, error) { return append([]byte("p:"), v...), nil },
			Decode: func(ver uint32, p []byte) ([]byte, error) {
				if string(p) == "bad" {
					return nil, Errorf(abi.CodeCorrupt, "bad payload at v%d", ver)
				}
				if string(p) == "boom" {
					return nil, errors.New("plain failure")
				}
				return p, nil
			},
		}},
		Regions: []CacheRegion{{
			Decl: abi.RegionDecl{ID: "r", KeyVersion: 1, SoftTTLMs: 1, HardTTLMs: 2, MaxBytes: 10, Codec: "s"},
			Canonicalize: func(attrs []abi.Attr) ([]string, error) {
				var parts []string
				for _, a := range attrs {
					parts = append(parts, a.Value)
				}
				return parts, nil
			},
			Admit: func(r *abi.AdmitRequest) bool { return r.SizeBytes < 10 },
		}},
		Rate: &RatePolicies{
			Policies: []abi.RatePolicyDecl{{ID: "p", Revision: 1, Algorithm: abi.AlgGCRA, Limit: 1, WindowMs: 1, MaximumCost: 2, Dimensions: []string{"d"}}},
			Select: func(r *abi.RateSelectRequest) ([]abi.RateSelection, error) {
				switch r.Route {
				case "/over":
					return []abi.RateSelection{{PolicyID: "p", Dimensions: []string{"x"}, Cost: 3}}, nil
				case "/undeclared":
					return []abi.RateSelection{{PolicyID: "q", Dimensions: []string{"x"}, Cost: 1}}, nil
				}
				return []abi.RateSelection{{PolicyID: "p", Dimensions: []string{"x"}, Cost: 1}}, nil
			},
		},
		Renderer: &Renderer{
			Templates: []abi.TemplateDecl{{ID: "t", Version: 1, Locales: []string{"en"}, Channels: []string{"email"}}},
			Render: func(r *abi.RenderRequest) ([]abi.MessagePart, error) {
				return []abi.MessagePart{{Name: "subject", ContentType: "text/plain", Body: []byte("hi")}}, nil
			},
		},
	}
}

func handle(t *testing.T, d *Dispatcher, e abi.Export, req abi.Message, resp abi.Message) error {
	t.Helper()
	var in []byte
	if req != nil {
		in = req.AppendTo(nil)
	}
	body, err := abi.ParseFrame(d.Handle(e, in, nil))
	if err != nil {
		return err
	}
	if resp != nil {
		require.NoError(t, resp.Unmarshal(body))
	}
	return nil
}

func TestDispatcher(t *testing.T) {
	d, err := NewDispatcher(testModule())
	require.NoError(t, err)

	body, err := abi.ParseFrame(d.Handle(abi.ExportDescribe, nil, nil))
	require.NoError(t, err)
	desc, err := abi.ParseDescription(body)
	require.NoError(t, err)
	assert.Equal(t, []abi.Kind{abi.KindCodec, abi.KindCacheRegion, abi.KindRatePolicy, abi.KindRenderer}, desc.Kinds)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(body, &raw))

	var enc abi.CodecEncodeResponse
	require.NoError(t, handle(t, d, abi.ExportCodecEncode, &abi.CodecEncodeRequest{Schema: "s", Value: []byte("v")}, &enc))
	assert.Equal(t, abi.CodecEncodeResponse{Version: 2, Payload: []byte("p:v")}, enc)

	var dec abi.CodecDecodeResponse
	require.ErrorIs(t, handle(t, d, abi.ExportCodecDecode, &abi.CodecDecodeRequest{Schema: "s", StoredVersion: 3}, &dec), abi.CodeSchemaMismatch)
	err = handle(t, d, abi.ExportCodecDecode, &abi.CodecDecodeRequest{Schema: "s", StoredVersion: 1, Payload: []byte("bad")}, &dec)
	require.ErrorIs(t, err, abi.CodeCorrupt)
	assert.Contains(t, err.Error(), "bad payload at v1")
	require.ErrorIs(t, handle(t, d, abi.ExportCodecDecode, &abi.CodecDecodeRequest{Schema: "s", StoredVersion: 1, Payload: []byte("boom")}, &dec), abi.CodeInternal)
	require.ErrorIs(t, handle(t, d, abi.ExportCodecDecode, &abi.CodecDecodeRequest{Schema: "nope", StoredVersion: 1}, &dec), abi.CodeNotFound)
	// A request for another export's message is refused, not misread.
	require.ErrorIs(t, handle(t, d, abi.ExportCodecDecode, &abi.CodecEncodeRequest{Schema: "s"}, &dec), abi.CodeInvalidRequest)

	var can abi.CanonicalizeResponse
	require.NoError(t, handle(t, d, abi.ExportCacheCanonicalize, &abi.CanonicalizeRequest{Region: "r", Attrs: []abi.Attr{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}}}, &can))
	assert.Equal(t, []string{"1", "2"}, can.Parts)
	require.ErrorIs(t, handle(t, d, abi.ExportCacheCanonicalize, &abi.CanonicalizeRequest{Region: "r"}, &can), abi.CodeInternal, "zero parts")
	var adm abi.AdmitResponse
	require.NoError(t, handle(t, d, abi.ExportCacheAdmit, &abi.AdmitRequest{Region: "r", SizeBytes: 50}, &adm))
	assert.False(t, adm.Admit)

	var sel abi.RateSelectResponse
	require.NoError(t, handle(t, d, abi.ExportRateSelect, &abi.RateSelectRequest{Route: "/"}, &sel))
	assert.Len(t, sel.Selections, 1)
	require.ErrorIs(t, handle(t, d, abi.ExportRateSelect, &abi.RateSelectRequest{Route: "/over"}, &sel), abi.CodeInternal)
	require.ErrorIs(t, handle(t, d, abi.ExportRateSelect, &abi.RateSelectRequest{Route: "/undeclared"}, &sel), abi.CodeInternal)

	var ren abi.RenderResponse
	require.NoError(t, handle(t, d, abi.ExportRender, &abi.RenderRequest{Template: "t", Version: 1, Locale: "en", Channel: "email"}, &ren))
	require.ErrorIs(t, handle(t, d, abi.ExportRender, &abi.RenderRequest{Template: "t", Version: 1, Locale: "fr", Channel: "email"}, &ren), abi.CodeNotFound)

	require.ErrorIs(t, handle(t, d, abi.Export(99), nil, nil), abi.CodeUnsupported)
}

func TestUnimplementedKindsAndInvalidModules(t *testing.T) {
	d, err := NewDispatcher(&Module{Name: "codec-only", Codecs: testModule().Codecs})
	require.NoError(t, err)
	require.ErrorIs(t, handle(t, d, abi.ExportRateSelect, &abi.RateSelectRequest{}, nil), abi.CodeUnsupported)
	require.ErrorIs(t, handle(t, d, abi.ExportRender, &abi.RenderRequest{}, nil), abi.CodeUnsupported)

	_, err = NewDispatcher(&Module{Name: "Bad Name"})
	require.ErrorIs(t, err, abi.ErrInvalidDescription)
}
