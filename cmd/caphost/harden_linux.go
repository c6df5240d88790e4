package main

import "syscall"

// prSetDumpable is PR_SET_DUMPABLE of <linux/prctl.h>.
const prSetDumpable = 4

// hardenProcess marks the serving process non-dumpable. Its transport
// plugins run as the same user, and a same-user process may otherwise read
// /proc/<caphost>/environ and /proc/<caphost>/mem, where the secrets
// resolved from secret://env/… (Redis passwords, the key HMAC, other
// transports' settings) live; PR_SET_DUMPABLE 0 makes those files
// root-owned and refuses ptrace. It also disables core dumps, which would
// hold the same secrets. ssh-agent and gpg-agent do the same.
func hardenProcess() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return errno
	}
	return nil
}
