package transport_test

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/logtest"
	"github.com/caphost/caphost/plugins/transport"
)

// requireLandlock fails the test, never skips it, on a kernel whose
// Landlock cannot restrict TCP: these tests prove the sandbox, and a
// kernel without it would prove nothing.
func requireLandlock(t *testing.T) int {
	t.Helper()
	abi, err := ll.LandlockGetABIVersion()
	if err != nil || abi < 4 {
		t.Fatalf("the transport sandbox tests need Linux Landlock ABI 4 or later (Linux 6.7+, landlock in the lsm= boot list); this kernel reports ABI %d (%v)", abi, err)
	}
	return abi
}

// listen returns a loopback TCP listener that accepts and closes
// connections until the test ends, and its port.
func listen(t *testing.T) (net.Listener, string) {
	t.Helper()
	l := listenAt(t, "127.0.0.1:0")
	_, port, err := net.SplitHostPort(l.Addr().String())
	require.NoError(t, err)
	return l, port
}

// launchProbe launches the test plugin's probe mode with settings.
func launchProbe(t *testing.T, settings map[string]string, log *slog.Logger) *transport.Plugin {
	t.Helper()
	settings["mode"] = "probe"
	p, _ := launchPlugin(t, "misbehaving", "probe", settings, func(c *transport.Config) { c.Logger = log })
	return p
}

// probe runs the probes (name, argument) in one Deliver and returns the
// receipt's code.
func probe(t *testing.T, p *transport.Plugin, probes ...[2]string) string {
	t.Helper()
	m := message(t, "probe")
	m.Parts = nil
	for i, pr := range probes {
		m.Parts = append(m.Parts, transport.Part{Name: pr[0] + "." + strconv.Itoa(i), ContentType: "text/plain", Body: []byte(pr[1])})
	}
	r := p.Deliver(context.Background(), m)
	require.Equal(t, transport.Accepted, r.Outcome, r.Code)
	return r.Code
}

// TestSandboxConfinesFilesAndTCP: a plugin reaches the one directory and
// the one TCP port its Sandbox declares, and nothing else: not a file
// beside it (a stand-in for a secret://file/… file), not its host's
// /proc entry (both missing from its own root), not another local port
// (a stand-in for Redis); it can neither write where it may only read
// nor listen.
func TestSandboxConfinesFilesAndTCP(t *testing.T) {
	abi := requireLandlock(t)
	secret := filepath.Join(t.TempDir(), "redis-password")
	require.NoError(t, os.WriteFile(secret, []byte("hunter2"), 0o600))
	allowed := t.TempDir()
	readable := filepath.Join(allowed, "allowed.txt")
	require.NoError(t, os.WriteFile(readable, []byte("ok"), 0o600))
	_, allowedPort := listen(t)
	_, redisPort := listen(t)

	var buf logtest.Buffer
	p := launchProbe(t, map[string]string{"allow-dir": allowed, "allow-port": allowedPort},
		slog.New(slog.NewJSONHandler(&buf, nil)))

	assert.Equal(t, "read-missing.connect-denied", probe(t, p,
		[2]string{"read", secret}, [2]string{"connect", "127.0.0.1:" + redisPort}))
	assert.Equal(t, "read-ok.connect-ok", probe(t, p,
		[2]string{"read", readable}, [2]string{"connect", "127.0.0.1:" + allowedPort}))
	// This test process is dumpable, unlike caphost serve: only the
	// sandbox keeps the plugin out of its host's environment here.
	assert.Equal(t, "read-missing.write-denied.bind-denied", probe(t, p,
		[2]string{"read", "/proc/" + strconv.Itoa(os.Getpid()) + "/environ"},
		[2]string{"write", filepath.Join(allowed, "new.txt")},
		[2]string{"bind", "127.0.0.1:0"}))
	assert.NoFileExists(t, filepath.Join(allowed, "new.txt"))

	want := transport.SandboxLevel{LandlockABI: min(abi, 11), FS: true, TCP: true, UDP: abi >= 10, Sockets: true, Paths: true}
	assert.Equal(t, want, p.Sandboxed(), "the level the plugin reported over Configure")
	assert.Contains(t, buf.String(), `"plugin_msg":"transport sandbox applied"`)
	assert.Contains(t, buf.String(), `"plugin_landlock_abi":"`+strconv.Itoa(want.LandlockABI)+`"`)
	assert.Contains(t, buf.String(), `"plugin_tcp_connect":"`+allowedPort+`"`)
}

