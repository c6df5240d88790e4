package sentinelquorum

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// choice is what one Sentinel says in the exhaustive tests.
type choice int

const (
	sayA choice = iota
	sayB
	sayC
	sayFail
	sayNoMaster
	sayGarbage
	sayLoopback
	choices
)

var (
	addrA = "10.0.0.1:6379"
	addrB = "10.0.0.2:6379"
	addrC = "redis-c.example:6380"
)

func answerOf(i int, c choice) Answer {
	switch c {
	case sayA:
		return Answer{Sentinel: i, Reply: []string{"10.0.0.1", "6379"}}
	case sayB:
		return Answer{Sentinel: i, Reply: []string{"10.0.0.2", "6379"}}
	case sayC:
		return Answer{Sentinel: i, Reply: []string{"REDIS-C.example", "6380"}}
	case sayFail:
		return Answer{Sentinel: i, Err: errors.New("i/o timeout")}
	case sayNoMaster:
		return Answer{Sentinel: i, NoMaster: true}
	case sayGarbage:
		return Answer{Sentinel: i, Reply: []string{"0.0.0.0", "6379"}}
	case sayLoopback:
		return Answer{Sentinel: i, Reply: []string{"127.0.0.1", "6379"}}
	}
	panic("unreachable")
}

func addrOf(c choice) string {
	switch c {
	case sayA:
		return addrA
	case sayB:
		return addrB
	case sayC:
		return addrC
	}
	return ""
}

// model is the rule written the obvious way over a complete set of
// answers: accepted iff exactly one address has at least q votes.
func model(cs []choice, q int) (string, bool) {
	votes := map[string]int{}
	for _, c := range cs {
		if a := addrOf(c); a != "" {
			votes[a]++
		}
	}
	winner, n := "", 0
	for a, v := range votes {
		if v >= q {
			winner = a
			n++
		}
	}
	return winner, n == 1
}

// each calls f with every assignment of choices to n Sentinels.
func each(n int, f func([]choice)) {
	cs := make([]choice, n)
	var rec func(int)
	rec = func(i int) {
		if i == n {
			f(cs)
			return
		}
		for c := choice(0); c < choices; c++ {
			cs[i] = c
			rec(i + 1)
		}
	}
	rec(0)
}

func TestDecideMatchesTheModelExhaustively(t *testing.T) {
	for _, tc := range []struct{ n, q int }{{3, 2}, {3, 3}, {4, 2}, {4, 3}, {5, 3}, {5, 2}} {
		cases := 0
		each(tc.n, func(cs []choice) {
			cases++
			answers := make([]Answer, len(cs))
			for i, c := range cs {
				answers[i] = answerOf(i, c)
			}
			v := Decide(answers, tc.n, Rules{Quorum: tc.q})
			want, ok := model(cs, tc.q)
			if ok {
				require.Equal(t, Agreed, v.Outcome, "n=%d q=%d %v", tc.n, tc.q, cs)
				require.Equal(t, want, v.Primary)
				require.GreaterOrEqual(t, v.Agreeing, tc.q)
			} else {
				require.NotEqual(t, Agreed, v.Outcome, "n=%d q=%d %v", tc.n, tc.q, cs)
				require.Empty(t, v.Primary)
				require.True(t, v.Settled(), "complete answers always settle")
			}
			// Counts: every Sentinel is accounted for exactly once.
			voted := 0
			for _, vt := range v.Votes {
				voted += len(vt.Sentinels)
			}
			require.Equal(t, tc.n, v.Failed+v.NoMaster+v.Unusable+voted)
			require.Equal(t, tc.n-v.Failed, v.Responded)
		})
		t.Logf("n=%d q=%d: %d assignments", tc.n, tc.q, cases)
	}
}

// TestAnEarlyVerdictNeverChanges: for every prefix of every assignment (the
// Sentinels that answered first), an Agreed or Split verdict is the one the
// complete answers give, so the caller may stop waiting at once.
func TestAnEarlyVerdictNeverChanges(t *testing.T) {
	for _, tc := range []struct{ n, q int }{{3, 2}, {4, 2}, {5, 3}} {
		each(tc.n, func(cs []choice) {
			answers := make([]Answer, len(cs))
			for i, c := range cs {
				answers[i] = answerOf(i, c)
			}
			final := Decide(answers, tc.n, Rules{Quorum: tc.q})
			for k := 0; k < tc.n; k++ {
				early := Decide(answers[:k], tc.n, Rules{Quorum: tc.q})
				if early.Settled() {
					require.Equal(t, final.Outcome, early.Outcome, "n=%d q=%d prefix %v of %v", tc.n, tc.q, cs[:k], cs)
					require.Equal(t, final.Primary, early.Primary)
				}
			}
		})
	}
}

