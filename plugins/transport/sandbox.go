package transport

import (
	"crypto/x509"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// Sandbox is what a transport's plugin process may still do once it is
// configured. The plugin confines itself with Linux Landlock and a
// seccomp filter (see docs/transports.md) right after its Factory built
// the transport and before it answers the host: from then on it can open
// no file and reach no server outside what its Sandbox names, and bind no
// TCP port at all. Descriptors already open (go-plugin's socket, stdio,
// the broker socket) keep working. Paths must be absolute, not the root
// itself, and exist when the sandbox is applied. Where the host could give the plugin
// namespaces of its own (Linux), the plugin's root then holds only the
// paths its Sandbox grants, at their own paths: any other path is
// missing for it (SandboxLevel.Paths). A granted path is mounted, so
// the plugin keeps the file or directory it named then, even if the
// host later moves it or puts a link in its place.
//
// A network transport declares Dial: its connections are then made by
// the host's connect broker (through the Env its Factory gets), and the
// plugin may make no internet socket of its own. ConnectTCP is the
// older, weaker form (ports, not hosts) for a transport that must make
// its own sockets; a Sandbox has one or the other.
type Sandbox struct {
	// ReadDirs are file hierarchies whose files the plugin may read and
	// whose directories it may list.
	ReadDirs []string
	// ReadFiles are single files the plugin may read.
	ReadFiles []string
	// WriteDirs are file hierarchies the plugin may read and change:
	// create, write, truncate and remove files (a link within one
	// directory included), create and remove directories. Never granted:
	// executing, symlinks and special files, and linking or renaming a
	// file from one directory to another.
	WriteDirs []string
	// Dial are the "host:port" targets (ValidDialTarget, at most
	// MaxDialTargets) the host's connect broker dials for the plugin,
	// taken from the transport's settings. The host records them from
	// the Configure reply, once per process: no target can be added
	// later. Each host must be named by one of the transport's settings
	// (the host checks). Without ConnectTCP, the plugin may make no
	// internet socket (socket(2) for AF_INET and AF_INET6, and connect(2),
	// fail with EACCES where the seccomp filter is installed), so it
	// needs no name resolution: the host resolves.
	Dial []string
	// ConnectTCP are the TCP ports the plugin may connect to itself, on
	// any address: Landlock restricts ports, not hosts. Only a sandbox
	// with ConnectTCP may make internet sockets (TCP and UDP); UDP is
	// then unrestricted below Landlock ABI 10.
	ConnectTCP []uint16
	// Network adds what TLS verification needs, each path ignored when
	// missing: reading the CA bundles and directories crypto/x509 reads
	// on Linux and the trust stores they link into (not /etc/ssl/private
	// or /etc/pki/tls/private). With ConnectTCP it also adds what the
	// plugin's own name resolution needs: reading /etc/resolv.conf,
	// /etc/hosts, /etc/nsswitch.conf, /etc/gai.conf and
	// /run/systemd/resolve, connecting to TCP port 53 and, on kernels
	// that restrict UDP (Landlock ABI 10 and later), sending to UDP port
	// 53 from an ephemeral port. Without ConnectTCP and without file
	// grants, the CA pool is read once when the sandbox is applied, and
	// the plugin then opens no path at all.
	Network bool
}

// Sandboxed is implemented by a Transport that declares its Sandbox. The
// plugin of a transport that does not is confined to nothing at all: no
// file, no TCP connection.
type Sandboxed interface {
	Sandbox() Sandbox
}

// resolverReadFiles are the files a sandbox that resolves names itself
// (Sandbox.Network with ConnectTCP) may read, each ignored when missing:
// Go's resolver configuration (its pure-Go resolver reads resolv.conf,
// hosts and nsswitch.conf; gai.conf is glibc's). resolverReadDirs is
// systemd-resolved's directory (a resolv.conf linked there is replaced
// in it).
var (
	resolverReadFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf"}
	resolverReadDirs  = []string{"/run/systemd/resolve"}
)

// networkReadFiles are the files a network transport's sandbox may read
// (Sandbox.Network), each ignored when missing: the CA bundles
// crypto/x509 looks for on Linux. A bundle that is a symlink is granted
// at its target.
var networkReadFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch (a link into /etc/ca-certificates)
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine
}

