package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
)

// harness lets this command use internal/redistest, which is written for
// tests: it implements the testing.TB methods redistest calls (Helper,
// Fatal, Fatalf, Cleanup, TempDir, Logf, Name). The embedded TB stays nil;
// a call to any other method would panic, and none is made. Fatal ends the
// scenario by a panic that run recovers into an error.
type harness struct {
	testing.TB

	log      io.Writer
	mu       sync.Mutex
	cleanups []func()
}

// fatal is the panic value of harness.Fatal.
type fatal struct{ msg string }

func newHarness(log io.Writer) *harness { return &harness{log: log} }

func (h *harness) Helper()      {}
func (h *harness) Name() string { return "failover" }

func (h *harness) Fatal(args ...any) { panic(fatal{msg: fmt.Sprint(args...)}) }

func (h *harness) Fatalf(format string, args ...any) { panic(fatal{msg: fmt.Sprintf(format, args...)}) }

func (h *harness) Logf(format string, args ...any) { fmt.Fprintf(h.log, format+"\n", args...) }

func (h *harness) Cleanup(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cleanups = append(h.cleanups, f)
}

func (h *harness) TempDir() string {
	dir, err := os.MkdirTemp("", "caphost-failover-")
	if err != nil {
		h.Fatalf("temp dir: %v", err)
	}
	h.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// close runs the cleanups, last registered first, as testing does.
func (h *harness) close() {
	h.mu.Lock()
	cs := h.cleanups
	h.cleanups = nil
	h.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// guard runs f and turns a harness Fatal into an error.
func (h *harness) guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			ft, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("harness: %s", ft.msg)
		}
	}()
	return f()
}
