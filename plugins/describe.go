package plugins

import (
	"fmt"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins/strictjson"
)

// ParseDescription is how the host reads a guest's describe output (both
// flavours): at most abi.MaxDescribeBytes, decoded strictly by
// plugins/strictjson — exact, case-sensitive member names, no
// unknown or duplicate member, valid UTF-8 without lone surrogates, no null,
// nothing after the object — then checked by abi.Description.Validate.
// (abi.ParseDescription, the standard-library parse guests may use on their
// own output, is more lenient and is never applied to guest output here.)
// Errors match abi.ErrInvalidDescription, or abi.ErrUnsupportedMajor for a
// major the host does not speak (abi.ErrNewerMinor for a newer minor).
func ParseDescription(b []byte) (*abi.Description, error) {
	if len(b) > abi.MaxDescribeBytes {
		return nil, fmt.Errorf("%w: %d bytes exceed %d", abi.ErrInvalidDescription, len(b), abi.MaxDescribeBytes)
	}
	var d abi.Description
	if err := strictjson.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%w: %w", abi.ErrInvalidDescription, err)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}
