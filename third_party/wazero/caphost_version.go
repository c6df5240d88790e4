package wazero

import "github.com/caphost/caphost/third_party/wazero/internal/version"

// Version is the version of this build of wazero: the upstream release it was made from, with the
// suffix of caphost's patches (for example v1.12.0-caphost.2). caphost's fork only: upstream wazero
// exports no version.
const Version = version.Default
