package guest

import (
	_ "github.com/caphost/caphost/abi"          // allowed
	_ "github.com/caphost/caphost/runtime/keys" // violation
)
