package main

import (
	_ "github.com/caphost/caphost/abi/guest"    // allowed
	_ "github.com/caphost/caphost/runtime/keys" // violation
)

func main() {}
