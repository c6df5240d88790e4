package main

import (
	"encoding/json"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

// jsonSchema is the codec of a schema whose stored versions 1..len(readers)
// are JSON: readers[v-1] parses and validates a version-v payload into the
// current form T, and the last one also reads encode's interchange value,
// which is the current stored form. A T that went through its reader
// marshals to the canonical payload (encoding/json writes struct fields in
// declaration order), so decode of what encode wrote returns it byte for
// byte.
func jsonSchema[T any](id string, readers ...func([]byte) (T, error)) guest.Codec {
	write := uint32(len(readers))
	readable := make([]uint32, len(readers))
	for i := range readable {
		readable[i] = uint32(i + 1)
	}
	return guest.Codec{
		Decl: abi.CodecDecl{SchemaID: id, WriteVersion: write, ReadableVersions: readable},
		Encode: func(value []byte) ([]byte, error) {
			v, err := readers[write-1](value)
			if err != nil {
				return nil, guest.Errorf(abi.CodeInvalidRequest, "value: %v", err)
			}
			return canonical(v), nil
		},
		Decode: func(version uint32, payload []byte) ([]byte, error) {
			if version < 1 || version > write {
				// The SDK answers an undeclared version before calling Decode.
				return nil, guest.Errorf(abi.CodeSchemaMismatch, "stored version %d", version)
			}
			v, err := readers[version-1](payload)
			if err != nil {
				return nil, guest.Errorf(abi.CodeCorrupt, "v%d payload: %v", version, err)
			}
			return canonical(v), nil
		},
	}
}

// canonical marshals a validated value; the schemas' types (strings,
// integers, string slices) cannot fail to marshal.
func canonical(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
