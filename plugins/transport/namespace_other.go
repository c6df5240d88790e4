//go:build !linux

package transport

import (
	"fmt"
	"os/exec"
)

// isolate asks for nothing: this system has no user and mount
// namespaces.
func isolate(*exec.Cmd) {}

// enterNamespaces cannot enter any here.
func enterNamespaces() (string, error) {
	return "", fmt.Errorf("%w: no user and mount namespaces on this system", errPathsShown)
}

// hidePaths cannot hide anything here.
func hidePaths(Sandbox, string) error {
	return fmt.Errorf("%w: no mount namespaces on this system", errPathsShown)
}
