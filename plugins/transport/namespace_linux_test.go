package transport

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestResolveFollowsLinks: a grant's path is walked as the kernel walks
// it: each symbolic link met (relative, absolute, chained, in the middle
// or at the end) is recorded where it is, with its text, and the walk
// ends where the path leads, with no link left in it; ".." after a link
// is taken from where the link led. A loop is refused, a missing path
// says so.
func TestResolveFollowsLinks(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	real := filepath.Join(root, "real")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "dir"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(real, "dir", "file"), nil, 0o600))
	for at, text := range map[string]string{
		"rel":      "real",
		"abs":      real,
		"chain":    "rel",
		"filelink": "real/dir/file",
		"loop-a":   "loop-b",
		"loop-b":   "loop-a",
		"up":       "real/dir/..",
	} {
		require.NoError(t, os.Symlink(text, filepath.Join(root, at)))
	}
	for path, want := range map[string]struct {
		target string
		links  []link
	}{
		filepath.Join(real, "dir"):                     {filepath.Join(real, "dir"), nil},
		filepath.Join(root, "rel", "dir", "file"):      {filepath.Join(real, "dir", "file"), []link{{filepath.Join(root, "rel"), "real"}}},
		filepath.Join(root, "abs", "dir"):              {filepath.Join(real, "dir"), []link{{filepath.Join(root, "abs"), real}}},
		filepath.Join(root, "chain", "dir"):            {filepath.Join(real, "dir"), []link{{filepath.Join(root, "chain"), "rel"}, {filepath.Join(root, "rel"), "real"}}},
		filepath.Join(root, "filelink"):                {filepath.Join(real, "dir", "file"), []link{{filepath.Join(root, "filelink"), "real/dir/file"}}},
		filepath.Join(root, "up", "dir"):               {filepath.Join(real, "dir"), []link{{filepath.Join(root, "up"), "real/dir/.."}}},
		filepath.Join(root, "rel", "dir", "..", "dir"): {filepath.Join(real, "dir"), []link{{filepath.Join(root, "rel"), "real"}}},
	} {
		target, links, err := resolve(path)
		require.NoError(t, err, path)
		assert.Equal(t, want.target, target, path)
		assert.Equal(t, want.links, links, path)
	}
	_, _, err = resolve(filepath.Join(root, "loop-a"))
	require.ErrorIs(t, err, unix.ELOOP)
	_, _, err = resolve(filepath.Join(root, "rel", "missing"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, _, err = resolve(filepath.Join(root, "filelink", "below"))
	require.ErrorIs(t, err, unix.ENOTDIR)
}

// TestGrantsMergeAndOrder: a sandbox's root holds each resolved path
// once, writable if any grant writes it, parents before what they hold,
// and leaves out what is missing.
func TestGrantsMergeAndOrder(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	dir, sub := filepath.Join(root, "d"), filepath.Join(root, "d", "sub")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	file := filepath.Join(root, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	require.NoError(t, os.Symlink("d", filepath.Join(root, "link")))
	sb := Sandbox{ReadDirs: []string{sub, dir, filepath.Join(root, "missing")}, ReadFiles: []string{file},
		WriteDirs: []string{filepath.Join(root, "link")}}
	gs, err := sb.grants()
	require.NoError(t, err)
	var mine []grant
	for _, g := range gs {
		if inside(g.target, root) {
			mine = append(mine, g)
		}
	}
	assert.Equal(t, []grant{
		{target: dir, dir: true, write: true, links: []link{{filepath.Join(root, "link"), "d"}}},
		{target: sub, dir: true},
		{target: file},
	}, mine)
}
