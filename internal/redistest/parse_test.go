package redistest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// golden is testdata/golden.json: expected parser results for replies
// captured from redis-server 7.0.
type golden struct {
	CommandStats map[string]int64 `json:"info_commandstats.txt"`
	ClientList   int              `json:"client_list.txt"`
}

func readTestdata(t testing.TB, name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

func TestParsersGolden(t *testing.T) {
	var g golden
	require.NoError(t, json.Unmarshal([]byte(readTestdata(t, "golden.json")), &g))
	require.NotEmpty(t, g.CommandStats)
	info := readTestdata(t, "info_commandstats.txt")
	for cmd, want := range g.CommandStats {
		got, err := parseCommandCalls(info, cmd)
		require.NoError(t, err, cmd)
		assert.Equal(t, want, got, cmd)
	}
	assert.Equal(t, g.ClientList, countClients(readTestdata(t, "client_list.txt")))
	us, err := parseMicrosPerCall(info, "ACL|SETUSER")
	require.NoError(t, err)
	assert.Equal(t, 15.0, us)
	us, err = parseMicrosPerCall(info, "keys")
	require.NoError(t, err)
	assert.Zero(t, us, "never called")
	_, err = parseMicrosPerCall("cmdstat_get:calls=1,usec_per_call=x\r\n", "get")
	assert.Error(t, err)
}

func FuzzParseCommandCalls(f *testing.F) {
	f.Add(readTestdata(f, "info_commandstats.txt"), "get")
	f.Add("cmdstat_set:calls=9223372036854775807,rejected_calls=1\r\n", "set")
	f.Add("cmdstat_set:calls=-1\r\n", "set")
	f.Add("cmdstat_x:calls\r\n", "x")
	f.Fuzz(func(t *testing.T, info, cmd string) {
		n, err := parseCommandCalls(info, cmd)
		if err == nil && n < 0 {
			t.Fatalf("negative count %d", n)
		}
	})
}

// TestParseCommandStats: the three counters of a captured reply agree with
// parseCommandCalls (calls + rejected_calls) for every golden command.
func TestParseCommandStats(t *testing.T) {
	var g golden
	require.NoError(t, json.Unmarshal([]byte(readTestdata(t, "golden.json")), &g))
	info := readTestdata(t, "info_commandstats.txt")
	for cmd, want := range g.CommandStats {
		st, err := parseCommandStats(info, cmd)
		require.NoError(t, err, cmd)
		assert.Equal(t, want, st.Calls+st.Rejected, cmd)
	}
	st, err := parseCommandStats("cmdstat_evalsha:calls=2,usec=147,usec_per_call=73.50,rejected_calls=1,failed_calls=1\r\n", "evalsha")
	require.NoError(t, err)
	assert.Equal(t, CommandStats{Calls: 2, Rejected: 1, Failed: 1}, st)
	_, err = parseCommandStats("cmdstat_get:calls=1,failed_calls=-1\r\n", "get")
	assert.Error(t, err)
}

func FuzzParseCommandStats(f *testing.F) {
	f.Add(readTestdata(f, "info_commandstats.txt"), "get")
	f.Add("cmdstat_evalsha:calls=2,rejected_calls=1,failed_calls=1\r\n", "evalsha")
	f.Add("cmdstat_set:failed_calls=x\r\n", "set")
	f.Fuzz(func(t *testing.T, info, cmd string) {
		st, err := parseCommandStats(info, cmd)
		if err == nil && (st.Calls < 0 || st.Rejected < 0 || st.Failed < 0) {
			t.Fatalf("negative count %+v", st)
		}
	})
}

func FuzzCountClients(f *testing.F) {
	f.Add(readTestdata(f, "client_list.txt"))
	f.Add("id=1 name= flags=S\nid=2 name=sentinel-x flags=N\n\n")
	f.Add("name=name=redistest-admin flags=")
	f.Fuzz(func(t *testing.T, list string) {
		n := countClients(list)
		if n < 0 || n > strings.Count(list, "\n")+1 {
			t.Fatalf("count %d out of range", n)
		}
	})
}

// TestReplicationOffsets: AwaitReplicated's parsers count only online
// replicas whose acknowledged offset reached the target.
func TestReplicationOffsets(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n" +
		"slave0:ip=127.0.0.1,port=7001,state=online,offset=120,lag=0\r\n" +
		"slave1:ip=127.0.0.1,port=7002,state=online,offset=99,lag=1\r\n" +
		"slave2:ip=127.0.0.1,port=7003,state=wait_bgsave,offset=500,lag=0\r\n" +
		"master_failover_state:no-failover\r\nmaster_repl_offset:120\r\nslave_read_repl_offset:120\r\n"
	off, ok := replicationField(info, "master_repl_offset")
	require.True(t, ok)
	assert.Equal(t, int64(120), off)
	_, ok = replicationField(info, "no_such_field")
	assert.False(t, ok)
	assert.Equal(t, 1, acknowledgedReplicas(info, 120))
	assert.Equal(t, 2, acknowledgedReplicas(info, 99))
	assert.Equal(t, 0, acknowledgedReplicas(info, 121))
}
