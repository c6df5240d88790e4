package redistest

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/caphost/caphost/policy"
)

// ForExample starts a throwaway standalone redis-server for a runnable
// godoc Example (which has no testing.TB) and returns its address and a
// stop function. It panics with an install hint when redis-server is
// missing: an example must fail loudly, never skip.
func ForExample() (addr string, stop func()) {
	bin, err := lookBinary()
	if err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "caphost-example-")
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--dir", dir)
	if err := cmd.Start(); err != nil {
		panic("redistest: starting redis-server for an example: " + err.Error())
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for range 250 {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr, func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = os.RemoveAll(dir) }
}

// ExampleConfig is the runtime configuration the runnable examples use: one
// standalone deployment at addr bound to role, evalsha-managed programs, and
// example-only HMAC key material (never use it outside an example).
func ExampleConfig(addr string, role policy.Role) policy.RedisConfig {
	lanes := map[policy.Lane]policy.LaneConfig{}
	for _, l := range policy.Lanes() {
		lanes[l] = policy.LaneConfig{PoolSize: 4, MaxInFlight: 64}
	}
	return policy.RedisConfig{
		Deployments: map[string]policy.Deployment{"main": {
			ID: "main", Topology: &policy.Standalone{Endpoint: addr}, ClientName: "caphost-example",
			Timeouts: policy.Timeouts{Connect: time.Second, Command: time.Second, Acquire: time.Second, Shutdown: time.Second},
			Lanes:    lanes, Budgets: policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20},
			AdminShared: true,
		}},
		Roles:    map[policy.Role]policy.RoleBinding{role: {Deployment: "main", Required: role != policy.RoleCache}},
		Programs: policy.ProgramsConfig{Mode: policy.ProgramsEvalshaManaged},
		Keys: policy.KeysConfig{App: "shop", Env: "example", HMAC: policy.KeyMaterial{WriteVersion: 1,
			Versions: map[int]policy.Secret{1: policy.NewSecret([]byte("example-only-hmac-material-0123456789"))}}},
	}
}
