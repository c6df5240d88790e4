package abi

import (
	_ "fmt" // allowed: stdlib

	_ "github.com/caphost/caphost/policy" // violation: abi imports stdlib only
)
