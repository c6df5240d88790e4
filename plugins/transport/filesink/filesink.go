// Package filesink is the file-sink notification transport: one JSON
// document per intent in a directory, written atomically and never
// rewritten. It runs inside the caphost-transport-file plugin process and,
// for tests and benchmarks, in process.
package filesink

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/caphost/caphost/plugins/transport"
)

// Sink writes each intent to <dir>/<IntentID>.json.
type Sink struct{ dir string }

var (
	_ transport.Transport = (*Sink)(nil)
	_ transport.Sandboxed = (*Sink)(nil)
)

// New builds a sink from its settings: "dir", an absolute path to an
// existing directory. Any other key is refused. A sink makes no
// connection: env is not used.
func New(settings map[string]string, _ transport.Env) (transport.Transport, error) {
	for k := range settings {
		if k != "dir" {
			return nil, &transport.SettingError{Key: k, Code: "unknown"}
		}
	}
	dir, ok := settings["dir"]
	switch {
	case !ok || dir == "":
		return nil, &transport.SettingError{Key: "dir", Code: "missing"}
	case !filepath.IsAbs(dir):
		return nil, &transport.SettingError{Key: "dir", Code: "not-absolute"}
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, &transport.SettingError{Key: "dir", Code: "not-a-directory"}
	}
	return &Sink{dir: filepath.Clean(dir)}, nil
}

// Name returns "file".
func (s *Sink) Name() string { return "file" }

// Close does nothing: a sink holds no resources between calls.
func (s *Sink) Close() error { return nil }

// Sandbox is what the file sink's plugin process may do: read and write
// in its directory (temp file, link within the directory, remove, the
// directory's own fsync) and nothing else: no other file, no network.
// The grant follows the directory itself, not its path: a directory
// moved away and replaced by a link elsewhere after launch is not
// followed. Like every sandbox, it cannot read a path's metadata (stat,
// readlink, access, xattrs): Deliver opens, creates, links and removes
// names without a stat.
func (s *Sink) Sandbox() transport.Sandbox {
	return transport.Sandbox{WriteDirs: []string{s.dir}}
}

// Deliver writes m's document to a temporary file in the directory, syncs
// it and links it to its final name. The link refuses to replace an
// existing file, so two attempts of one intent, even concurrent ones,
// leave exactly the first document: an existing file is Accepted
// ("file-exists") without rewriting. Nothing is visible under the final
// name until the link, so every failure before it is RejectedDefinite.
func (s *Sink) Deliver(ctx context.Context, m transport.Message) transport.Receipt {
	definite := func(code string) transport.Receipt {
		return transport.Receipt{Outcome: transport.RejectedDefinite, Code: code}
	}
	if err := transport.ValidateMessage(m); err != nil {
		return definite("message-invalid")
	}
	if ctx.Err() != nil {
		return definite("canceled-before-send")
	}
	name := m.IntentID + ".json"
	final := filepath.Join(s.dir, name)
	accepted := transport.Receipt{Outcome: transport.Accepted, Code: "file-written", ProviderRef: name}
	if exists(final) {
		accepted.Code = "file-exists"
		return accepted
	}
	doc, err := transport.EncodeDocument(m)
	if err != nil {
		return definite("part-not-text")
	}
	tmp, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return definite("file-create-failed")
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(doc)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return definite("file-write-failed")
	}
	if err := os.Link(tmp.Name(), final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			accepted.Code = "file-exists"
			return accepted
		}
		return definite("file-link-failed")
	}
	// The document is visible; only its durability depends on the
	// directory sync.
	if err := syncDir(s.dir); err != nil {
		return transport.Receipt{Outcome: transport.Indeterminate, Code: "dir-sync-failed"}
	}
	return accepted
}

// exists reports whether name is taken in the directory. It opens the
// name rather than stat it: the sandbox refuses every call that reads a
// path's metadata. O_NOFOLLOW makes a symlink count as taken (ELOOP)
// without following it; O_NONBLOCK keeps a FIFO from blocking the open.
// Any other failure answers false, and the link below stays the
// authority: it refuses an existing name whatever this said.
func exists(name string) bool {
	f, err := os.OpenFile(name, os.O_RDONLY|probeFlags, 0)
	if err == nil {
		_ = f.Close()
		return true
	}
	return errors.Is(err, syscall.ELOOP)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
