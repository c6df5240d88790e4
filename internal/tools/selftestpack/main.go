// Command selftestpack bundles a guest's self-test vectors into its module:
// it reads the readable vectors file (guests/<name>/selftest.json, format in
// docs/guests.md and package vectors), encodes it with package abi and
// writes the module with one caphost.selftest.v1 custom section, replacing
// any such section already there. `make guests` runs it after `go build`;
// sign a module only after bundling, since the section is covered by the
// module's sha256 and signature.
//
//	selftestpack -vectors guests/codec/selftest.json build/guests/codec.wasm
//	selftestpack -record -vectors guests/codec/selftest.json build/guests/codec.wasm
//
// By default the bundled module is then loaded in a throwaway engine of its
// flavour (native, or plugins/extism for a module importing Extism's kernel)
// and its vectors are run (plugins.SelfTest), so a guest that drifted from its
// vectors fails the build instead of failing its first hot swap; nothing is
// written unless they all pass.
//
// -record runs the module on every request of the vectors file and rewrites
// the file with the module's answers instead of bundling. Recorded answers
// are what the guest does, not necessarily what it should do: review the
// diff before committing it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/extism"
)

func main() { os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }

// maxModuleBytes matches the host's bound on module files.
const maxModuleBytes = 64 << 20

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("selftestpack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	vecPath := fs.String("vectors", "", "the vectors file (JSON, format "+vectors.Format+")")
	out := fs.String("out", "", "write the bundled module here (default: replace MODULE.wasm)")
	record := fs.Bool("record", false, "run MODULE.wasm on every request and rewrite the vectors file with its answers (review them!)")
	verify := fs.Bool("verify", true, "load the bundled module and require every vector to pass before writing it")
	cacheDir := fs.String("cache-dir", "", "wazero compilation cache directory (reused across runs)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: selftestpack -vectors F.json [-out OUT.wasm] [-verify=false] [-cache-dir DIR] MODULE.wasm\n       selftestpack -record -vectors F.json [-cache-dir DIR] MODULE.wasm")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *vecPath == "" || fs.NArg() != 1 || (*record && *out != "") {
		fs.Usage()
		return 2
	}
	p := packer{cacheDir: *cacheDir, stdout: stdout}
	var err error
	if *record {
		err = p.record(ctx, *vecPath, fs.Arg(0))
	} else {
		dst := *out
		if dst == "" {
			dst = fs.Arg(0)
		}
		err = p.bundle(ctx, *vecPath, fs.Arg(0), dst, *verify)
	}
	if err != nil {
		fmt.Fprintf(stderr, "selftestpack: %v\n", err)
		return 1
	}
	return 0
}

type packer struct {
	cacheDir string
	stdout   io.Writer
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s exceeds %d bytes", path, limit)
	}
	return b, nil
}

// bundle writes src with f's vectors to dst (atomically, via a temporary
// file in dst's directory).
func (p packer) bundle(ctx context.Context, vecPath, src, dst string, verify bool) error {
	f, err := vectors.ReadFile(vecPath)
	if err != nil {
		return err
	}
	sec, err := f.Section()
	if err != nil {
		return fmt.Errorf("%s: %w", vecPath, err)
	}
	wasm, err := readBounded(src, maxModuleBytes)
	if err != nil {
		return err
	}
	bundled, err := bundleSection(wasm, sec)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	if verify {
		if err := p.verify(ctx, f, bundled); err != nil {
			return fmt.Errorf("%s with %s: %w", src, vecPath, err)
		}
	}
	if err := writeAtomic(dst, bundled); err != nil {
		return err
	}
	state := "not run (-verify=false)"
	if verify {
		state = "all pass"
	}
	fmt.Fprintf(p.stdout, "%s: bundled %d self-test vectors from %s (%d bytes); vectors %s\n", dst, len(sec.Vectors), vecPath, len(bundled), state)
	return nil
}

