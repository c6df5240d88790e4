package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/plugins/trust"
	"github.com/caphost/caphost/policy"
	"github.com/spf13/cobra"
)

func newGuestCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "guest",
		Short: "Manage guest module keys and signatures; inspect and test modules",
		Long: "guest creates ed25519 signing keys, signs guest modules with detached\n" +
			"caphost-guest-signature-v1 files and verifies them (see docs/guests.md).",
		Args: noArgs,
	}
	cmd.AddCommand(newGuestKeygenCmd(), newGuestSignCmd(), newGuestVerifyCmd(), newGuestInspectCmd(), newGuestTestCmd())
	return cmd
}

func newGuestKeygenCmd() *cobra.Command {
	var out, name string
	cmd := &cobra.Command{
		Use:   "keygen --out DIR --name NAME",
		Short: "Create an ed25519 key pair: NAME.pub (0644) and NAME.key (0600)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" || name == "" {
				return usageError{errors.New("--out and --name are required")}
			}
			if !policy.ValidSlug(name) {
				return usageError{errors.New("--name must match [a-z][a-z0-9-]{0,31}")}
			}
			pub, priv, id, err := trust.GenerateKey()
			if err != nil {
				return err
			}
			defer clear(priv)
			pubPath, keyPath := filepath.Join(out, name+".pub"), filepath.Join(out, name+".key")
			// Neither file may exist: overwriting a signing key loses it.
			for _, p := range []string{pubPath, keyPath} {
				if _, err := os.Lstat(p); err == nil {
					return fmt.Errorf("%s already exists; not overwriting a key", p)
				}
			}
			if err := writeNew(keyPath, priv, 0o600); err != nil {
				return err
			}
			if err := writeNew(pubPath, pub, 0o644); err != nil {
				_ = os.Remove(keyPath) // no half pair
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "key id: %s\n", id)
			fmt.Fprintf(w, "public key: %s\n", pubPath)
			fmt.Fprintf(w, "private key: %s (mode 0600; keep it out of the repository)\n", keyPath)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write the key files into")
	cmd.Flags().StringVar(&name, "name", "", "key name (file stem), e.g. release-2026")
	return cmd
}

func newGuestSignCmd() *cobra.Command {
	var key, out string
	cmd := &cobra.Command{
		Use:   "sign --key K.key F.wasm",
		Short: "Sign a module, writing F.wasm.sig",
		Args:  oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if key == "" {
				return usageError{errors.New("--key is required")}
			}
			module, err := readModuleFile(args[0])
			if err != nil {
				return err
			}
			priv, err := trust.ReadPrivateKeyFile(key)
			if err != nil {
				return err
			}
			defer clear(priv)
			sig, err := trust.Sign(priv, module)
			if err != nil {
				return err
			}
			if out == "" {
				out = args[0] + trust.SignatureSuffix
			}
			if err := writeReplace(out, sig.Marshal(), 0o644); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "sha256: %s\n", sig.Digest)
			fmt.Fprintf(w, "key id: %s\n", sig.KeyID)
			fmt.Fprintf(w, "signature: %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "PEM private key file (mode 0600)")
	cmd.Flags().StringVar(&out, "out", "", "signature file (default F.wasm.sig)")
	return cmd
}

func newGuestVerifyCmd() *cobra.Command {
	var (
		pubs    []string
		sigPath string
		pinHex  string
	)
	cmd := &cobra.Command{
		Use:   "verify --pub K.pub [--pub ...] F.wasm [--sig F.wasm.sig] [--sha256 HEX]",
		Short: "Verify a module's signature (and sha256 pin) against trusted public keys",
		Long: "verify checks that F.wasm matches --sha256 (when given) and that its detached signature\n" +
			"verifies under one of the --pub keys. Exit status 0 when everything checked holds, 1 otherwise.",
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(pubs) == 0 {
				return usageError{errors.New("at least one --pub is required")}
			}
			var pin trust.Pin
			if pinHex != "" {
				p, err := trust.ParsePin(strings.ToLower(pinHex))
				if err != nil {
					return usageError{errors.New("--sha256 must be 64 hex digits")}
				}
				pin = p
			}
			named := map[string]trust.PublicKey{}
			for _, p := range pubs {
				k, err := trust.ReadPublicKeyFile(p)
				if err != nil {
					return err
				}
				named[p] = k
			}
			keys, err := trust.NewTrustedKeys(named)
			if err != nil {
				return err
			}
			module, err := readModuleFile(args[0])
			if err != nil {
				return err
			}
			if sigPath == "" {
				sigPath = args[0] + trust.SignatureSuffix
			}
			w := cmd.OutOrStdout()
			digest := trust.Digest(module)
			fmt.Fprintf(w, "module: %s\n", args[0])
			fmt.Fprintf(w, "sha256: %s\n", digest)
			if pin.IsZero() {
				pin = digest // no pin given: only the signature binds the bytes
				fmt.Fprintln(w, "pin: none given (--sha256)")
			} else {
				fmt.Fprintf(w, "pin: %s\n", pin)
			}
			fmt.Fprintf(w, "trusted keys: %s\n", strings.Join(keys.IDs(), ", "))
			fmt.Fprintf(w, "signature: %s\n", sigPath)
			sig, err := trust.ReadSignatureFile(sigPath)
			if err != nil {
				return failed(w, err)
			}
			v, err := trust.Verify(module, pin, sig, keys, true)
			if err != nil {
				return failed(w, err)
			}
			fmt.Fprintf(w, "OK: signed by key %s (%s)\n", v.KeyID, v.KeyName)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&pubs, "pub", nil, "trusted PEM public key file (repeatable)")
	cmd.Flags().StringVar(&sigPath, "sig", "", "signature file (default F.wasm.sig)")
	cmd.Flags().StringVar(&pinHex, "sha256", "", "expected sha256 of the module (64 hex digits)")
	return cmd
}

// failed prints the verification failure on stdout, next to what was
// checked, and makes the command exit 1 without printing it again.
func failed(w io.Writer, err error) error {
	fmt.Fprintf(w, "FAILED: %v\n", err)
	return errProblems
}

func oneArg(cmd *cobra.Command, args []string) error {
	if err := cobra.ExactArgs(1)(cmd, args); err != nil {
		return usageError{err}
	}
	return nil
}

// readModuleFile reads a module of at most config.MaxModuleBytes.
func readModuleFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, config.MaxModuleBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > config.MaxModuleBytes {
		return nil, fmt.Errorf("%s exceeds %d MiB", path, config.MaxModuleBytes>>20)
	}
	return b, nil
}

// writeNew creates path with mode, failing if it exists.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	// The umask may have narrowed the mode; 0644 for a public key is intended.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeReplace writes data to a temporary file next to path and renames it
// into place, so a reader never sees a half-written signature.
func writeReplace(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
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
