package transport_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/caphost/caphost/plugins/transport"
)

// binDir holds the transport plugin binaries TestMain builds, so `go test
// ./plugins/transport/...` works from a clean clone.
var binDir string

func TestMain(m *testing.M) {
	if os.Getenv("CAPHOST_TRANSPORT_TEST_HOST") != "" {
		os.Exit(actAsHost())
	}
	os.Exit(run(m))
}

// actAsHost is the test binary re-run as a stand-in host
// (TestPluginExitsWithItsHost): it launches the plugin named by the
// environment, prints its pid and waits to be killed.
func actAsHost() int {
	p, err := transport.Launch(context.Background(), transport.Config{Name: "file",
		Path: os.Getenv("CAPHOST_TRANSPORT_TEST_BIN"), SHA256: os.Getenv("CAPHOST_TRANSPORT_TEST_SHA256"),
		Settings: map[string]string{"dir": os.Getenv("CAPHOST_TRANSPORT_TEST_DIR")}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println(transport.PluginPID(p))
	select {}
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "caphost-transports-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "transport tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, name := range []string{"file", "webhook", "smtp"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/caphost-transport-"+name)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "transport tests: building the %s plugin (needs the go toolchain on PATH): %v\n", name, err)
			return 1
		}
	}
	// The misbehaving plugin of the tests (internal/testplugin) exists
	// only with the transporttest tag.
	cmd := exec.Command("go", "build", "-tags", "transporttest", "-o", filepath.Join(dir, "misbehaving"), "./internal/testplugin")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "transport tests: building the test plugin: %v\n", err)
		return 1
	}
	binDir = dir
	return m.Run()
}

// pluginBin returns the path and sha256 of a built plugin.
func pluginBin(t testing.TB, name string) (string, string) {
	t.Helper()
	path := filepath.Join(binDir, name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("plugin %s not built: %v", name, err)
	}
	sum := sha256.Sum256(b)
	return path, hex.EncodeToString(sum[:])
}
