package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// privateRedis is a redis-server process owned by this program: a free
// loopback port, a temp dir, nothing persisted, killed on exit.
type privateRedis struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

func startRedis(ctx context.Context) (*privateRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found: install it with `apt-get install -y redis-server`")
	}
	dir, err := os.MkdirTemp("", "caphost-bench-")
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--protected-mode", "no")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if waitPing(addr, 5*time.Second) {
			return &privateRedis{addr: addr, cmd: cmd, dir: dir}, nil
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	return nil, fmt.Errorf("redis-server did not start; see %s/redis.log", dir)
}

func (p *privateRedis) stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	_ = os.RemoveAll(p.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitPing speaks just enough RESP to see +PONG.
func waitPing(addr string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
			_, _ = c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
			buf := make([]byte, 7)
			n, _ := c.Read(buf)
			c.Close()
			if n >= 5 && string(buf[:5]) == "+PONG" {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}
