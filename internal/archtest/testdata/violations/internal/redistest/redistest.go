package redistest

import _ "github.com/redis/go-redis/v9" // allowed: test harness