// TestSandboxClosesSocketGaps: what Landlock's TCP rules do not see is
// refused too: a raw Multipath TCP socket (which falls back to plain TCP
// against any server) to a port not declared, a unix socket (a stand-in
// for Redis's), and io_uring, which makes sockets without socket(2).
// Classic TCP to the declared port and UDP still work.
func TestSandboxClosesSocketGaps(t *testing.T) {
	abi := requireLandlock(t)
	_, allowedPort := listen(t)
	_, redisPort := listen(t)
	sock := filepath.Join(t.TempDir(), "redis.sock")
	ul, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ul.Close() })
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = udp.Close() })

	p := launchProbe(t, map[string]string{"allow-port": allowedPort}, nil)
	assert.Equal(t, "mptcp-denied.mptcp-denied.unix-denied.uring-nosys", probe(t, p,
		[2]string{"mptcp", "127.0.0.1:" + redisPort}, [2]string{"mptcp", "127.0.0.1:" + allowedPort},
		[2]string{"unix", sock}, [2]string{"uring", ""}))
	// UDP is Landlock's from ABI 10 on, and this sandbox declares no DNS.
	wantUDP := "udp-ok"
	if abi >= 10 {
		wantUDP = "udp-denied"
	}
	assert.Equal(t, "connect-ok."+wantUDP, probe(t, p,
		[2]string{"connect", "127.0.0.1:" + allowedPort}, [2]string{"udp", udp.LocalAddr().String()}))
	assert.True(t, p.Sandboxed().Sockets)
}

// TestSandboxRefusesMetadataChanges: Landlock does not restrict a file's
// mode, times or extended attributes, so the socket filter refuses those
// calls: a plugin cannot change them on a file of its host's (outside
// every grant) nor in the directory it may read; the file stays as it was.
func TestSandboxRefusesMetadataChanges(t *testing.T) {
	requireLandlock(t)
	allowed := t.TempDir()
	files := []string{filepath.Join(t.TempDir(), "caphost.yaml"), filepath.Join(allowed, "allowed.txt")}
	for _, f := range files {
		require.NoError(t, os.WriteFile(f, []byte("x"), 0o600))
	}
	before, err := os.Stat(files[0])
	require.NoError(t, err)

	p := launchProbe(t, map[string]string{"allow-dir": allowed}, nil)
	for _, f := range files {
		assert.Equal(t, "chmod-denied.touch-denied.xattr-denied", probe(t, p,
			[2]string{"chmod", f}, [2]string{"touch", f}, [2]string{"xattr", f}), f)
	}
	after, err := os.Stat(files[0])
	require.NoError(t, err)
	assert.Equal(t, before.Mode(), after.Mode())
	assert.Equal(t, before.ModTime(), after.ModTime())
	assert.True(t, p.Sandboxed().Sockets)
}

