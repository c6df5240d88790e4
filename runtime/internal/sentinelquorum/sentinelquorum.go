// Package sentinelquorum owns the pure decision of which Redis primary a set
// of Sentinel answers names: it decodes what the Sentinels send (the
// SENTINEL GET-MASTER-ADDR-BY-NAME reply and the +switch-master message),
// counts who answered what, and accepts a candidate only when at least a
// quorum of distinct Sentinels (never fewer than two) report the same exact
// address and no other address can reach a quorum. It does no I/O and keeps
// no state; the runtime's Sentinel discovery (runtime/sentinel.go) asks the
// Sentinels, feeds their answers here and acts on the Verdict.
package sentinelquorum

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/caphost/caphost/policy"
)

// MinQuorum is the smallest quorum Decide applies: a single Sentinel's word
// never moves the primary.
const MinQuorum = 2

// Bounds of the decoded input. Anything longer is refused, not truncated.
const (
	// MaxHostBytes bounds a host name or IP literal (a DNS name's limit).
	MaxHostBytes = 253
	// MaxNameBytes bounds a master name in a +switch-master message.
	MaxNameBytes = 256
	// MaxMessageBytes bounds a whole +switch-master payload.
	MaxMessageBytes = 1024
)

// ErrAddr is the class of every address decoding error (errors.Is).
var ErrAddr = errors.New("sentinelquorum: bad address")

// ErrMessage is the class of every +switch-master decoding error.
var ErrMessage = errors.New("sentinelquorum: bad +switch-master message")

// Quorum is the default quorum for n configured Sentinels: a strict
// majority, and never less than MinQuorum.
func Quorum(n int) int {
	return max(n/2+1, MinQuorum)
}

// ParseAddr decodes one host and port as a Sentinel reports them and
// returns the canonical "host:port": an IP literal in its shortest form, a
// host name in lower case. It refuses an empty, over-long or malformed host,
// the unspecified addresses (0.0.0.0, ::) and a port outside 1..65535 or not
// in plain decimal.
func ParseAddr(host, port string) (string, error) {
	if !utf8.ValidString(host) || !utf8.ValidString(port) {
		return "", fmt.Errorf("%w: not UTF-8", ErrAddr)
	}
	if host == "" || len(host) > MaxHostBytes {
		return "", fmt.Errorf("%w: host length %d", ErrAddr, len(host))
	}
	p, err := parsePort(port)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsUnspecified() {
			return "", fmt.Errorf("%w: unspecified address", ErrAddr)
		}
		return net.JoinHostPort(ip.String(), strconv.Itoa(p)), nil
	}
	// The same host rule as a configured endpoint.
	if err := policy.CheckEndpoint(net.JoinHostPort(host, port)); err != nil {
		return "", fmt.Errorf("%w: %w", ErrAddr, err)
	}
	return net.JoinHostPort(strings.ToLower(host), strconv.Itoa(p)), nil
}

func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 {
		return 0, fmt.Errorf("%w: port %q", ErrAddr, s)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: port %q", ErrAddr, s)
		}
		n = n*10 + int(c-'0')
	}
	if s[0] == '0' || n > 65535 {
		return 0, fmt.Errorf("%w: port %q", ErrAddr, s)
	}
	return n, nil
}

// IsLoopback reports whether a canonical address (from ParseAddr) is a
// loopback IP or a localhost name.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// ParseReply decodes a SENTINEL GET-MASTER-ADDR-BY-NAME reply: exactly two
// fields, host and port.
func ParseReply(fields []string) (string, error) {
	if len(fields) != 2 {
		return "", fmt.Errorf("%w: %d fields, want host and port", ErrAddr, len(fields))
	}
	return ParseAddr(fields[0], fields[1])
}

// SwitchMaster is a decoded +switch-master message.
type SwitchMaster struct {
	Name string
	Old  string // canonical host:port
	New  string // canonical host:port
}

// ParseSwitchMaster decodes a +switch-master payload: "<name> <old-ip>
// <old-port> <new-ip> <new-port>", exactly five fields separated by single
// spaces, valid UTF-8, at most MaxMessageBytes. The message is only ever a
// hint to ask the Sentinels again; this decoder keeps a malformed one from
// being mistaken for a hint about another master.
func ParseSwitchMaster(payload string) (SwitchMaster, error) {
	if len(payload) > MaxMessageBytes {
		return SwitchMaster{}, fmt.Errorf("%w: %d bytes", ErrMessage, len(payload))
	}
	if !utf8.ValidString(payload) {
		return SwitchMaster{}, fmt.Errorf("%w: not UTF-8", ErrMessage)
	}
	f := strings.Split(payload, " ")
	if len(f) != 5 {
		return SwitchMaster{}, fmt.Errorf("%w: %d fields, want 5", ErrMessage, len(f))
	}
	if f[0] == "" || len(f[0]) > MaxNameBytes || strings.ContainsAny(f[0], "\t\r\n") {
		return SwitchMaster{}, fmt.Errorf("%w: master name", ErrMessage)
	}
	oldAddr, err := ParseAddr(f[1], f[2])
	if err != nil {
		return SwitchMaster{}, fmt.Errorf("%w: old address: %w", ErrMessage, err)
	}
	newAddr, err := ParseAddr(f[3], f[4])
	if err != nil {
		return SwitchMaster{}, fmt.Errorf("%w: new address: %w", ErrMessage, err)
	}
	return SwitchMaster{Name: f[0], Old: oldAddr, New: newAddr}, nil
}

