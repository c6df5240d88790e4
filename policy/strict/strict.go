// Package strict reads untyped configuration values — the maps koanf and
// YAML produce — into typed values, collecting every problem into a
// policy.Problems instead of stopping at the first. host/config (the whole
// file) and each capability's own block (host/ratelimit, …) decode through
// this one reader, so a value is accepted or refused, and reported, the same
// way everywhere. Messages name the value's type, never the value: a
// misplaced secret must not be echoed.
package strict

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caphost/caphost/policy"
)

// Reader collects problems while reading values. Each method reports at most
// one problem for its value and returns ok=false when the value is absent
// (nil, no problem) or unusable (a problem).
type Reader struct {
	policy.Problems
}

// Join appends a field name to a dotted configuration path.
func Join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// maxKeyEcho bounds an unknown key echoed into a problem path.
const maxKeyEcho = 48

// Object returns v as a map.
func (r *Reader) Object(path string, v any) (map[string]any, bool) {
	switch m := v.(type) {
	case nil:
		return nil, false
	case map[string]any:
		return m, true
	}
	r.Add(path, policy.RuleType, "must be a mapping, got %s", Kind(v))
	return nil, false
}

// Known reports every key of m outside allowed as an unknown key, sorted.
func (r *Reader) Known(path string, m map[string]any, allowed ...string) {
	var unknown []string
	for k := range m {
		found := false
		for _, a := range allowed {
			found = found || a == k
		}
		if !found {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		if len(k) > maxKeyEcho {
			k = k[:maxKeyEcho] + "..."
		}
		r.Add(Join(path, k), policy.RuleUnknownKey, "unknown key (known: %s)", strings.Join(allowed, ", "))
	}
}

// Str returns v as a string.
func (r *Reader) Str(path string, v any) (string, bool) {
	switch s := v.(type) {
	case nil:
		return "", false
	case string:
		return s, true
	}
	r.Add(path, policy.RuleType, "must be a string, got %s", Kind(v))
	return "", false
}

// Secret returns v as resolved secret material. host/config resolves every
// secret reference (a string starting with secret://) in a capability block
// before the capability decodes it, so a secret field holds a policy.Secret;
// any other string there is a literal secret and is refused without being
// echoed.
func (r *Reader) Secret(path string, v any) (policy.Secret, bool) {
	switch s := v.(type) {
	case nil:
		return policy.Secret{}, false
	case policy.Secret:
		return s, true
	case string:
		r.Add(path, policy.RuleSecretLiteral, "literal secrets are not accepted; use secret://env/NAME or secret://file/PATH")
		return policy.Secret{}, false
	}
	r.Add(path, policy.RuleType, "must be a secret reference, got %s", Kind(v))
	return policy.Secret{}, false
}

// Int returns v as a 32-bit integer: YAML integers, integral floats and
// decimal strings (environment overrides arrive as strings).
func (r *Reader) Int(path string, v any) (int, bool) {
	if v == nil {
		return 0, false
	}
	if n, ok := integer(v); ok && n >= math.MinInt32 && n <= math.MaxInt32 {
		return int(n), true
	}
	r.Add(path, policy.RuleType, "must be an integer (32-bit), got %s", Kind(v))
	return 0, false
}

// Int64In returns v as an integer within [lo, hi].
func (r *Reader) Int64In(path string, v any, lo, hi int64) (int64, bool) {
	if v == nil {
		return 0, false
	}
	n, ok := integer(v)
	if !ok {
		r.Add(path, policy.RuleType, "must be an integer, got %s", Kind(v))
		return 0, false
	}
	if n < lo || n > hi {
		r.Add(path, policy.RuleType, "must be within %d..%d", lo, hi)
		return 0, false
	}
	return n, true
}

func integer(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), true
		}
	case float64:
		if x == math.Trunc(x) && x >= -(1<<53) && x <= 1<<53 {
			return int64(x), true
		}
	case string:
		if n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64); err == nil {
			return n, true
		}
	}
	return 0, false
}

// Float returns v as a finite number.
func (r *Reader) Float(path string, v any) (float64, bool) {
	switch x := v.(type) {
	case nil:
		return 0, false
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			return x, true
		}
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, true
		}
	}
	r.Add(path, policy.RuleType, "must be a number, got %s", Kind(v))
	return 0, false
}

// Bool returns v as a boolean ("true"/"false" strings accepted).
func (r *Reader) Bool(path string, v any) (bool, bool) {
	switch b := v.(type) {
	case nil:
		return false, false
	case bool:
		return b, true
	case string:
		switch strings.ToLower(strings.TrimSpace(b)) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	r.Add(path, policy.RuleType, "must be true or false, got %s", Kind(v))
	return false, false
}

// Duration accepts Go duration strings ("250ms", "1m30s"). Bare numbers are
// refused: the unit would be a guess.
func (r *Reader) Duration(path string, v any) (time.Duration, bool) {
	if v == nil {
		return 0, false
	}
	if s, ok := v.(string); ok {
		if dur, err := time.ParseDuration(strings.TrimSpace(s)); err == nil {
			return dur, true
		}
	}
	r.Add(path, policy.RuleType, "must be a duration with a unit such as 250ms or 5s, got %s", Kind(v))
	return 0, false
}

// StrList accepts a list of strings or, from an environment override, one
// comma-separated string. Every non-string element is reported.
func (r *Reader) StrList(path string, v any) ([]string, bool) {
	switch l := v.(type) {
	case nil:
		return nil, false
	case string:
		var out []string
		for _, s := range strings.Split(l, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out, true
	case []any:
		out := make([]string, 0, len(l))
		okAll := true
		for i, e := range l {
			s, ok := e.(string)
			if !ok {
				r.Add(fmt.Sprintf("%s.%d", path, i), policy.RuleType, "must be a string, got %s", Kind(e))
				okAll = false
				continue
			}
			out = append(out, s)
		}
		return out, okAll
	}
	r.Add(path, policy.RuleType, "must be a list of strings, got %s", Kind(v))
	return nil, false
}

// Kind names a value's YAML type without echoing the value.
func Kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int, int64, uint64:
		return "an integer"
	case float64:
		return "a number"
	}
	return "an unsupported value"
}
