package commands

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// KeyKind is the shape of a key specification.
type KeyKind uint8

// The closed set of key specification kinds.
const (
	// KeysNone: the command takes no keys.
	KeysNone KeyKind = iota
	// KeysRange: keys at First, First+Step, ... up to Last (Last < 0 counts
	// from the end: -1 is the last argument), like Redis' legacy key spec.
	KeysRange
	// KeysNumkeys: args[Index] is a key count N, keys are the N arguments
	// after it (EVALSHA, FCALL, FCALL_RO).
	KeysNumkeys
	// KeysStreams: the keys are the first half of the arguments after the
	// STREAMS token (XREAD, XREADGROUP); options before it are parsed
	// exactly, never guessed.
	KeysStreams
)

// KeySpec locates key (or channel) arguments. Its textual form in
// commands.yaml is "none", "<first> <last> <step>", "numkeys <index>" or
// "streams".
type KeySpec struct {
	Kind  KeyKind
	First int // KeysRange
	Last  int // KeysRange; negative counts from the end
	Step  int // KeysRange
	Index int // KeysNumkeys
}

// String renders the spec in its commands.yaml form.
func (k KeySpec) String() string {
	switch k.Kind {
	case KeysRange:
		return fmt.Sprintf("%d %d %d", k.First, k.Last, k.Step)
	case KeysNumkeys:
		return fmt.Sprintf("numkeys %d", k.Index)
	case KeysStreams:
		return "streams"
	}
	return "none"
}

// ParseKeySpec parses the commands.yaml form of a key specification.
func ParseKeySpec(s string) (KeySpec, error) {
	f := strings.Fields(s)
	switch {
	case len(f) == 1 && f[0] == "none":
		return KeySpec{Kind: KeysNone}, nil
	case len(f) == 1 && f[0] == "streams":
		return KeySpec{Kind: KeysStreams}, nil
	case len(f) == 2 && f[0] == "numkeys":
		i, err := strconv.Atoi(f[1])
		if err != nil || i < 1 || i > 64 {
			return KeySpec{}, fmt.Errorf("numkeys index must be an integer in 1..64, got %q", f[1])
		}
		return KeySpec{Kind: KeysNumkeys, Index: i}, nil
	case len(f) == 3:
		var v [3]int
		for i, t := range f {
			n, err := strconv.Atoi(t)
			if err != nil || n < -64 || n > 64 {
				return KeySpec{}, fmt.Errorf("key range %q: %q is not an integer in -64..64", s, t)
			}
			v[i] = n
		}
		ks := KeySpec{Kind: KeysRange, First: v[0], Last: v[1], Step: v[2]}
		if ks.First < 1 {
			return KeySpec{}, fmt.Errorf("key range %q: first must be >= 1", s)
		}
		if ks.Step < 1 {
			return KeySpec{}, fmt.Errorf("key range %q: step must be >= 1", s)
		}
		if ks.Last == 0 || (ks.Last > 0 && ks.Last < ks.First) {
			return KeySpec{}, fmt.Errorf("key range %q: last must be >= first or negative", s)
		}
		return ks, nil
	}
	return KeySpec{}, fmt.Errorf("key spec %q: want none, streams, numkeys <index> or <first> <last> <step>", s)
}

// ErrMalformedArgs is matched (errors.Is) by every *ArgsError.
var ErrMalformedArgs = errors.New("malformed command arguments")

// ArgsError reports arguments that do not fit a command's key spec. It never
// contains argument values (they may be keys or secrets).
type ArgsError struct {
	Command string
	Reason  string
}

// Error names the command and the shape problem, never the arguments.
func (e *ArgsError) Error() string {
	return fmt.Sprintf("%s: %s: %s", ErrMalformedArgs.Error(), e.Command, e.Reason)
}

// Is makes errors.Is(err, ErrMalformedArgs) true.
func (e *ArgsError) Is(target error) bool { return target == ErrMalformedArgs }

// Positions returns the indexes into args that the spec designates.
func (k KeySpec) Positions(command string, args []any) ([]int, error) {
	return k.AppendPositions(nil, command, args)
}

// AppendPositions is Positions appending to dst (hot paths pass a stack
// buffer to avoid an allocation per command).
func (k KeySpec) AppendPositions(dst []int, command string, args []any) ([]int, error) {
	bad := func(format string, a ...any) error {
		return &ArgsError{Command: command, Reason: fmt.Sprintf(format, a...)}
	}
	switch k.Kind {
	case KeysNone:
		return nil, nil
	case KeysRange:
		last := k.Last
		if last < 0 {
			last = len(args) + last
		}
		if k.First >= len(args) || last >= len(args) || last < k.First {
			return nil, bad("%d arguments do not reach key position %d", len(args), k.First)
		}
		for i := k.First; i <= last; i += k.Step {
			dst = append(dst, i)
		}
		return dst, nil
	case KeysNumkeys:
		if k.Index >= len(args) {
			return nil, bad("numkeys argument %d missing", k.Index)
		}
		n, ok := argInt(args[k.Index])
		if !ok || n < 0 {
			return nil, bad("numkeys argument %d is not a non-negative integer", k.Index)
		}
		if n > int64(len(args)-k.Index-1) {
			return nil, bad("numkeys exceeds the %d remaining arguments", len(args)-k.Index-1)
		}
		if dst == nil {
			dst = make([]int, 0, int(n))
		}
		for i := 0; i < int(n); i++ {
			dst = append(dst, k.Index+1+i)
		}
		return dst, nil
	case KeysStreams:
		return streamsPositions(dst, args, bad)
	}
	return nil, bad("unsupported key spec")
}

// streamsPositions parses XREAD / XREADGROUP options exactly, so a group or
// consumer named "streams" can never shift the key positions.
func streamsPositions(dst []int, args []any, bad func(string, ...any) error) ([]int, error) {
	i := 1
	for i < len(args) {
		tok, ok := args[i].(string)
		if !ok {
			return nil, bad("option %d is not a string", i)
		}
		switch strings.ToUpper(tok) {
		case "GROUP":
			i += 3
		case "COUNT", "BLOCK":
			i += 2
		case "NOACK":
			i++
		case "STREAMS":
			rest := len(args) - i - 1
			if rest <= 0 || rest%2 != 0 {
				return nil, bad("STREAMS needs pairs of keys and ids")
			}
			for j := 0; j < rest/2; j++ {
				dst = append(dst, i+1+j)
			}
			return dst, nil
		default:
			return nil, bad("unknown option at %d", i)
		}
	}
	return nil, bad("no STREAMS section")
}

// argInt converts an integer-valued go-redis argument.
func argInt(a any) (int64, bool) {
	switch v := a.(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case uint32:
		return int64(v), true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	case []byte:
		n, err := strconv.ParseInt(string(v), 10, 64)
		return n, err == nil
	}
	return 0, false
}
