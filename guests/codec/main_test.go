package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func roundTrip(t *testing.T, d *guest.Dispatcher, e abi.Export, req abi.Message, resp abi.Message) error {
	t.Helper()
	body, err := abi.ParseFrame(d.Handle(e, req.AppendTo(nil), nil))
	if err != nil {
		return err
	}
	require.NoError(t, resp.Unmarshal(body))
	return nil
}

func TestCodec(t *testing.T) {
	d, err := guest.NewDispatcher(Module())
	require.NoError(t, err)

	var enc abi.CodecEncodeResponse
	require.NoError(t, roundTrip(t, d, abi.ExportCodecEncode,
		&abi.CodecEncodeRequest{Schema: "user-profile", Value: []byte(`{"email":"a@x","id":"7","locale":"de","name":"Ada"}`)}, &enc))
	assert.Equal(t, uint32(2), enc.Version)
	assert.JSONEq(t, `{"id":"7","name":"Ada","email":"a@x","locale":"de"}`, string(enc.Payload))

	var dec abi.CodecDecodeResponse
	require.NoError(t, roundTrip(t, d, abi.ExportCodecDecode,
		&abi.CodecDecodeRequest{Schema: "user-profile", StoredVersion: 1, Payload: []byte(`{"id":"7","full_name":"Ada L","email":"a@x"}`)}, &dec))
	assert.Equal(t, `{"id":"7","name":"Ada L","email":"a@x","locale":"en"}`, string(dec.Value))

	err = roundTrip(t, d, abi.ExportCodecDecode, &abi.CodecDecodeRequest{Schema: "user-profile", StoredVersion: 3, Payload: []byte(`{}`)}, &dec)
	require.ErrorIs(t, err, abi.CodeSchemaMismatch)
	err = roundTrip(t, d, abi.ExportCodecDecode, &abi.CodecDecodeRequest{Schema: "user-profile", StoredVersion: 2, Payload: []byte(`{"id":`)}, &dec)
	require.ErrorIs(t, err, abi.CodeCorrupt)
	err = roundTrip(t, d, abi.ExportCodecDecode, &abi.CodecDecodeRequest{Schema: "user-profile", StoredVersion: 2, Payload: []byte(`{"id":"1","name":"n","email":"e","locale":"en","x":1}`)}, &dec)
	require.ErrorIs(t, err, abi.CodeCorrupt)
	err = roundTrip(t, d, abi.ExportCodecEncode, &abi.CodecEncodeRequest{Schema: "user-profile", Value: []byte(`{"id":"7"}`)}, &enc)
	require.ErrorIs(t, err, abi.CodeInvalidRequest)
	err = roundTrip(t, d, abi.ExportCodecEncode, &abi.CodecEncodeRequest{Schema: "nope", Value: []byte(`{}`)}, &enc)
	require.ErrorIs(t, err, abi.CodeNotFound)
}
