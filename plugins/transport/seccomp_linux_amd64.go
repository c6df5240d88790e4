package transport

import "golang.org/x/sys/unix"

// metadataSyscalls are the system calls that change a file's mode,
// owner, times or extended attributes, on amd64 (sandboxFilter refuses
// them).
func metadataSyscalls() []uint32 {
	return []uint32{
		unix.SYS_CHMOD, unix.SYS_FCHMOD, unix.SYS_FCHMODAT, unix.SYS_FCHMODAT2,
		unix.SYS_CHOWN, unix.SYS_FCHOWN, unix.SYS_LCHOWN, unix.SYS_FCHOWNAT,
		unix.SYS_UTIME, unix.SYS_UTIMES, unix.SYS_FUTIMESAT, unix.SYS_UTIMENSAT,
		unix.SYS_SETXATTR, unix.SYS_LSETXATTR, unix.SYS_FSETXATTR, unix.SYS_SETXATTRAT,
		unix.SYS_REMOVEXATTR, unix.SYS_LREMOVEXATTR, unix.SYS_FREMOVEXATTR, unix.SYS_REMOVEXATTRAT,
	}
}

// metadataReadSyscalls are the system calls that read a path's metadata
// without opening it, on amd64 (sandboxFilter refuses them when the
// sandbox hides metadata). The fd forms (fstat, fgetxattr, fstatfs) stay:
// a descriptor is only had through an open Landlock allowed.
func metadataReadSyscalls() []uint32 {
	return []uint32{
		unix.SYS_STAT, unix.SYS_LSTAT, unix.SYS_NEWFSTATAT, unix.SYS_STATX, unix.SYS_STATFS,
		unix.SYS_READLINK, unix.SYS_READLINKAT, unix.SYS_ACCESS, unix.SYS_FACCESSAT, unix.SYS_FACCESSAT2,
		unix.SYS_GETXATTR, unix.SYS_LGETXATTR, unix.SYS_GETXATTRAT,
		unix.SYS_LISTXATTR, unix.SYS_LLISTXATTR, unix.SYS_LISTXATTRAT,
		unix.SYS_CHDIR, unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_INOTIFY_ADD_WATCH, unix.SYS_FANOTIFY_MARK,
	}
}

// pathOpens are the open calls whose O_PATH form sandboxFilter refuses
// when the sandbox hides metadata, on amd64: open(path, flags) and
// openat(dirfd, path, flags).
func pathOpens() []pathOpen {
	return []pathOpen{{unix.SYS_OPEN, seccompDataArg1}, {unix.SYS_OPENAT, seccompDataArg2}}
}

// openSyscalls are the calls that open a path, on amd64 (sandboxFilter
// refuses them all in a sandbox that opens nothing).
func openSyscalls() []uint32 { return []uint32{unix.SYS_OPEN, unix.SYS_OPENAT, unix.SYS_CREAT} }
