package render

import (
	"errors"
	"fmt"

	"github.com/caphost/caphost/abi"
)

// Errors of the render stage; match them with errors.Is. None of them, nor
// any error this package returns, carries a parameter value, a rendered
// byte or a guest's free text: only declared ids, numbers and closed-set
// rule names, so an error can be logged as it is.
var (
	// ErrInvalidRequest: the request is malformed before any lookup
	// (template id, version 0, locale syntax, unknown channel name).
	ErrInvalidRequest = errors.New("render: invalid request")
	// ErrTemplateNotFound: no renderer module declares the template.
	ErrTemplateNotFound = errors.New("render: template not found")
	// ErrVersionNotFound: the template is declared at another version.
	ErrVersionNotFound = errors.New("render: template version not found")
	// ErrLocaleNotFound: neither the locale nor any fallback is declared.
	ErrLocaleNotFound = errors.New("render: locale not found")
	// ErrChannelNotFound: the template is not declared for the channel.
	ErrChannelNotFound = errors.New("render: template not declared for channel")
	// ErrInvalidParams: the parameters do not match the declared schema
	// or the host's bounds (a *ParamError).
	ErrInvalidParams = errors.New("render: invalid parameters")
	// ErrParamsRefused: the guest answered invalid-request: the values
	// have the declared names but not a shape the template accepts.
	ErrParamsRefused = errors.New("render: parameters refused by the renderer")
	// ErrRenderFailed: the guest trapped, ran out of time or memory, was
	// unavailable, or answered a status other than ok/invalid-request (a
	// *FailureError). Nothing was rendered.
	ErrRenderFailed = errors.New("render: renderer failed")
	// ErrInvalidOutput: the guest answered, and the answer broke a host
	// rule for the channel (an *OutputError). Nothing was rendered.
	ErrInvalidOutput = errors.New("render: renderer output rejected")
	// ErrCorruptResult: stored bytes are not a valid encoded Result.
	ErrCorruptResult = errors.New("render: corrupt encoded result")
	// ErrInvalidConfig: Options out of range.
	ErrInvalidConfig = errors.New("render: invalid configuration")
)

// ParamRule names the parameter rule a request broke (a closed set).
type ParamRule string

// Parameter rules.
const (
	ParamUnknown     ParamRule = "unknown"      // a name the template does not declare
	ParamMissing     ParamRule = "missing"      // a declared name without a value
	ParamDuplicate   ParamRule = "duplicate"    // a name given twice
	ParamInvalidUTF8 ParamRule = "invalid-utf8" // a name or value that is not UTF-8
	ParamNUL         ParamRule = "nul"          // a value containing U+0000
	ParamTooLong     ParamRule = "too-long"     // a value over its spec's max_bytes or Limits.ParamBytes
	ParamWrongType   ParamRule = "type"         // a value not in its spec's type's canonical form
	ParamsTooLong    ParamRule = "total-too-long"
)

// ParamError is ErrInvalidParams with the rule and, when the template
// declares it, the parameter's name. An undeclared name is shown only when
// it is an id (never free text a caller could have put a value in).
type ParamError struct {
	Template string
	Param    string
	Rule     ParamRule
}

func (e *ParamError) Error() string {
	if e.Param == "" {
		return fmt.Sprintf("render: template %s: parameters: %s", e.Template, e.Rule)
	}
	return fmt.Sprintf("render: template %s: parameter %s: %s", e.Template, e.Param, e.Rule)
}

// Is matches ErrInvalidParams.
func (e *ParamError) Is(target error) bool { return target == ErrInvalidParams }

// shownName is name when it is safe to print, else "".
func shownName(name string) string {
	if abi.ValidID(name) {
		return name
	}
	return ""
}

// OutputRule names the host rule a guest's output broke (a closed set; it
// labels the rejection metric).
type OutputRule string

// Output rules.
const (
	RuleParts          OutputRule = "parts"           // wrong number, names, order or content types of parts
	RuleEmptyPart      OutputRule = "empty-part"      // a part without bytes
	RulePartTooLarge   OutputRule = "part-too-large"  // a part over Limits.PartBytes
	RuleTotalTooLarge  OutputRule = "total-too-large" // all parts over Limits.TotalBytes
	RuleSubjectTooLong OutputRule = "subject-too-long"
	RuleInvalidUTF8    OutputRule = "invalid-utf8"
	RuleLineBreak      OutputRule = "line-break-in-header" // CR, LF, NEL, U+2028/9 in a header part
	RuleControl        OutputRule = "control-char"         // C0 (but TAB, LF in bodies), DEL, C1
	RuleBidi           OutputRule = "bidi-control"         // U+202A–U+202E, U+2066–U+2069
	RuleUnescaped      OutputRule = "unescaped-param"      // a parameter's markup shown raw
	RuleCSVMalformed   OutputRule = "csv-malformed"
	RuleCSVFormula     OutputRule = "csv-formula" // a field starting = + - @ TAB CR
)

// outputRules lists every OutputRule (metric label values).
func outputRules() []OutputRule {
	return []OutputRule{RuleParts, RuleEmptyPart, RulePartTooLarge, RuleTotalTooLarge, RuleSubjectTooLong,
		RuleInvalidUTF8, RuleLineBreak, RuleControl, RuleBidi, RuleUnescaped, RuleCSVMalformed, RuleCSVFormula}
}

// OutputError is ErrInvalidOutput: which rule, in which part (the part's
// index, and its name when the channel defines it), of which module.
type OutputError struct {
	Module   string
	Template string
	Channel  Channel
	Part     int    // index of the offending part; -1 for the whole answer
	PartName string // the channel's name for the part, "" if undefined
	Rule     OutputRule
}

func (e *OutputError) Error() string {
	where := "output"
	if e.Part >= 0 {
		where = fmt.Sprintf("part %d", e.Part)
		if e.PartName != "" {
			where += " (" + e.PartName + ")"
		}
	}
	who := "render: "
	if e.Module != "" {
		who += "module " + e.Module + " "
	}
	if e.Template != "" {
		who += "template " + e.Template + " "
	}
	return fmt.Sprintf("%schannel %s: %s: %s", who, e.Channel, where, e.Rule)
}

// Is matches ErrInvalidOutput.
func (e *OutputError) Is(target error) bool { return target == ErrInvalidOutput }

// FailureError is ErrRenderFailed. Class is the plugins failure class
// ("trap", "deadline", ...) or the guest status ("internal", "not-found");
// Unwrap returns the cause so errors.Is(err, plugins.ClassDeadline) works,
// but Error never prints the cause, whose detail is the guest's own text.
type FailureError struct {
	Module   string
	Template string
	Class    string
	Err      error
}

func (e *FailureError) Error() string {
	return fmt.Sprintf("render: module %s template %s: renderer failed: %s", e.Module, e.Template, e.Class)
}

// Is matches ErrRenderFailed.
func (e *FailureError) Is(target error) bool { return target == ErrRenderFailed }

// Unwrap returns the cause.
func (e *FailureError) Unwrap() error { return e.Err }

// refusedError is ErrParamsRefused; it hides the guest's detail text.
type refusedError struct {
	template string
	err      error
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("render: template %s: %v", e.template, ErrParamsRefused)
}
func (e *refusedError) Is(target error) bool { return target == ErrParamsRefused }
func (e *refusedError) Unwrap() error        { return e.err }