// load starts wasm in a throwaway engine of its flavour (Extism when it
// imports Extism's kernel, else native) and checks that it is the module
// the vectors file names. The caller calls closeEngine when done.
func (p packer) load(ctx context.Context, f *vectors.File, wasm []byte) (plugins.Guest, func(context.Context) error, error) {
	shape, err := plugins.Shape(ctx, wasm)
	if err != nil {
		return nil, nil, err
	}
	cfg := plugins.Config{CacheDir: p.cacheDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	// The vectors check answers, not speed: a generous call deadline keeps a
	// busy build machine from failing them.
	// Checking vectors is not serving: every host import is granted.
	lim := plugins.Limits{CallTimeout: 10 * time.Second, Grants: plugins.AllGrants}
	var (
		m           plugins.Guest
		closeEngine func(context.Context) error
	)
	if extism.IsModule(shape) {
		e, err := extism.NewEngine(cfg)
		if err != nil {
			return nil, nil, err
		}
		em, err := e.Load(ctx, "selftestpack", wasm, lim)
		if err != nil {
			_ = e.Close(ctx)
			return nil, nil, err
		}
		m, closeEngine = em, e.Close
	} else {
		e, err := plugins.NewEngine(cfg)
		if err != nil {
			return nil, nil, err
		}
		nm, err := e.Load(ctx, "selftestpack", wasm, lim)
		if err != nil {
			_ = e.Close(ctx)
			return nil, nil, err
		}
		m, closeEngine = nm, e.Close
	}
	if got := m.Description().Module; got != f.Module {
		_ = closeEngine(ctx)
		return nil, nil, fmt.Errorf("the vectors are for module %q, the module describes itself as %q", f.Module, got)
	}
	return m, closeEngine, nil
}

func (p packer) verify(ctx context.Context, f *vectors.File, bundled []byte) error {
	m, closeEngine, err := p.load(ctx, f, bundled)
	if err != nil {
		return err
	}
	defer closeEngine(context.WithoutCancel(ctx))
	rep := plugins.SelfTest(ctx, m, bundled)
	var fails []error
	for i, c := range rep.Checks {
		if c.Status != plugins.CheckPass {
			name := ""
			if i < len(f.Vectors) {
				name = fmt.Sprintf(" %q", f.Vectors[i].Name)
			}
			fails = append(fails, fmt.Errorf("vector %d%s: %s: %s", i, name, c.Status, c.Detail))
		}
	}
	if len(fails) > 0 {
		return fmt.Errorf("the module does not answer its vectors (re-record and review, or fix the guest):\n%w", errors.Join(fails...))
	}
	return nil
}

// record rewrites vecPath with the answers of the module at src.
func (p packer) record(ctx context.Context, vecPath, src string) error {
	f, err := vectors.ReadFile(vecPath)
	if err != nil {
		return err
	}
	wasm, err := readBounded(src, maxModuleBytes)
	if err != nil {
		return err
	}
	m, closeEngine, err := p.load(ctx, f, wasm)
	if err != nil {
		return err
	}
	defer closeEngine(context.WithoutCancel(ctx))
	changed := 0
	for i := range f.Vectors {
		v := &f.Vectors[i]
		req, err := v.RequestBytes()
		if err != nil {
			return fmt.Errorf("vector %d (%q): %w", i, v.Name, err)
		}
		frame, err := m.Call(ctx, v.Export, req, nil)
		if err != nil {
			return fmt.Errorf("vector %d (%q): the guest failed: %w", i, v.Name, err)
		}
		old, _ := v.Frame() // nil when nothing was recorded
		if err := v.SetFrame(frame); err != nil {
			return fmt.Errorf("vector %d (%q): the guest answered a malformed frame: %w", i, v.Name, err)
		}
		if string(old) != string(frame) {
			changed++
			fmt.Fprintf(p.stdout, "recorded vector %d %q: %s\n", i, v.Name, v.Status.String())
		}
	}
	b, err := f.Marshal()
	if err != nil {
		return err
	}
	if err := writeAtomic(vecPath, b); err != nil {
		return err
	}
	fmt.Fprintf(p.stdout, "%s: %d of %d vectors changed; review the answers before committing\n", vecPath, changed, len(f.Vectors))
	return nil
}

// bundleSection returns wasm with every existing self-test section removed and one
// holding v appended (abi.AppendSelfTestSection), so bundling is idempotent:
// `go build` leaves an up-to-date output file alone, bundled or not.
func bundleSection(wasm []byte, v *abi.SelfTestVectors) ([]byte, error) {
	stripped, err := stripSelfTestSections(wasm)
	if err != nil {
		return nil, err
	}
	return abi.AppendSelfTestSection(stripped, v), nil
}

// stripSelfTestSections returns wasm without its caphost.selftest.v1 custom
// sections; every other section is kept byte for byte and in order. A module
// whose top-level section layout is broken is an error.
func stripSelfTestSections(wasm []byte) ([]byte, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, errors.New("not a wasm module")
	}
	out := append(make([]byte, 0, len(wasm)), wasm[:8]...)
	for off := 8; off < len(wasm); {
		start := off
		size, n := uvarint32(wasm[off+1:])
		if n == 0 || uint64(size) > uint64(len(wasm)-off-1-n) {
			return nil, fmt.Errorf("section at offset %d overruns the module", off)
		}
		body := wasm[off+1+n : off+1+n+int(size)]
		off += 1 + n + int(size)
		if wasm[start] == 0 {
			nameLen, k := uvarint32(body)
			if k == 0 || uint64(nameLen) > uint64(len(body)-k) {
				return nil, fmt.Errorf("custom section at offset %d: name overruns its section", start)
			}
			if string(body[k:k+int(nameLen)]) == abi.SelfTestSection {
				continue
			}
		}
		out = append(out, wasm[start:off]...)
	}
	return out, nil
}

// uvarint32 decodes a wasm u32 (LEB128, at most 5 bytes); n is 0 on error.
func uvarint32(b []byte) (v uint32, n int) {
	var shift uint
	for i := 0; i < len(b) && i < 5; i++ {
		c := b[i]
		if i == 4 && c > 0x0f {
			return 0, 0
		}
		v |= uint32(c&0x7f) << shift
		if c < 0x80 {
			return v, i + 1
		}
		shift += 7
	}
	return 0, 0
}

// writeAtomic replaces path with data through a temporary file in the same
// directory, so a reader (or a watching host) never sees half a module.
func writeAtomic(path string, data []byte) error {
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