// TestSandboxHidesMetadata: Landlock restricts opening a file, not
// reading its metadata, so every sandbox also refuses the calls that read
// a path's metadata without opening it — stat, readlink, access, an
// O_PATH open, getxattr, chdir — on a file of its host's, outside every
// grant, and inside a directory it may read (where opening and reading
// the file still work) or write (the file sink's, which writes without
// a stat: TestFileSinkPluginStaysInItsDirectory delivers through it).
func TestSandboxHidesMetadata(t *testing.T) {
	requireLandlock(t)
	allowed := t.TempDir()
	host, inside := filepath.Join(t.TempDir(), "caphost.yaml"), filepath.Join(allowed, "allowed.txt")
	for _, f := range []string{host, inside} {
		require.NoError(t, os.WriteFile(f, []byte("x"), 0o600))
	}
	// Two probes per call: a receipt's code is at most 64 bytes.
	probes := func(p *transport.Plugin, f string) string {
		var got []string
		for _, pair := range [][2]string{{"stat", "readlink"}, {"access", "opath"}, {"getxattr", "chdir"}} {
			a, b := f, f
			if pair[1] == "chdir" {
				b = filepath.Dir(f)
			}
			got = append(got, probe(t, p, [2]string{pair[0], a}, [2]string{pair[1], b}))
		}
		return strings.Join(got, ".")
	}
	const hidden = "stat-denied.readlink-denied.access-denied.opath-denied.getxattr-denied.chdir-denied"

	_, port := listen(t)
	p := launchProbe(t, map[string]string{"allow-dir": allowed, "network": "true", "allow-port": port}, nil)
	require.True(t, p.Sandboxed().Sockets, "the metadata rules are part of the seccomp filter")
	for _, f := range []string{host, inside} {
		assert.Equal(t, hidden, probes(p, f), f)
	}
	// What a network transport does still works: reading a granted file,
	// the system CA pool, and a name resolved through /etc/hosts.
	roots := "roots-ok"
	if pool, err := x509.SystemCertPool(); err != nil || pool.Equal(x509.NewCertPool()) {
		roots = "roots-empty"
	}
	assert.Equal(t, "read-ok."+roots, probe(t, p, [2]string{"read", inside}, [2]string{"roots", ""}))
	assert.Equal(t, "connect-ok", probe(t, p, [2]string{"connect", "localhost:" + port}))

	// A sandbox that writes (the file sink's) hides them too, even in
	// its own directory.
	w := launchProbe(t, map[string]string{"allow-dir": allowed, "write-dir": allowed}, nil)
	for _, f := range []string{host, inside} {
		assert.Equal(t, hidden, probes(w, f), f)
	}
}

// TestSandboxHidesPathExistence: a sandbox granted no file (the network
// transports' brokered sandbox, and the bare one) cannot tell a path
// that exists from one that does not: every open is refused alike.
// Landlock alone answers ENOENT for a missing path and EACCES for an
// existing one. The brokered plugin still has the system CA pool, read
// before the filter went on.
func TestSandboxHidesPathExistence(t *testing.T) {
	requireLandlock(t)
	exists := filepath.Join(t.TempDir(), "secret.key")
	require.NoError(t, os.WriteFile(exists, []byte("x"), 0o600))
	missing := filepath.Join(t.TempDir(), "no-such-file")
	roots := "roots-ok"
	if pool, err := x509.SystemCertPool(); err != nil || pool.Equal(x509.NewCertPool()) {
		roots = "roots-empty"
	}
	_, port := listen(t)
	brokered := launchProbe(t, map[string]string{"network": "true", "dial": "127.0.0.1:" + port}, nil)
	assert.Equal(t, "read-denied.read-denied", probe(t, brokered, [2]string{"read", exists}, [2]string{"read", missing}))
	assert.Equal(t, "write-denied."+roots, probe(t, brokered, [2]string{"write", missing}, [2]string{"roots", ""}))
	bare := launchProbe(t, map[string]string{}, nil)
	assert.Equal(t, "read-denied.read-denied", probe(t, bare, [2]string{"read", exists}, [2]string{"read", missing}))
}

