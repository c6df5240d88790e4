package main

import (
	_ "github.com/caphost/caphost/host"         // allowed
	_ "github.com/caphost/caphost/runtime/keys" // violation
	_ "github.com/spf13/cobra"                  // allowed
)

func main() {}
