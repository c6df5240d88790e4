//go:build linux && transporttest

package transport

import (
	"os"
	"syscall"
)

// envRefuseNamespacesForTest, set by a test's host (Config), makes the
// tests' plugin ask for namespaces with an id map the kernel refuses
// (EINVAL), as a kernel with user namespaces off refuses the clone.
const envRefuseNamespacesForTest = "CAPHOST_TRANSPORT_TEST_REFUSE_NAMESPACES"

// refuseNamespacesForTest breaks attr's uid map when the host asked.
func refuseNamespacesForTest(attr *syscall.SysProcAttr) {
	if os.Getenv(envRefuseNamespacesForTest) != "" {
		attr.UidMappings[0].Size = 0
	}
}
