package render

import (
	"fmt"

	"github.com/caphost/caphost/abi"
)

// Hard caps: no configuration raises a limit above them.
const (
	// HardMaxParamBytes is the ABI's bound on an attribute value.
	HardMaxParamBytes = abi.MaxValueBytes
	// HardMaxParamsBytes bounds all parameter values of one request.
	HardMaxParamsBytes = 32 << 10
	// HardMaxPartBytes is the ABI's bound on one rendered part.
	HardMaxPartBytes = abi.MaxPartBytes
	// HardMaxTotalBytes bounds all parts of one message, so a frozen
	// plan fits comfortably in one stream entry.
	HardMaxTotalBytes = 512 << 10
	// HardMaxSubjectBytes is RFC 5322's line limit (998 octets).
	HardMaxSubjectBytes = 998
)

// Limits bound what one render takes and gives. A zero field takes its
// default; a value above its hard cap is a configuration error.
type Limits struct {
	// ParamBytes bounds one parameter value (default 1 KiB, the cap).
	ParamBytes int
	// ParamsBytes bounds all values of one request (default 8 KiB).
	ParamsBytes int
	// PartBytes bounds one rendered part (default 64 KiB).
	PartBytes int
	// TotalBytes bounds all parts (default 128 KiB).
	TotalBytes int
	// SubjectBytes bounds a header part such as an email subject
	// (default 250 bytes).
	SubjectBytes int
}

// DefaultLimits are the limits of a zero Limits.
func DefaultLimits() Limits {
	return Limits{ParamBytes: HardMaxParamBytes, ParamsBytes: 8 << 10, PartBytes: 64 << 10, TotalBytes: 128 << 10, SubjectBytes: 250}
}

// HardLimits are the caps; a stored Result is checked against them.
func HardLimits() Limits {
	return Limits{ParamBytes: HardMaxParamBytes, ParamsBytes: HardMaxParamsBytes, PartBytes: HardMaxPartBytes,
		TotalBytes: HardMaxTotalBytes, SubjectBytes: HardMaxSubjectBytes}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, def *int }{{&l.ParamBytes, &d.ParamBytes}, {&l.ParamsBytes, &d.ParamsBytes},
		{&l.PartBytes, &d.PartBytes}, {&l.TotalBytes, &d.TotalBytes}, {&l.SubjectBytes, &d.SubjectBytes}} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	return l
}

// Validate reports every field that is negative or above its cap.
func (l Limits) Validate() error {
	h := HardLimits()
	var bad []string
	for _, f := range []struct {
		name   string
		v, cap int
	}{{"param-bytes", l.ParamBytes, h.ParamBytes}, {"params-bytes", l.ParamsBytes, h.ParamsBytes},
		{"part-bytes", l.PartBytes, h.PartBytes}, {"total-bytes", l.TotalBytes, h.TotalBytes},
		{"subject-bytes", l.SubjectBytes, h.SubjectBytes}} {
		if f.v < 0 || f.v > f.cap {
			bad = append(bad, fmt.Sprintf("%s %d outside 0..%d", f.name, f.v, f.cap))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: limits: %v", ErrInvalidConfig, bad)
	}
	return nil
}
