package transport

import "golang.org/x/sys/unix"

// metadataSyscalls are the system calls that change a file's mode,
// owner, times or extended attributes, on arm64 (which has only the *at
// forms of chmod, chown and utimes; sandboxFilter refuses them).
func metadataSyscalls() []uint32 {
	return []uint32{
		unix.SYS_FCHMOD, unix.SYS_FCHMODAT, unix.SYS_FCHMODAT2,
		unix.SYS_FCHOWN, unix.SYS_FCHOWNAT, unix.SYS_UTIMENSAT,
		unix.SYS_SETXATTR, unix.SYS_LSETXATTR, unix.SYS_FSETXATTR, unix.SYS_SETXATTRAT,
		unix.SYS_REMOVEXATTR, unix.SYS_LREMOVEXATTR, unix.SYS_FREMOVEXATTR, unix.SYS_REMOVEXATTRAT,
	}
}

// metadataReadSyscalls are the system calls that read a path's metadata
// without opening it, on arm64, which has only the *at forms of stat,
// readlink and access (sandboxFilter refuses them when the sandbox hides
// metadata). The fd forms (fstat, fgetxattr, fstatfs) stay: a descriptor
// is only had through an open Landlock allowed.
func metadataReadSyscalls() []uint32 {
	return []uint32{
		unix.SYS_NEWFSTATAT, unix.SYS_STATX, unix.SYS_STATFS,
		unix.SYS_READLINKAT, unix.SYS_FACCESSAT, unix.SYS_FACCESSAT2,
		unix.SYS_GETXATTR, unix.SYS_LGETXATTR, unix.SYS_GETXATTRAT,
		unix.SYS_LISTXATTR, unix.SYS_LLISTXATTR, unix.SYS_LISTXATTRAT,
		unix.SYS_CHDIR, unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_INOTIFY_ADD_WATCH, unix.SYS_FANOTIFY_MARK,
	}
}

// pathOpens are the open calls whose O_PATH form sandboxFilter refuses
// when the sandbox hides metadata, on arm64: openat(dirfd, path, flags).
func pathOpens() []pathOpen {
	return []pathOpen{{unix.SYS_OPENAT, seccompDataArg2}}
}

// openSyscalls are the calls that open a path, on arm64 (sandboxFilter
// refuses them all in a sandbox that opens nothing).
func openSyscalls() []uint32 { return []uint32{unix.SYS_OPENAT} }
