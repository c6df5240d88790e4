package config

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caphost/caphost/policy"
)

// decoder walks the koanf map, collecting problems instead of stopping at
// the first one. Each helper reports at most one problem for its value and
// returns ok=false when the value is absent or unusable.
type decoder struct {
	ps     policy.Problems
	lookup func(string) (string, bool)
	base   string // directory relative file references resolve against
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// object returns v as a map. Absent (nil) gives ok=false without a problem.
func (d *decoder) object(path string, v any) (map[string]any, bool) {
	if v == nil {
		return nil, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		d.ps.Add(path, policy.RuleType, "must be a mapping, got %s", kind(v))
		return nil, false
	}
	return m, true
}

// known reports every key of m outside allowed as an unknown key.
func (d *decoder) known(path string, m map[string]any, allowed ...string) {
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
		d.ps.Add(join(path, k), policy.RuleUnknownKey, "unknown key (known: %s)", strings.Join(allowed, ", "))
	}
}

func (d *decoder) str(path string, v any) (string, bool) {
	if v == nil {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		d.ps.Add(path, policy.RuleType, "must be a string, got %s", kind(v))
		return "", false
	}
	return s, true
}

func (d *decoder) integer(path string, v any) (int, bool) {
	switch n := v.(type) {
	case nil:
		return 0, false
	case int:
		return n, true
	case int64:
		if n >= math.MinInt32 && n <= math.MaxInt32 {
			return int(n), true
		}
	case uint64:
		if n <= math.MaxInt32 {
			return int(n), true
		}
	case float64:
		if n == math.Trunc(n) && n >= math.MinInt32 && n <= math.MaxInt32 {
			return int(n), true
		}
	case string: // environment overrides are strings
		if i, err := strconv.ParseInt(strings.TrimSpace(n), 10, 32); err == nil {
			return int(i), true
		}
	}
	d.ps.Add(path, policy.RuleType, "must be an integer (32-bit), got %s", kind(v))
	return 0, false
}

func (d *decoder) boolean(path string, v any) (bool, bool) {
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
	d.ps.Add(path, policy.RuleType, "must be true or false, got %s", kind(v))
	return false, false
}

// duration accepts Go duration strings ("250ms", "1m30s"). Bare numbers are
// rejected: the unit would be a guess.
func (d *decoder) duration(path string, v any) (time.Duration, bool) {
	if v == nil {
		return 0, false
	}
	if s, ok := v.(string); ok {
		if dur, err := time.ParseDuration(strings.TrimSpace(s)); err == nil {
			return dur, true
		}
	}
	d.ps.Add(path, policy.RuleType, "must be a duration with a unit such as 250ms or 5s, got %s", kind(v))
	return 0, false
}

// strings accepts a YAML list of strings or, from an environment override,
// one comma-separated string.
func (d *decoder) strList(path string, v any) ([]string, bool) {
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
				d.ps.Add(fmt.Sprintf("%s.%d", path, i), policy.RuleType, "must be a string, got %s", kind(e))
				okAll = false
				continue
			}
			out = append(out, s)
		}
		return out, okAll
	}
	d.ps.Add(path, policy.RuleType, "must be a list of strings, got %s", kind(v))
	return nil, false
}

// kind names a value's YAML type without echoing the value.
func kind(v any) string {
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
