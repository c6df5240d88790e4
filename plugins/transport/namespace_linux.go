package transport

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// isolate asks the plugin cmd starts to run in a user and mount
// namespace of its own (enterNamespaces), naming the host's in its
// environment (envNamespaces). It leaves cmd as it was when the host
// cannot name its own namespaces (no /proc): the plugin could not tell
// them apart, and says so.
func isolate(cmd *exec.Cmd) {
	if ids, err := namespaceIDs(); err == nil {
		cmd.Env = append(cmd.Env, envNamespaces+"="+ids)
	}
}

// namespaceIDs names the calling process's mount and user namespaces by
// device and inode: "mnt:D:I,user:D:I".
func namespaceIDs() (string, error) {
	var ids []string
	for _, ns := range []string{"mnt", "user"} {
		var st unix.Stat_t
		if err := unix.Stat("/proc/self/ns/"+ns, &st); err != nil {
			return "", fmt.Errorf("%w: %s namespace: %w", errPathsShown, ns, err)
		}
		ids = append(ids, fmt.Sprintf("%s:%d:%d", ns, st.Dev, st.Ino))
	}
	return strings.Join(ids, ","), nil
}

// enteredPrefix marks envNamespaces in the process enterNamespaces
// started in new namespaces.
const enteredPrefix = "entered:"

// enterNamespaces puts the plugin in a user and mount namespace of its
// own when the host asked for it (envNamespaces), before anything else
// runs: it starts its own binary again (/proc/self/exe, the image the
// host checked) in new namespaces, the host's uid and gid mapped to root
// there and nothing else, with the same arguments, environment, stdio
// and broker descriptor, waits for it and exits with its status. Killed
// by the host, or left by it, this process takes the new one with it
// (Pdeathsig, exitWithParent). It returns in the process that is to
// serve: host names the host's namespaces when that process runs in new
// ones; otherwise host is "" and err (wrapping errPathsShown) says why.
//
// The host cannot start the plugin in new namespaces itself: caphost
// serve is not dumpable (PR_SET_DUMPABLE 0), which a child inherits
// until it execs, and only root may write the id maps of such a child
// (EACCES otherwise). The plugin's own image is dumpable.
func enterNamespaces() (host string, err error) {
	host = os.Getenv(envNamespaces)
	if entered, ok := strings.CutPrefix(host, enteredPrefix); ok {
		return entered, nil
	}
	if host == "" {
		return "", fmt.Errorf("%w: launched in the host's namespaces", errPathsShown)
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envNamespaces+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, envNamespaces+"="+enteredPrefix+host)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	var broker *os.File
	if _, err := unix.FcntlInt(brokerFD, unix.F_GETFD, 0); err == nil {
		broker = os.NewFile(brokerFD, "broker")
		cmd.ExtraFiles = []*os.File{broker}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		// Unprivileged, a gid map needs setgroups(2) denied.
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
	refuseNamespacesForTest(cmd.SysProcAttr)
	// Pdeathsig follows the thread that started the child: this one,
	// locked for the process's life.
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		return "", fmt.Errorf("%w: the kernel refused namespaces of its own: %w", errPathsShown, err)
	}
	if broker != nil {
		_ = broker.Close() // the new process's now: the host reads its end
	}
	signal.Ignore(os.Interrupt) // as go-plugin's server does
	go exitWithParent(os.Getppid(), time.Second)
	_ = cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if code < 0 {
		code = 1 // killed by a signal
	}
	os.Exit(code)
	return "", nil // not reached
}

// grant is one path of a sandbox's root: where it is on the host with
// no symbolic link left in it (target), whether the plugin may change
// what is there, and the symbolic links met on the way from the path the
// sandbox names, recreated in the root so that path leads there too.
type grant struct {
	target string
	dir    bool
	write  bool
	links  []link
}

// link is a symbolic link on the host: at, a path with no link in its
// directory part, and its text.
type link struct{ at, text string }

// maxLinks bounds the symbolic links one path may pass, as the kernel's
// 40.
const maxLinks = 40