// Answer is what one Sentinel said (or failed to say) within the discovery
// deadline. Exactly one of Err, NoMaster and Reply applies, in that order.
type Answer struct {
	// Sentinel identifies the Sentinel: its index in the configured list.
	Sentinel int
	// Err is set when the Sentinel did not answer (refused, timed out,
	// denied): it did not respond.
	Err error
	// NoMaster is set when the Sentinel answered that it monitors no
	// master of that exact name (a nil reply).
	NoMaster bool
	// Reply is the raw GET-MASTER-ADDR-BY-NAME reply.
	Reply []string
}

// Rules parameterise Decide.
type Rules struct {
	// Quorum is the number of distinct Sentinels that must name the same
	// address; values below MinQuorum are raised to it.
	Quorum int
	// AllowLoopback accepts a loopback candidate. The runtime sets it only
	// when every configured Sentinel is itself on loopback (a local
	// deployment): a remote Sentinel naming 127.0.0.1 would point caphost
	// at its own host.
	AllowLoopback bool
}

// Outcome is the class of a Verdict.
type Outcome int

// Outcomes.
const (
	// Agreed: Primary has at least a quorum and no other address has or
	// can still reach one.
	Agreed Outcome = iota + 1
	// Undecided: no address has a quorum yet but the Sentinels still to
	// answer could give one a quorum; or one has it but the rest could
	// still give another a quorum too.
	Undecided
	// NoQuorum: every Sentinel answered (or the rest cannot change it) and
	// no address has a quorum.
	NoQuorum
	// Split: two or more addresses each have a quorum; nothing is
	// accepted.
	Split
)

func (o Outcome) String() string {
	switch o {
	case Agreed:
		return "agreed"
	case Undecided:
		return "undecided"
	case NoQuorum:
		return "no-quorum"
	case Split:
		return "split"
	}
	return "unknown"
}

// Vote is one address and the Sentinels that named it.
type Vote struct {
	Addr      string
	Sentinels []int // sorted
}

// Verdict is the decision with its counts: who was asked, who answered,
// and what each answer was.
type Verdict struct {
	Outcome Outcome
	// Primary is the agreed canonical address (Agreed only).
	Primary string
	// Quorum is the quorum applied.
	Quorum int
	// Asked is the number of Sentinels asked; Responded those that
	// answered at all (Failed did not; the rest have not answered yet).
	Asked, Responded, Failed int
	// NoMaster counts answers naming no master; Unusable answers with a
	// malformed, unspecified or disallowed loopback address.
	NoMaster, Unusable int
	// Agreeing is the number of Sentinels naming the leading address.
	Agreeing int
	// Votes lists each named address, most votes first (ties by address).
	Votes []Vote
}

// Decide applies the quorum rule to the answers received so far from asked
// Sentinels (len(answers) <= asked; the rest have not answered). A Sentinel
// that answers twice counts once (its first answer). It is Agreed only if
// the remaining answers cannot change the result, so a caller may stop
// waiting as soon as Decide says Agreed or Split.
func Decide(answers []Answer, asked int, r Rules) Verdict {
	q := max(r.Quorum, MinQuorum)
	seen := make(map[int]bool, len(answers))
	byAddr := make(map[string][]int)
	v := Verdict{Quorum: q}
	for _, a := range answers {
		if seen[a.Sentinel] {
			continue
		}
		seen[a.Sentinel] = true
		switch {
		case a.Err != nil:
			v.Failed++
			continue
		case a.NoMaster:
			v.Responded++
			v.NoMaster++
			continue
		}
		v.Responded++
		addr, err := ParseReply(a.Reply)
		if err != nil || (!r.AllowLoopback && IsLoopback(addr)) {
			v.Unusable++
			continue
		}
		byAddr[addr] = append(byAddr[addr], a.Sentinel)
	}
	v.Asked = max(asked, len(seen))
	pending := v.Asked - len(seen)
	for addr, s := range byAddr {
		slices.Sort(s)
		v.Votes = append(v.Votes, Vote{Addr: addr, Sentinels: s})
	}
	slices.SortFunc(v.Votes, func(a, b Vote) int {
		if d := len(b.Sentinels) - len(a.Sentinels); d != 0 {
			return d
		}
		return strings.Compare(a.Addr, b.Addr)
	})
	best, second := 0, 0
	if len(v.Votes) > 0 {
		best = len(v.Votes[0].Sentinels)
	}
	if len(v.Votes) > 1 {
		second = len(v.Votes[1].Sentinels)
	}
	v.Agreeing = best
	switch {
	case best >= q && second >= q:
		v.Outcome = Split
	case best >= q && second+pending < q:
		v.Outcome = Agreed
		v.Primary = v.Votes[0].Addr
	case best >= q:
		// Another address could still reach a quorum: wait.
		v.Outcome = Undecided
	case best+pending >= q:
		v.Outcome = Undecided
	default:
		v.Outcome = NoQuorum
	}
	return v
}

// Settled reports whether more answers cannot change the outcome.
func (v Verdict) Settled() bool { return v.Outcome != Undecided }
