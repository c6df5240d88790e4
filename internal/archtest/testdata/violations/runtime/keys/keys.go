package keys

import (
	_ "github.com/caphost/caphost/host"    // violation
	_ "github.com/caphost/caphost/plugins" // violation
	_ "github.com/caphost/caphost/policy"  // allowed
	_ "github.com/knadh/koanf/v2"          // violation
	_ "github.com/redis/go-redis/v9"       // allowed
)
