package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchDebounce coalesces the burst of events one deploy produces (create,
// several writes, chmod, rename) into a single swap.
const watchDebounce = 150 * time.Millisecond

// Watch swaps name whenever the file at path changes. The directory is
// watched, not the file, so a deploy that renames a new file into place
// (the atomic way) is seen as well as an in-place write. A file whose sha256
// equals the serving generation's is ignored. Failures are reported through
// Status, the log and the observer; the serving generation stays. Watch
// returns once the watcher is running; it stops when ctx ends or the manager
// closes.
func (m *Manager) Watch(ctx context.Context, name, path string) error {
	s, err := m.slot(name)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("plugins: watch %s: %w", path, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("plugins: watch %s: %w", path, err)
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		_ = w.Close()
		return fmt.Errorf("plugins: watch %s: %w", path, err)
	}
	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		_ = w.Close()
		return ErrManagerClosed
	}
	m.watchers.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.watchers.Done()
		defer w.Close()
		m.watchLoop(ctx, s, abs, w)
	}()
	return nil
}

func (m *Manager) watchLoop(ctx context.Context, s *slot, path string, w *fsnotify.Watcher) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.stopCtx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if filepath.Clean(ev.Name) == path && ev.Op&(fsnotify.Create|fsnotify.Write|fsnotify.Rename) != 0 {
				timer.Reset(watchDebounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			m.log.Warn("guest file watch error", "module", s.name, "error", err)
		case <-timer.C:
			m.swapFromFile(ctx, s, path)
		}
	}
}

func (m *Manager) swapFromFile(ctx context.Context, s *slot, path string) {
	wasm, err := readBounded(path, m.eng.maxBytes)
	if err != nil {
		// A rename away without a replacement, or a half-written file: keep
		// serving and report; the next event retries.
		_, _ = m.reject(s, "", StageWatch, err)
		return
	}
	sum := sha256.Sum256(wasm)
	if g := s.cur.Load(); g != nil && g.h.sha == hex.EncodeToString(sum[:]) {
		return
	}
	// Swap records and reports its own failures.
	_, _ = m.swap(ctx, s, wasm)
}

func readBounded(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > int64(max) {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", filepath.Base(path), max)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}