// grants are the paths sb lets the plugin open, as its Landlock rules
// name them, resolved on the host; those missing are left out (Landlock
// then refuses a rule that must exist, as without the namespace). A path
// granted twice is granted once, writable if either grant is.
func (sb Sandbox) grants() ([]grant, error) {
	type named struct {
		path  string
		write bool
	}
	var paths []named
	add := func(write bool, ps ...string) {
		for _, p := range ps {
			paths = append(paths, named{p, write})
		}
	}
	add(false, sb.ReadDirs...)
	add(false, sb.ReadFiles...)
	add(true, sb.WriteDirs...)
	if sb.Network {
		add(false, networkReadFiles...)
		add(false, networkReadDirs...)
	}
	if sb.Network && sb.direct() {
		add(false, resolverReadFiles...)
		add(false, resolverReadDirs...)
	}
	if abi, err := ll.LandlockGetABIVersion(); err == nil && abi > 0 && abi < 8 {
		// Below Landlock ABI 8, go-landlock built with cgo applies its
		// rules to every thread through libpsx, which then lists the
		// process's own /proc/PID/task; go-landlock grants that
		// directory (its issue 39), so the root must hold it. It names
		// the plugin's own threads only.
		add(false, fmt.Sprintf("/proc/%d/task", os.Getpid()))
	}
	byTarget := map[string]*grant{}
	var out []*grant
	for _, n := range paths {
		target, links, err := resolve(n.path)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR):
			continue
		case err != nil:
			return nil, fmt.Errorf("%w: resolving a grant: %w", errPathsShown, err)
		}
		fi, err := os.Lstat(target)
		if err != nil {
			return nil, fmt.Errorf("%w: resolving a grant: %w", errPathsShown, err)
		}
		g := byTarget[target]
		if g == nil {
			g = &grant{target: target, dir: fi.IsDir()}
			byTarget[target] = g
			out = append(out, g)
		}
		g.write = g.write || n.write
		g.links = append(g.links, links...)
	}
	// Parents first: a grant inside another is mounted over it, never
	// under it.
	slices.SortFunc(out, func(a, b *grant) int { return strings.Compare(a.target, b.target) })
	res := make([]grant, len(out))
	for i, g := range out {
		res[i] = *g
	}
	return res, nil
}

// resolve walks path on the host as the kernel would, component by
// component, and returns where it ends (no symbolic link left in it) and
// the links met on the way.
func resolve(path string) (string, []link, error) {
	var links []link
	at, rest := "/", path
	for {
		rest = strings.TrimLeft(rest, "/")
		if rest == "" {
			return at, links, nil
		}
		name, tail, _ := strings.Cut(rest, "/")
		rest = tail
		switch name {
		case ".":
			continue
		case "..":
			at = filepath.Dir(at)
			continue
		}
		next := filepath.Join(at, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", nil, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			at = next
			continue
		}
		if len(links) == maxLinks {
			return "", nil, unix.ELOOP
		}
		text, err := os.Readlink(next)
		if err != nil {
			return "", nil, err
		}
		links = append(links, link{at: next, text: text})
		if filepath.IsAbs(text) {
			at = "/"
		}
		rest = text + "/" + rest
	}
}

// inside: path is base or below it.
func inside(path, base string) bool {
	return path == base || base == "/" || strings.HasPrefix(path, base+"/")
}

// stagingDirs are where the new root is put together, the first that is
// a directory: any will do, the grants' mounts being taken before it is
// covered.
var stagingDirs = []string{"/tmp", "/mnt", "/run", "/var", "/etc"}

// rootSize bounds the new root's tmpfs: it holds directories, empty files
// and symbolic links only, each grant's mount point and the way to it.
const rootSize = "size=64k,nr_inodes=4096,mode=0755"