// TestSandboxHidesPathExistenceWithFileGrants: a sandbox granted files
// (the file sink's directory to write, here one to read too) runs in a
// root of its own that holds only its grants: a file beside them, a file
// of the host's elsewhere, one of the system's, and paths that exist
// nowhere all answer alike, missing, and so on each of eight threads
// that were running before the sandbox was applied. What it is granted
// it still reads, and writes where it may. Launched in the host's
// namespaces (the fallback), Landlock alone tells an existing path
// (denied) from a missing one, and the level says paths are not hidden.
func TestSandboxHidesPathExistenceWithFileGrants(t *testing.T) {
	requireLandlock(t)
	parent := t.TempDir()
	readable, writable := filepath.Join(parent, "read"), filepath.Join(parent, "sink")
	require.NoError(t, os.Mkdir(readable, 0o700))
	require.NoError(t, os.Mkdir(writable, 0o700))
	inside := filepath.Join(readable, "allowed.txt")
	beside, host := filepath.Join(parent, "secret.key"), filepath.Join(t.TempDir(), "caphost.yaml")
	for _, f := range []string{inside, beside, host} {
		require.NoError(t, os.WriteFile(f, []byte("x"), 0o600))
	}
	missing, missingElsewhere := filepath.Join(parent, "no-such-file"), filepath.Join(t.TempDir(), "no-such-file")
	settings := func() map[string]string { return map[string]string{"allow-dir": readable, "write-dir": writable} }

	p := launchProbe(t, settings(), nil)
	require.True(t, p.Sandboxed().Paths, "the plugin runs in a root of its own")
	assert.Equal(t, "read-missing.read-missing.read-missing", probe(t, p,
		[2]string{"read", beside}, [2]string{"read", host}, [2]string{"read", "/etc/passwd"}))
	assert.Equal(t, "read-missing.read-missing.read-missing", probe(t, p,
		[2]string{"read", missing}, [2]string{"read", missingElsewhere}, [2]string{"read", "/etc/no-such-file"}))
	// Beside the grants, creating a file is refused whether or not one
	// is there (the root is read-only); elsewhere the directory is gone.
	assert.Equal(t, "write-denied.write-denied.write-missing", probe(t, p,
		[2]string{"write", beside}, [2]string{"write", missing}, [2]string{"write", missingElsewhere}))
	assert.Equal(t, "threads-missing.threads-missing.threads-ok", probe(t, p,
		[2]string{"threads", beside}, [2]string{"threads", missing}, [2]string{"threads", inside}))
	assert.Equal(t, "read-ok.write-ok.write-denied", probe(t, p, [2]string{"read", inside},
		[2]string{"write", filepath.Join(writable, "intent.json")}, [2]string{"write", filepath.Join(readable, "new.txt")}))
	assert.FileExists(t, filepath.Join(writable, "intent.json"))
	assert.NoFileExists(t, filepath.Join(readable, "new.txt"))
	assert.NoFileExists(t, missing)

	shared, _ := launchPlugin(t, "misbehaving", "probe", withMode(settings()), transport.WithRefusedNamespaces)
	require.False(t, shared.Sandboxed().Paths)
	assert.Equal(t, "read-denied.read-missing", probe(t, shared, [2]string{"read", beside}, [2]string{"read", missing}),
		"in the host's namespaces, Landlock alone answers")
	assert.Equal(t, "read-ok", probe(t, shared, [2]string{"read", inside}))
}

// TestSandboxRootFollowsGrantLinks: a granted path that is a symbolic
// link (relative or absolute) leads the plugin, in its own root, where it
// leads on the host: the link is recreated and its target mounted at its
// own path, so both names reach the grant, and what lies beside the
// target stays missing.
func TestSandboxRootFollowsGrantLinks(t *testing.T) {
	requireLandlock(t)
	parent, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	real, sink := filepath.Join(parent, "real"), filepath.Join(parent, "sink")
	require.NoError(t, os.Mkdir(real, 0o700))
	require.NoError(t, os.Mkdir(sink, 0o700))
	inside, beside := filepath.Join(real, "allowed.txt"), filepath.Join(parent, "secret.key")
	require.NoError(t, os.WriteFile(inside, []byte("x"), 0o600))
	require.NoError(t, os.WriteFile(beside, []byte("x"), 0o600))
	rel, abs := filepath.Join(parent, "rel"), filepath.Join(parent, "abs")
	require.NoError(t, os.Symlink("real", rel))
	require.NoError(t, os.Symlink(sink, abs))

	p := launchProbe(t, map[string]string{"allow-dir": rel, "write-dir": abs}, nil)
	require.True(t, p.Sandboxed().Paths)
	assert.Equal(t, "read-ok.read-ok.read-missing", probe(t, p,
		[2]string{"read", filepath.Join(rel, "allowed.txt")}, [2]string{"read", inside}, [2]string{"read", beside}))
	assert.Equal(t, "write-ok.write-ok", probe(t, p,
		[2]string{"write", filepath.Join(abs, "a.json")}, [2]string{"write", filepath.Join(sink, "b.json")}))
	assert.FileExists(t, filepath.Join(sink, "a.json"))
	assert.FileExists(t, filepath.Join(sink, "b.json"))
}

