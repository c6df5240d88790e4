package render

import (
	"errors"
	"fmt"
	"slices"

	"github.com/caphost/caphost/abi"
)

// ErrUnservableTemplate is matched by CheckTemplates' errors.
var ErrUnservableTemplate = errors.New("render: template the host cannot serve")

// CheckTemplates reports, all together, the templates of a renderer
// module's description that the host could never render: a channel the
// host has no output rules for, a locale that is not a language tag, or a
// param_specs bound above the configured Limits.ParamBytes (every value
// would fit the spec and still be refused). The host runs it on a module
// before it serves (and on every swap candidate), so such a module is
// refused whole instead of failing each render of it.
func CheckTemplates(d *abi.Description, lim Limits) error {
	lim = lim.withDefaults()
	var errs []error
	bad := func(t *abi.TemplateDecl, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: module %s template %s v%d: "+format,
			append([]any{ErrUnservableTemplate, d.Module, t.ID, t.Version}, args...)...))
	}
	for i := range d.Templates {
		t := &d.Templates[i]
		for _, ch := range t.Channels {
			if !Channel(ch).Valid() {
				bad(t, "channel %q has no host output rules (have %v)", shownToken(ch), Channels())
			}
		}
		for _, loc := range t.Locales {
			if !ValidLocale(loc) {
				bad(t, "locale %q is not a language tag", shownToken(loc))
			}
		}
		for _, ps := range t.ParamSpecs {
			if int(ps.MaxBytes) > lim.ParamBytes {
				bad(t, "parameter %s: max_bytes %d above the host's %d", ps.Name, ps.MaxBytes, lim.ParamBytes)
			}
		}
		if slices.ContainsFunc(t.Params, func(p string) bool { return !abi.ValidID(p) }) {
			bad(t, "a parameter name is not an id")
		}
	}
	return errors.Join(errs...)
}

// shownToken is s when it is a short token of letters, digits and
// "-_." (safe to print, unable to hold an address), else "".
func shownToken(s string) string {
	if len(s) == 0 || len(s) > abi.MaxIDBytes {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return ""
		}
	}
	return s
}
