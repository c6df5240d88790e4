package config

import (
	"io/fs"

	"github.com/caphost/caphost/policy/strict"
)

// decoder walks the koanf map with the shared strict reader, collecting
// problems instead of stopping at the first one.
type decoder struct {
	strict.Reader
	lookup func(string) (string, bool)
	base   string // directory relative file references resolve against
	fsys   fs.FS  // WithFS, for files the configuration names (nil: the OS)
}