// TestSandboxRootNestsGrants: a directory to write inside one to read
// is mounted over it, writable, while the rest of the readable one stays
// read-only; both read.
func TestSandboxRootNestsGrants(t *testing.T) {
	requireLandlock(t)
	parent := t.TempDir()
	sink := filepath.Join(parent, "sink")
	require.NoError(t, os.Mkdir(sink, 0o700))
	file := filepath.Join(parent, "config.txt")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))

	p := launchProbe(t, map[string]string{"allow-dir": parent, "write-dir": sink}, nil)
	require.True(t, p.Sandboxed().Paths)
	assert.Equal(t, "read-ok.write-ok.write-denied", probe(t, p, [2]string{"read", file},
		[2]string{"write", filepath.Join(sink, "a.json")}, [2]string{"write", filepath.Join(parent, "b.json")}))
	assert.FileExists(t, filepath.Join(sink, "a.json"))
	assert.NoFileExists(t, filepath.Join(parent, "b.json"))
}

// TestSandboxFallsBackToHostNamespaces: where the kernel refuses a
// plugin namespaces of its own (here an id map it refuses with EINVAL,
// as a kernel with user namespaces off refuses the clone), the plugin
// runs on in the host's namespaces, confined by Landlock and the filter
// as before, and says why; it reports that it does not hide paths, and
// so does the level's label. The host warns once, not at each restart.
func TestSandboxFallsBackToHostNamespaces(t *testing.T) {
	abi := requireLandlock(t)
	var buf logtest.Buffer
	dir := t.TempDir()
	exists := filepath.Join(t.TempDir(), "secret.key")
	require.NoError(t, os.WriteFile(exists, []byte("x"), 0o600))
	p, rec := launchPlugin(t, "misbehaving", "probe", withMode(map[string]string{"write-dir": dir}), func(c *transport.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
		transport.WithRefusedNamespaces(c)
	})
	want := transport.SandboxLevel{LandlockABI: min(abi, 11), FS: true, TCP: true, UDP: abi >= 10, Sockets: true, Hosts: true}
	assert.Equal(t, want, p.Sandboxed())
	assert.NotContains(t, p.Sandboxed().Restricted(), "paths")
	assert.Equal(t, "write-ok.read-denied", probe(t, p,
		[2]string{"write", filepath.Join(dir, "a.json")}, [2]string{"read", exists}))

	require.NoError(t, syscall.Kill(transport.PluginPID(p), syscall.SIGKILL))
	wait(t, rec.restarts)
	require.NoError(t, wait(t, rec.launches))
	assert.Equal(t, "write-ok", probe(t, p, [2]string{"write", filepath.Join(dir, "b.json")}))
	assert.Equal(t, want, p.Sandboxed())
	assert.Equal(t, 1, strings.Count(buf.String(), `"msg":"transport plugin sandbox does not hide paths`), buf.String())
	assert.Equal(t, 2, strings.Count(buf.String(), `"plugin_msg":"transport sandbox does not hide paths`), "the plugin's, at each launch")
	assert.Contains(t, buf.String(), "the kernel refused namespaces of its own")
	assert.Contains(t, buf.String(), "invalid argument")
}

// withMode is settings for the test plugin's probe mode.
func withMode(settings map[string]string) map[string]string {
	settings["mode"] = "probe"
	return settings
}

// TestSandboxNetworkBase: a network transport's sandbox lets it read the
// system CA pool, which a sandbox without the network base does not. The
// resolver configuration is granted only to a sandbox that makes its own
// sockets (ConnectTCP): one whose connections the host's broker dials
// needs none.
func TestSandboxNetworkBase(t *testing.T) {
	requireLandlock(t)
	// What the host sees unconfined is what the plugin must see.
	_, err := os.ReadFile("/etc/resolv.conf")
	require.NoError(t, err, "this test needs /etc/resolv.conf")
	roots := "roots-ok"
	if pool, err := x509.SystemCertPool(); err != nil || pool.Equal(x509.NewCertPool()) {
		roots = "roots-empty"
	}
	_, port := listen(t)

	direct := launchProbe(t, map[string]string{"network": "true", "allow-port": port}, nil)
	assert.Equal(t, "read-ok."+roots, probe(t, direct, [2]string{"read", "/etc/resolv.conf"}, [2]string{"roots", ""}))
	brokered := launchProbe(t, map[string]string{"network": "true", "dial": "127.0.0.1:" + port}, nil)
	assert.Equal(t, "read-denied."+roots, probe(t, brokered, [2]string{"read", "/etc/resolv.conf"}, [2]string{"roots", ""}))
	bare := launchProbe(t, map[string]string{}, nil)
	assert.Equal(t, "read-denied.roots-denied", probe(t, bare, [2]string{"read", "/etc/resolv.conf"}, [2]string{"roots", ""}))
}

