package transport

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// isolate makes cmd start in a user and mount namespace of its own, the
// host's uid and gid mapped to root there (nothing else is mapped: no
// new privilege on the host), and names the host's namespaces in its
// environment (envNamespaces). hook, a test's, may change the request.
// It leaves cmd as it was when the host cannot name its own namespaces
// (no /proc): the plugin could not tell them apart, and it says so.
func isolate(cmd *exec.Cmd, hook func(*syscall.SysProcAttr)) {
	ids, err := namespaceIDs()
	if err != nil {
		return
	}
	attr := &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		// Unprivileged, a gid map needs setgroups(2) denied.
		GidMappingsEnableSetgroups: false,
	}
	if hook != nil {
		hook(attr)
	}
	cmd.SysProcAttr = attr
	cmd.Env = append(cmd.Env, envNamespaces+"="+ids)
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

// namespaceRefused: err is a launch the kernel refused before the plugin
// ran, with an error clone(2) or the id map writes give when user
// namespaces are off or exhausted (user.max_user_namespaces,
// kernel.unprivileged_userns_clone, a container's seccomp policy). An
// exec failure (a binary not executable) looks the same: the caller
// retries without namespaces and keeps to that only when the retry
// starts.
func namespaceRefused(err error) bool {
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Op != "fork/exec" {
		return false
	}
	for _, e := range []error{unix.EPERM, unix.EINVAL, unix.ENOSPC, unix.EACCES, unix.EUSERS} {
		if errors.Is(pe.Err, e) {
			return true
		}
	}
	return false
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