func TestNeverOnASingleAnswer(t *testing.T) {
	for _, q := range []int{-1, 0, 1, 2} {
		v := Decide([]Answer{answerOf(0, sayA)}, 1, Rules{Quorum: q})
		assert.Equal(t, NoQuorum, v.Outcome, "quorum %d", q)
		assert.Equal(t, MinQuorum, v.Quorum)
		v = Decide([]Answer{answerOf(0, sayA), answerOf(1, sayFail), answerOf(2, sayFail)}, 3, Rules{Quorum: q})
		assert.Equal(t, NoQuorum, v.Outcome, "a lone Sentinel among failures, quorum %d", q)
	}
	// A lone Sentinel claiming a new master while the others still name
	// the old one: the old one keeps its quorum.
	v := Decide([]Answer{answerOf(0, sayB), answerOf(1, sayA), answerOf(2, sayA)}, 3, Rules{Quorum: 2})
	assert.Equal(t, Agreed, v.Outcome)
	assert.Equal(t, addrA, v.Primary)
	assert.Equal(t, []Vote{{Addr: addrA, Sentinels: []int{1, 2}}, {Addr: addrB, Sentinels: []int{0}}}, v.Votes)
	// The same Sentinel answering twice counts once.
	v = Decide([]Answer{answerOf(0, sayB), answerOf(0, sayB), answerOf(1, sayA)}, 3, Rules{Quorum: 2})
	assert.Equal(t, Undecided, v.Outcome)
	assert.Equal(t, 1, v.Agreeing)
}

func TestQuorumIsAMajorityOfAtLeastTwo(t *testing.T) {
	for n, want := range map[int]int{0: 2, 1: 2, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		assert.Equal(t, want, Quorum(n), "n=%d", n)
	}
}

func TestParseAddr(t *testing.T) {
	good := map[[2]string]string{
		{"10.0.0.1", "6379"}:        "10.0.0.1:6379",
		{"::ffff:10.0.0.1", "1"}:    "10.0.0.1:1",
		{"2001:DB8::0:1", "65535"}:  "[2001:db8::1]:65535",
		{"Redis-1.Example", "6380"}: "redis-1.example:6380",
		{"127.0.0.1", "26379"}:      "127.0.0.1:26379",
	}
	for in, want := range good {
		got, err := ParseAddr(in[0], in[1])
		require.NoError(t, err, "%v", in)
		assert.Equal(t, want, got)
	}
	for _, in := range [][2]string{
		{"", "6379"}, {"0.0.0.0", "6379"}, {"::", "6379"}, {"10.0.0.1", "0"}, {"10.0.0.1", "65536"},
		{"10.0.0.1", "+6379"}, {"10.0.0.1", "06379"}, {"10.0.0.1", ""}, {"10.0.0.1", " 6379"},
		{"a..b", "1"}, {"-a", "1"}, {"a_b", "1"}, {"a b", "1"}, {"\xff", "1"}, {strings.Repeat("a", 254), "1"},
		{"[::1]", "1"}, {"10.0.0.1:1", "2"},
	} {
		_, err := ParseAddr(in[0], in[1])
		assert.ErrorIs(t, err, ErrAddr, "%q", in)
	}
	assert.True(t, IsLoopback("127.0.0.2:1"))
	assert.True(t, IsLoopback("[::1]:1"))
	assert.True(t, IsLoopback("localhost:1"))
	assert.False(t, IsLoopback("10.0.0.1:1"))
}

func TestLoopbackOnlyWhenAllowed(t *testing.T) {
	answers := []Answer{answerOf(0, sayLoopback), answerOf(1, sayLoopback), answerOf(2, sayA)}
	v := Decide(answers, 3, Rules{Quorum: 2})
	assert.Equal(t, NoQuorum, v.Outcome)
	assert.Equal(t, 2, v.Unusable)
	v = Decide(answers, 3, Rules{Quorum: 2, AllowLoopback: true})
	assert.Equal(t, Agreed, v.Outcome)
	assert.Equal(t, "127.0.0.1:6379", v.Primary)
}

// golden is one decision vector in testdata/decide.json.
type golden struct {
	Name          string `json:"name"`
	Quorum        int    `json:"quorum"`
	Asked         int    `json:"asked"`
	AllowLoopback bool   `json:"allow_loopback"`
	Answers       []struct {
		Sentinel int      `json:"sentinel"`
		Reply    []string `json:"reply"`
		Error    string   `json:"error"`
		NoMaster bool     `json:"no_master"`
	} `json:"answers"`
	Want struct {
		Outcome   string `json:"outcome"`
		Primary   string `json:"primary"`
		Responded int    `json:"responded"`
		Agreeing  int    `json:"agreeing"`
	} `json:"want"`
}