// hidePaths makes the plugin's root a tmpfs holding only sb's grants,
// each mounted at its own path (a bind of the host's, recursive,
// read-only unless written), and the symbolic links leading to them:
// every other path is missing for the plugin, existing on the host or
// not. It runs before Landlock, which refuses mount changes, and only in
// a user and mount namespace of the plugin's own: host names the host's
// (envNamespaces), and hidePaths checks that the process is in neither
// before it changes anything.
//
// Every thread of the process shares its root (Go's threads are cloned
// with CLONE_FS, and pivot_root(2) moves every root in the namespace). An
// error wrapping errPathsShown left the root as it was; any other means
// it was changed and could not be finished: the plugin must not run.
func hidePaths(sb Sandbox, host string) error {
	if host == "" {
		return fmt.Errorf("%w: launched in the host's namespaces", errPathsShown)
	}
	own, err := namespaceIDs()
	if err != nil {
		return err
	}
	for _, id := range strings.Split(own, ",") {
		if slices.Contains(strings.Split(host, ","), id) {
			return fmt.Errorf("%w: not in namespaces of its own", errPathsShown)
		}
	}
	grants, err := sb.grants()
	if err != nil {
		return err
	}
	// Mounts made from here on stay in this namespace, and pivot_root
	// needs the tree private.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("%w: making the mounts private: %w", errPathsShown, err)
	}
	// Each grant is taken as a detached copy of its mounts first, before
	// the staging directory (which may hold a grant) is covered.
	trees := make([]int, len(grants))
	defer func() {
		for _, fd := range trees {
			if fd > 0 {
				_ = unix.Close(fd)
			}
		}
	}()
	for i, g := range grants {
		fd, err := unix.OpenTree(unix.AT_FDCWD, g.target,
			unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			return fmt.Errorf("%w: copying a grant's mount: %w", errPathsShown, err)
		}
		trees[i] = fd
		if g.write {
			continue
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("%w: making a grant read-only: %w", errPathsShown, err)
		}
	}
	staging := ""
	for _, d := range stagingDirs {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			staging = d
			break
		}
	}
	if staging == "" {
		return fmt.Errorf("%w: no directory to build the root in", errPathsShown)
	}
	if err := unix.Mount("caphost-transport", staging, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, rootSize); err != nil {
		return fmt.Errorf("%w: mounting the root: %w", errPathsShown, err)
	}
	if err := buildRoot(staging, grants, trees); err != nil {
		_ = unix.Unmount(staging, unix.MNT_DETACH) // and the grants mounted in it
		return err
	}
	// The root's own directories and links are the plugin's to read, not
	// to change.
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(unix.AT_FDCWD, staging, 0, &attr); err != nil {
		_ = unix.Unmount(staging, unix.MNT_DETACH)
		return fmt.Errorf("%w: making the root read-only: %w", errPathsShown, err)
	}
	// pivot_root(".", "."): the old root ends up stacked on the new one,
	// where it is detached; nothing of it stays reachable.
	if err := unix.Chdir(staging); err != nil {
		_ = unix.Unmount(staging, unix.MNT_DETACH)
		return fmt.Errorf("%w: entering the root: %w", errPathsShown, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		_ = unix.Chdir("/")
		_ = unix.Unmount(staging, unix.MNT_DETACH)
		return fmt.Errorf("%w: pivot_root: %w", errPathsShown, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("%w: detaching the host's root: %w", errSandbox, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("%w: entering the root: %w", errSandbox, err)
	}
	return nil
}

// buildRoot lays grants out in the tmpfs at staging: the symbolic links
// first, then each grant's mount (trees, in the same order) at its path,
// parents before what they hold. A grant inside another one already
// mounted has its mount point there (the host's own): nothing is created
// in a grant.
func buildRoot(staging string, grants []grant, trees []int) error {
	fail := func(what string, err error) error {
		return fmt.Errorf("%w: %s: %w", errPathsShown, what, err)
	}
	for _, g := range grants {
		for _, l := range g.links {
			at := filepath.Join(staging, l.at)
			if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
				return fail("making a link's directory", err)
			}
			if err := os.Symlink(l.text, at); err != nil && !errors.Is(err, fs.ErrExist) {
				return fail("making a link", err)
			}
		}
	}
	var mounted []string
	for i, g := range grants {
		at := filepath.Join(staging, g.target)
		within := slices.ContainsFunc(mounted, func(m string) bool { return inside(g.target, m) })
		if !within && g.target != "/" {
			if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
				return fail("making a grant's directory", err)
			}
			var err error
			if g.dir {
				err = os.Mkdir(at, 0o755)
			} else {
				var f *os.File
				if f, err = os.OpenFile(at, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
					err = f.Close()
				}
			}
			if err != nil && !errors.Is(err, fs.ErrExist) {
				return fail("making a mount point", err)
			}
		}
		if err := unix.MoveMount(trees[i], "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fail("mounting a grant", err)
		}
		mounted = append(mounted, g.target)
	}
	return nil
}