// networkReadDirs are the directories a network transport's sandbox may
// read, each ignored when missing: the CA directories crypto/x509 reads
// on Linux and the distributions' trust stores their entries link to.
// /etc/ssl and /etc/pki as a whole are not granted: their private/
// directories hold TLS keys.
var networkReadDirs = []string{
	"/etc/ssl/certs", "/etc/pki/tls/certs", "/etc/pki/ca-trust",
	"/etc/ca-certificates", "/usr/share/ca-certificates", "/usr/local/share/ca-certificates",
	"/usr/local/share/certs",
}

// dnsPort is the port a network sandbox that resolves names itself may
// connect to.
const dnsPort = 53

// Access rights of Sandbox's read and write entries; see Sandbox.
const (
	accessRead  = landlock.AccessFSSet(ll.AccessFSReadFile | ll.AccessFSReadDir)
	accessWrite = accessRead | landlock.AccessFSSet(ll.AccessFSWriteFile|ll.AccessFSTruncate|
		ll.AccessFSMakeReg|ll.AccessFSRemoveFile|ll.AccessFSMakeDir|ll.AccessFSRemoveDir)
)

// maxLandlockABI is the newest Landlock ABI this build applies
// (go-landlock's V11); a newer kernel is used at that level.
const maxLandlockABI = 11

// SandboxLevel is what a plugin process reported of its own confinement
// when it was configured. The zero value is an unconfined plugin: a
// kernel without Landlock, or a plugin that predates sandboxes.
type SandboxLevel struct {
	// LandlockABI is the Landlock ABI version the plugin confined itself
	// with: the kernel's, at most the newest this build knows; 0 none.
	LandlockABI int
	// FS: opening files is limited to the Sandbox's paths (ABI 1+).
	FS bool
	// TCP: connect and bind are limited to the Sandbox's ports (ABI 4+).
	TCP bool
	// UDP: connect and send are limited to DNS, bind to an ephemeral
	// port (ABI 10+; earlier kernels leave UDP open).
	UDP bool
	// Sockets: new sockets are limited to TCP and UDP over IP (and
	// netlink) by a seccomp filter: no Multipath TCP, which Landlock's
	// TCP rules do not cover, no unix, SCTP or other socket, no io_uring,
	// and no change of a file's mode, owner, times or extended
	// attributes, which Landlock does not cover either, and no reading of
	// a path's metadata (stat, readlink, access, getxattr, O_PATH)
	// (Linux on amd64 and arm64). Without it, TCP is not a boundary.
	Sockets bool
	// Hosts: the plugin may make no internet socket of its own and call
	// no connect(2) (the seccomp filter, so only with Sockets): it reaches
	// only the host:port targets the host's connect broker dials for it
	// (Sandbox.Dial), over TCP, and no UDP at all.
	Hosts bool
	// Paths: the plugin's root is a file system of its own holding only
	// the paths its Sandbox grants, in its own user and mount namespace,
	// so that any other path does not exist for it, whether or not it
	// exists on the host (Linux; only with Sockets, whose filter keeps
	// the plugin from changing its mounts). Without it, a sandbox with
	// file grants can tell an existing path (EACCES) from a missing one
	// (ENOENT).
	Paths bool
}

// String is the Landlock ABI and what is restricted, for example
// "landlock-v7:fs,tcp,sockets"; "none" for an unconfined plugin.
func (l SandboxLevel) String() string {
	r := l.Restricted()
	if l.LandlockABI == 0 {
		return r
	}
	return fmt.Sprintf("landlock-v%d:%s", l.LandlockABI, r)
}

// Restricted lists what is restricted, a bounded label value: "fs",
// "tcp", "udp", "sockets", "hosts" and "paths" in that order, joined by
// commas, or "none".
func (l SandboxLevel) Restricted() string {
	var r []string
	for _, x := range []struct {
		on   bool
		name string
	}{{l.FS, "fs"}, {l.TCP, "tcp"}, {l.UDP, "udp"}, {l.Sockets, "sockets"}, {l.Hosts, "hosts"}, {l.Paths, "paths"}} {
		if x.on {
			r = append(r, x.name)
		}
	}
	if len(r) == 0 {
		return "none"
	}
	return strings.Join(r, ",")
}

