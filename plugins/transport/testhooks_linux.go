//go:build linux && !transporttest

package transport

import "syscall"

// refuseNamespacesForTest leaves the namespaces a plugin asks for as
// they are: only the tests' plugin can be made to break them.
func refuseNamespacesForTest(*syscall.SysProcAttr) {}
