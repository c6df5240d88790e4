package host

import (
	_ "github.com/caphost/caphost/cmd/caphost"         // violation
	_ "github.com/caphost/caphost/internal/redistest"  // violation: test harness in production
	_ "github.com/caphost/caphost/runtime/keys"        // allowed
	_ "github.com/knadh/koanf/v2"                      // allowed
	_ "github.com/prometheus/client_golang/prometheus" // allowed
	_ "github.com/tetratelabs/wazero"                  // violation
)
