package redistest

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"
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
