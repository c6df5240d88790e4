package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

// jsonSchema is the codec of a schema whose stored versions 1..len(readers)
// are JSON: readers[v-1] parses and validates a version-v payload into the
// current form T, and the last one also reads encode's interchange value,
// which is the current stored form. A T that went through its reader
// writes the canonical payload (its members in declaration order, see
// write.go), so decode of what encode wrote returns it byte for byte.
//
// The last reader also reports whether its input is already that payload
// (same), as a payload encode wrote always is: then the input is the answer,
// returned rather than written again.
func jsonSchema[T jsonWriter](id string, readers ...func([]byte) (v T, same bool, err error)) guest.Codec {
	write := uint32(len(readers))
	readable := make([]uint32, len(readers))
	for i := range readable {
		readable[i] = uint32(i + 1)
	}
	return guest.Codec{
		Decl: abi.CodecDecl{SchemaID: id, WriteVersion: write, ReadableVersions: readable},
		Encode: func(value []byte) ([]byte, error) {
			v, same, err := readers[write-1](value)
			if err != nil {
				return nil, guest.Errorf(abi.CodeInvalidRequest, "value: %v", err)
			}
			return written(v, same, value), nil
		},
		Decode: func(version uint32, payload []byte) ([]byte, error) {
			if version < 1 || version > write {
				// The SDK answers an undeclared version before calling Decode.
				return nil, guest.Errorf(abi.CodeSchemaMismatch, "stored version %d", version)
			}
			v, same, err := readers[version-1](payload)
			if err != nil {
				return nil, guest.Errorf(abi.CodeCorrupt, "v%d payload: %v", version, err)
			}
			return written(v, same && version == write, payload), nil
		},
	}
}

// written is the canonical payload of v, read from text: text itself when
// it is that payload already (the SDK copies a codec's answer into its
// response frame before the input buffer is used again).
func written[T jsonWriter](v T, same bool, text []byte) []byte {
	if same {
		return text
	}
	return canonical(v)
}