// TestFileSinkPluginStaysInItsDirectory: the real file sink plugin's
// grant is its directory itself. Moved away and replaced by a link to
// another directory after launch, the path leads the plugin nowhere
// else: in its own root the path is a mount of the directory itself, so
// the document lands in the moved directory; launched in the host's
// namespaces, the link leads somewhere Landlock lets it not write, and
// the delivery is refused. Either way nothing lands in the other
// directory. Unconfined, the sink would follow the link and write there.
func TestFileSinkPluginStaysInItsDirectory(t *testing.T) {
	requireLandlock(t)
	for name, shared := range map[string]bool{"own root": false, "host's namespaces": true} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			dir, elsewhere := filepath.Join(root, "sink"), filepath.Join(root, "elsewhere")
			require.NoError(t, os.Mkdir(dir, 0o700))
			require.NoError(t, os.Mkdir(elsewhere, 0o700))
			var mod func(*transport.Config)
			if shared {
				mod = transport.WithoutNamespaces
			}
			p, _ := launchFile(t, dir, mod)
			require.Equal(t, !shared, p.Sandboxed().Paths)
			require.Equal(t, "file-written", p.Deliver(context.Background(), message(t, "intent-1")).Code)
			// A redelivery finds the name taken without a stat (which the
			// sandbox refuses).
			require.Equal(t, "file-exists", p.Deliver(context.Background(), message(t, "intent-1")).Code)

			require.NoError(t, os.Rename(dir, dir+".moved"))
			require.NoError(t, os.Symlink(elsewhere, dir))
			r := p.Deliver(context.Background(), message(t, "intent-2"))
			if shared {
				assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "file-create-failed"}, r)
			} else {
				assert.Equal(t, transport.Receipt{Outcome: transport.Accepted, Code: "file-written", ProviderRef: "intent-2.json"}, r)
				assert.FileExists(t, filepath.Join(dir+".moved", "intent-2.json"))
			}
			entries, err := os.ReadDir(elsewhere)
			require.NoError(t, err)
			assert.Empty(t, entries)
			assert.FileExists(t, filepath.Join(dir+".moved", "intent-1.json"))
		})
	}
}

// listenAt is a TCP listener on addr that accepts and closes connections
// until the test ends.
func listenAt(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return l
}

// listenOn is listenAt's address.
func listenOn(t *testing.T, addr string) string {
	t.Helper()
	return listenAt(t, addr).Addr().String()
}

// TestSandboxBrokerDialsOnlyDeclaredHosts: a sandbox with broker targets
// (Sandbox.Dial) makes no internet socket of its own — not TCP to the
// declared target itself, not Multipath TCP, not UDP to any port — and
// the host's broker dials the declared host:port only: not the declared
// port on another loopback address, not another local port (a stand-in
// for Redis), not a name it was never given. The refusals are logged
// without the address.
func TestSandboxBrokerDialsOnlyDeclaredHosts(t *testing.T) {
	abi := requireLandlock(t)
	declared := listenOn(t, "127.0.0.1:0")
	_, port, err := net.SplitHostPort(declared)
	require.NoError(t, err)
	sameport := listenOn(t, "127.0.0.2:"+port)
	redis := listenOn(t, "127.0.0.1:0")
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = udp.Close() })

	var buf logtest.Buffer
	p, rec := launchPlugin(t, "misbehaving", "probe", map[string]string{"mode": "probe", "dial": declared, "network": "true"},
		func(c *transport.Config) { c.Logger = slog.New(slog.NewJSONHandler(&buf, nil)) })
	assert.Equal(t, "broker-ok.broker-denied.broker-denied", probe(t, p,
		[2]string{"broker", declared}, [2]string{"broker", sameport}, [2]string{"broker", redis}))
	assert.Equal(t, "broker-denied.broker-denied.broker-ok", probe(t, p,
		[2]string{"broker", "localhost:" + port}, [2]string{"broker", "[::1]:" + port}, [2]string{"broker", declared}))
	assert.Equal(t, "connect-denied.mptcp-denied.udp-denied", probe(t, p,
		[2]string{"connect", declared}, [2]string{"mptcp", redis}, [2]string{"udp", udp.LocalAddr().String()}))
	assert.Equal(t, "udp-denied.udp-denied.bind-denied", probe(t, p,
		[2]string{"udp", "127.0.0.1:53"}, [2]string{"udp", "8.8.8.8:53"}, [2]string{"bind", "127.0.0.1:0"}))
	// No resolver configuration: the host resolves for it.
	assert.Equal(t, "read-denied.read-denied", probe(t, p,
		[2]string{"read", "/etc/resolv.conf"}, [2]string{"read", "/etc/hosts"}))

	want := transport.SandboxLevel{LandlockABI: min(abi, 11), FS: true, TCP: true, UDP: abi >= 10, Sockets: true, Hosts: true, Paths: true}
	assert.Equal(t, want, p.Sandboxed())
	assert.Equal(t, "fs,tcp,sockets,hosts,paths", transport.SandboxLevel{FS: true, TCP: true, Sockets: true, Hosts: true, Paths: true}.Restricted())
	assert.Contains(t, buf.String(), `"plugin_msg":"transport sandbox applied"`)
	assert.Contains(t, buf.String(), `"plugin_dial_targets":"1"`)
	assert.Contains(t, buf.String(), `"msg":"transport broker refused a dial"`)
	assert.Contains(t, buf.String(), `"reason":"not-declared"`)
	assert.Equal(t, 4, rec.refusals("not-declared"), "counted for the metrics")
	assert.NotContains(t, buf.String(), "127.0.0.2")
	assert.NotContains(t, buf.String(), redis)
}

