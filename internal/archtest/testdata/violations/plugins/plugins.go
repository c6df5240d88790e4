package plugins

import (
	_ "github.com/caphost/caphost/runtime/keys"       // violation
	_ "github.com/caphost/caphost/third_party/wazero" // allowed
	_ "github.com/redis/go-redis/v9"                  // violation
	_ "github.com/tetratelabs/wazero"                 // violation: upstream, not the fork
)