func TestGoldenDecisions(t *testing.T) {
	raw, err := os.ReadFile("testdata/decide.json")
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	var vectors []golden
	require.NoError(t, dec.Decode(&vectors))
	require.NotEmpty(t, vectors)
	outcomes := map[string]bool{}
	for _, g := range vectors {
		var answers []Answer
		for _, a := range g.Answers {
			ans := Answer{Sentinel: a.Sentinel, Reply: a.Reply, NoMaster: a.NoMaster}
			if a.Error != "" {
				ans.Err = errors.New(a.Error)
			}
			answers = append(answers, ans)
		}
		v := Decide(answers, g.Asked, Rules{Quorum: g.Quorum, AllowLoopback: g.AllowLoopback})
		assert.Equal(t, g.Want.Outcome, v.Outcome.String(), g.Name)
		assert.Equal(t, g.Want.Primary, v.Primary, g.Name)
		assert.Equal(t, g.Want.Responded, v.Responded, g.Name)
		assert.Equal(t, g.Want.Agreeing, v.Agreeing, g.Name)
		outcomes[g.Want.Outcome] = true
	}
	assert.Len(t, outcomes, 4, "the vectors reach every outcome")
}

func TestParseSwitchMaster(t *testing.T) {
	m, err := ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.1 6380")
	require.NoError(t, err)
	assert.Equal(t, SwitchMaster{Name: "mymaster", Old: "127.0.0.1:6379", New: "127.0.0.1:6380"}, m)
	for _, bad := range []string{
		"", "mymaster", "mymaster 127.0.0.1 6379 127.0.0.1", "mymaster 127.0.0.1 6379 127.0.0.1 6380 extra",
		"mymaster  127.0.0.1 6379 127.0.0.1 6380", " 127.0.0.1 6379 127.0.0.1 6380",
		"mymaster 127.0.0.1 6379 0.0.0.0 6380", "mymaster 127.0.0.1 6379 127.0.0.1 x",
		"my\xffmaster 127.0.0.1 6379 127.0.0.1 6380", strings.Repeat("m", 257) + " 1.1.1.1 1 1.1.1.2 1",
		strings.Repeat("x", MaxMessageBytes+1),
	} {
		_, err := ParseSwitchMaster(bad)
		assert.ErrorIs(t, err, ErrMessage, "%q", bad)
	}
}

func FuzzParseSwitchMaster(f *testing.F) {
	f.Add("mymaster 127.0.0.1 6379 127.0.0.1 6380")
	f.Add("m ::1 1 fe80::1 65535")
	f.Add("m h.example 1 H.EXAMPLE 2")
	f.Fuzz(func(t *testing.T, payload string) {
		m, err := ParseSwitchMaster(payload)
		if err != nil {
			require.ErrorIs(t, err, ErrMessage)
			return
		}
		require.LessOrEqual(t, len(payload), MaxMessageBytes)
		require.True(t, utf8.ValidString(payload))
		require.Equal(t, 5, len(strings.Split(payload, " ")))
		require.NotEmpty(t, m.Name)
		require.LessOrEqual(t, len(m.Name), MaxNameBytes)
		// The canonical forms are fixed points.
		for _, a := range []string{m.Old, m.New} {
			h, p, err := splitCanonical(a)
			require.NoError(t, err)
			again, err := ParseAddr(h, p)
			require.NoError(t, err)
			require.Equal(t, a, again)
		}
	})
}

func FuzzDecide(f *testing.F) {
	f.Add("10.0.0.1", "6379", "10.0.0.1", "6379", "10.0.0.2", "6379", uint8(2))
	f.Add("a", "1", "A", "1", "0.0.0.0", "1", uint8(3))
	f.Fuzz(func(t *testing.T, h0, p0, h1, p1, h2, p2 string, q uint8) {
		answers := []Answer{
			{Sentinel: 0, Reply: []string{h0, p0}},
			{Sentinel: 1, Reply: []string{h1, p1}},
			{Sentinel: 2, Reply: []string{h2, p2}},
		}
		v := Decide(answers, 3, Rules{Quorum: int(q), AllowLoopback: true})
		require.True(t, v.Settled())
		require.GreaterOrEqual(t, v.Quorum, MinQuorum)
		if v.Outcome != Agreed {
			require.Empty(t, v.Primary)
			return
		}
		// Agreed: at least a quorum of the replies decode to Primary.
		n := 0
		for _, a := range answers {
			if addr, err := ParseReply(a.Reply); err == nil && addr == v.Primary {
				n++
			}
		}
		require.GreaterOrEqual(t, n, v.Quorum)
		require.Equal(t, n, v.Agreeing)
	})
}

func splitCanonical(a string) (string, string, error) {
	i := strings.LastIndexByte(a, ':')
	if i < 0 {
		return "", "", ErrAddr
	}
	h := strings.TrimSuffix(strings.TrimPrefix(a[:i], "["), "]")
	return h, a[i+1:], nil
}
