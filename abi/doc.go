// Package abi is the caphost guest ABI v1: the version, the guest kinds, the
// export and import names, the message types exchanged with guests, their
// compact binary encoding, the status (outcome) codes and the JSON shape of a
// module's describe output. ABI.md in this directory is the specification.
//
// The package is shared by the host (plugins) and by guests (abi/guest), so it
// imports the standard library only and builds for GOOS=wasip1 as well as the
// host. Changing a message layout, a code or a name here is an ABI change: a
// compatible addition bumps Minor, anything else bumps Major, and ABI.md must
// change in the same commit.
package abi