// TestSandboxBrokerDNS: a declared target whose name does not resolve
// fails as a DNS failure, resolved by the host (the plugin reads no
// resolver configuration); a target refusing the connection is refused.
func TestSandboxBrokerDNS(t *testing.T) {
	requireLandlock(t)
	_, closed := listen(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := l.Addr().String()
	require.NoError(t, l.Close())
	_ = closed
	p := launchProbe(t, map[string]string{"dial": "no-such-host.invalid:443", "dial.2": refused}, nil)
	assert.Equal(t, "broker-dns.broker-refused", probe(t, p,
		[2]string{"broker", "no-such-host.invalid:443"}, [2]string{"broker", refused}))
}

// TestSandboxBrokerTargetsFromSettings: a plugin may declare only
// targets whose host its operator configured: one naming a host no
// setting mentions is refused at launch, and nothing keeps running.
func TestSandboxBrokerTargetsFromSettings(t *testing.T) {
	path, sum := pluginBin(t, "misbehaving")
	_, err := transport.Launch(context.Background(), transport.Config{Name: "probe", Path: path, SHA256: sum,
		Settings: map[string]string{"mode": "probe", "dial-unlisted": "true"}})
	require.ErrorIs(t, err, transport.ErrLaunch)
	assert.Contains(t, err.Error(), "dial target 0 not in the settings")
}

// brokerGoroutines counts the host broker goroutines reading a plugin's
// socket in this process.
func brokerGoroutines() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "transport.(*broker).serve(")
}

// TestSandboxBrokerAcrossRestart: a restarted plugin gets a fresh broker
// socket pair and its declared target again; the killed process's
// broker goroutines are gone, and so are the last one's once the plugin
// is closed.
func TestSandboxBrokerAcrossRestart(t *testing.T) {
	requireLandlock(t)
	_, port := listen(t)
	target := "127.0.0.1:" + port
	before := brokerGoroutines()
	p, rec := launchPlugin(t, "misbehaving", "probe", map[string]string{"mode": "probe", "dial": target}, nil)
	assert.Equal(t, "broker-ok", probe(t, p, [2]string{"broker", target}))
	assert.Equal(t, before+1, brokerGoroutines())

	pid := transport.PluginPID(p)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	wait(t, rec.restarts)
	require.NoError(t, wait(t, rec.launches))
	assert.Equal(t, "broker-ok.broker-denied", probe(t, p, [2]string{"broker", target}, [2]string{"broker", "127.0.0.1:6379"}))
	assert.True(t, p.Sandboxed().Hosts)
	assert.Equal(t, before+1, brokerGoroutines(), "the killed process's broker ended")
	require.NoError(t, p.Close())
	assert.Equal(t, before, brokerGoroutines())
}