// complete: files, TCP ports and the socket kinds are all restricted.
func (l SandboxLevel) complete() bool { return l.FS && l.TCP && l.Sockets }

// valid: a level only claims what its ABI can restrict.
func (l SandboxLevel) valid() bool {
	switch {
	case l.LandlockABI < 0 || l.LandlockABI > 255:
		return false
	case (l.Hosts || l.Paths) && !l.Sockets:
		return false
	case l.LandlockABI == 0:
		return !l.FS && !l.TCP && !l.UDP
	}
	return (!l.TCP || l.LandlockABI >= 4) && (!l.UDP || l.LandlockABI >= 10)
}

// levelFor is what Landlock ABI abi restricts.
func levelFor(abi int) SandboxLevel {
	abi = min(abi, maxLandlockABI)
	if abi <= 0 {
		return SandboxLevel{}
	}
	return SandboxLevel{LandlockABI: abi, FS: true, TCP: abi >= 4, UDP: abi >= 10}
}

// errSandbox wraps a sandbox that could not be applied.
var errSandbox = errors.New("transport: sandbox")

// direct: the plugin makes its own internet sockets (ConnectTCP).
func (sb Sandbox) direct() bool { return len(sb.ConnectTCP) > 0 }

// check refuses a relative path, the root itself, a malformed, duplicate
// or excess Dial target, and Dial with ConnectTCP.
func (sb Sandbox) check() error {
	for _, p := range [][]string{sb.ReadDirs, sb.ReadFiles, sb.WriteDirs} {
		for _, path := range p {
			switch {
			case !filepath.IsAbs(path):
				return fmt.Errorf("%w: path not absolute", errSandbox)
			case filepath.Clean(path) == "/":
				// The whole file system is no sandbox, and a plugin's own
				// root could not hold it writable.
				return fmt.Errorf("%w: the root granted", errSandbox)
			}
		}
	}
	if err := checkDialTargets(sb.Dial); err != nil {
		return fmt.Errorf("%w: %w", errSandbox, err)
	}
	if len(sb.Dial) > 0 && sb.direct() {
		return fmt.Errorf("%w: dial targets and tcp ports together", errSandbox)
	}
	return nil
}

// checkDialTargets: at most MaxDialTargets valid, distinct targets.
func checkDialTargets(ts []string) error {
	if len(ts) > MaxDialTargets {
		return fmt.Errorf("dial: more than %d targets", MaxDialTargets)
	}
	for i, t := range ts {
		if !ValidDialTarget(t) {
			return fmt.Errorf("dial: target %d not host:port", i)
		}
		for _, u := range ts[:i] {
			if u == t {
				return fmt.Errorf("dial: target %d repeated", i)
			}
		}
	}
	return nil
}

// rules turns sb into Landlock rules; sb must pass check. Without
// ConnectTCP no TCP connect or bind and (from ABI 10) no UDP is granted
// at all: a brokered socket is connected already, and a plugin that
// disconnected one (connect with AF_UNSPEC) could not connect it
// elsewhere.
func (sb Sandbox) rules() ([]landlock.Rule, error) {
	if err := sb.check(); err != nil {
		return nil, err
	}
	var rules []landlock.Rule
	if len(sb.ReadDirs) > 0 {
		rules = append(rules, landlock.PathAccess(accessRead, sb.ReadDirs...))
	}
	if len(sb.ReadFiles) > 0 {
		rules = append(rules, landlock.PathAccess(ll.AccessFSReadFile, sb.ReadFiles...))
	}
	if len(sb.WriteDirs) > 0 {
		rules = append(rules, landlock.PathAccess(accessWrite, sb.WriteDirs...))
	}
	for _, port := range sb.ConnectTCP {
		rules = append(rules, landlock.ConnectTCP(port))
	}
	if sb.Network {
		rules = append(rules,
			landlock.PathAccess(ll.AccessFSReadFile, networkReadFiles...).IgnoreIfMissing(),
			landlock.PathAccess(accessRead, networkReadDirs...).IgnoreIfMissing())
	}
	if sb.Network && sb.direct() {
		rules = append(rules,
			landlock.PathAccess(ll.AccessFSReadFile, resolverReadFiles...).IgnoreIfMissing(),
			landlock.PathAccess(accessRead, resolverReadDirs...).IgnoreIfMissing(),
			landlock.ConnectTCP(dnsPort),
			// Honoured from ABI 10 on: a UDP socket is bound to an
			// ephemeral port when it first sends (bind port 0 covers
			// that), and sends only to DNS.
			landlock.BindUDP(0), landlock.ConnectSendUDP(dnsPort))
	}
	return rules, nil
}

