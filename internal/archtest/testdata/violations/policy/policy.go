package policy

import (
	_ "github.com/caphost/caphost/runtime/keys" // violation
	_ "github.com/redis/go-redis/v9"            // violation (two rules, one edge)
	_ "go.yaml.in/yaml/v3"                      // allowed
)
