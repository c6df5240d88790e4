//go:build !linux

package transport

import (
	"fmt"
	"os/exec"
	"syscall"
)

// isolate launches the plugin as it is: this system has no user and
// mount namespaces.
func isolate(*exec.Cmd, func(*syscall.SysProcAttr)) {}

// namespaceRefused: no launch here asks for namespaces.
func namespaceRefused(error) bool { return false }

// hidePaths cannot hide anything here.
func hidePaths(Sandbox, string) error {
	return fmt.Errorf("%w: no mount namespaces on this system", errPathsShown)
}