// opensNothing reports whether the plugin needs no open of a path once
// confined: no file granted, and no resolver of its own (a network
// sandbox with ConnectTCP reads resolv.conf at each lookup). The filter
// then refuses every open, so that a path that does not exist and one
// that exists fail alike (Landlock alone answers ENOENT for the first).
func (sb Sandbox) opensNothing() bool {
	return len(sb.ReadDirs) == 0 && len(sb.ReadFiles) == 0 && len(sb.WriteDirs) == 0 && !(sb.Network && sb.direct())
}

// ports is the TCP ports sb may connect to, for a log line: "443,53",
// or "none".
func (sb Sandbox) ports() string {
	var ps []string
	for _, p := range sb.ConnectTCP {
		ps = append(ps, strconv.Itoa(int(p)))
	}
	if sb.Network && sb.direct() {
		ps = append(ps, strconv.Itoa(dnsPort))
	}
	if len(ps) == 0 {
		return "none"
	}
	return strings.Join(ps, ",")
}

// confine applies sb to the whole calling process with the strongest
// Landlock ABI the kernel has (up to maxLandlockABI), then restricts the
// kinds of socket it may open (none of the internet's without
// ConnectTCP), the changing and the reading of file metadata
// (restrictSockets), and reports the level reached; a kernel without
// Landlock or seccomp leaves that part
// unrestricted. What Landlock handles and sb does not grant is denied:
// every file, TCP connect and bind, UDP where the ABI restricts it, and
// (ABI 6+) signals and abstract unix sockets reaching outside the
// plugin's own Landlock domain.
//
// First, in the plugin's own namespaces (host names the host's, from
// envNamespaces), it makes the plugin's root hold only sb's grants
// (hidePaths); shown reports why that was not done (wrapping
// errPathsShown), and the rest applies either way.
func confine(sb Sandbox, host string) (level SandboxLevel, shown, err error) {
	rules, err := sb.rules()
	if err != nil {
		return SandboxLevel{}, nil, err
	}
	if shown = hidePaths(sb, host); shown != nil && !errors.Is(shown, errPathsShown) {
		return SandboxLevel{}, nil, shown
	}
	if abi, err := ll.LandlockGetABIVersion(); err == nil && abi > 0 {
		if err := landlock.V11.BestEffort().Restrict(rules...); err != nil {
			return SandboxLevel{}, nil, fmt.Errorf("%w: %w", errSandbox, err)
		}
		level = levelFor(abi)
	}
	if sb.opensNothing() && sb.Network {
		// The system CA pool is read once, now: afterwards the filter
		// refuses every open (see opensNothing), and crypto/x509 keeps
		// the pool for the process's life. A failure leaves it empty,
		// as reading it later would have.
		_, _ = x509.SystemCertPool()
	}
	if level.Sockets, err = restrictSockets(!sb.direct(), sb.opensNothing()); err != nil {
		return SandboxLevel{}, nil, err
	}
	level.Hosts = level.Sockets && !sb.direct()
	// Without the filter the plugin could change its mounts back.
	level.Paths = level.Sockets && shown == nil
	if shown == nil && !level.Sockets {
		shown = fmt.Errorf("%w: no seccomp filter keeps the mounts as they are", errPathsShown)
	}
	return level, shown, nil
}
