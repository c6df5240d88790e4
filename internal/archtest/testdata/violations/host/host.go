package host

import (
	_ "github.com/caphost/caphost/cmd/caphost"         // violation
	_ "github.com/caphost/caphost/internal/redistest"  // violation: test harness in production
	_ "github.com/caphost/caphost/runtime/keys"        // allowed
	_ "github.com/caphost/caphost/third_party/wazero"  // violation
	_ "github.com/knadh/koanf/v2"                      // allowed
	_ "github.com/prometheus/client_golang/prometheus" // allowed
)
