package fence

import (
	_ "database/sql" // allowed: the standard library

	_ "github.com/caphost/caphost/host" // violation: the leaf must not pull in the host
	_ "github.com/knadh/koanf/v2"       // violation: allowed to host/..., not to host/fence
)
