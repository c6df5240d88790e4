package abi

import _ "github.com/redis/go-redis/v9" // violation: abi never talks to Redis, even in tests
