package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/caphost/caphost/host/guests"
)

func newGuestInspectCmd() *cobra.Command {
	var cacheDir string
	cmd := &cobra.Command{
		Use:   "inspect F.wasm",
		Short: "Print a module's kinds, flavour, ABI version, sha256, imports, exports and declarations",
		Args:  oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			wasm, err := readModuleFile(args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			in, err := guests.Inspect(cmd.Context(), wasm, guests.Options{CacheDir: cacheDir})
			// The digest is known even when the module does not load.
			fmt.Fprintf(w, "sha256: %s\nbytes: %d\n", in.SHA256, in.Bytes)
			if err != nil {
				return failed(w, err)
			}
			fmt.Fprintf(w, "module: %s\nflavour: %s\nabi: %s\nkinds: %s\nself-test vectors: %d\n",
				in.Module, in.Flavour, in.ABI, strings.Join(in.Kinds, ", "), in.SelfTestVectors)
			list := func(title string, items []string) {
				fmt.Fprintf(w, "%s:\n", title)
				for _, s := range items {
					fmt.Fprintf(w, "  %s\n", s)
				}
			}
			list("declarations", in.Declarations)
			list("exports", in.Exports)
			list("imports", in.Imports)
			return nil
		},
	}
	cmd.Flags().StringVar(&cacheDir, "cache-dir", "", "wazero compilation cache directory (reused across runs)")
	return cmd
}

func newGuestTestCmd() *cobra.Command {
	var cacheDir string
	cmd := &cobra.Command{
		Use:   "test F.wasm",
		Short: "Run a module's self-test vectors and the host conformance suite for its kinds",
		Long: "test loads the module in a throwaway engine of its flavour (native, or Extism when\n" +
			"it imports Extism's kernel), runs its bundled self-test vectors and the conformance\n" +
			"checks for every kind it declares, prints each check and exits 1 if any check fails\n" +
			"or the module does not load.",
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			wasm, err := readModuleFile(args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			rep, err := guests.Test(cmd.Context(), wasm, guests.Options{CacheDir: cacheDir})
			fmt.Fprintf(w, "sha256: %s\n", rep.SHA256)
			if err != nil {
				return failed(w, err)
			}
			fmt.Fprintf(w, "module: %s\nflavour: %s\n", rep.Module, rep.Flavour)
			fails := 0
			for _, c := range rep.Checks {
				line := fmt.Sprintf("%-4s %s", strings.ToUpper(c.Status), c.Name)
				if c.Kind != "" {
					line = fmt.Sprintf("%-4s [%s] %s", strings.ToUpper(c.Status), c.Kind, c.Name)
				}
				if c.Detail != "" {
					line += ": " + c.Detail
				}
				fmt.Fprintln(w, line)
				if c.Status == "fail" {
					fails++
				}
			}
			if fails > 0 {
				return failed(w, fmt.Errorf("%d of %d checks failed", fails, len(rep.Checks)))
			}
			fmt.Fprintf(w, "ok: %d checks\n", len(rep.Checks))
			return nil
		},
	}
	cmd.Flags().StringVar(&cacheDir, "cache-dir", "", "wazero compilation cache directory (reused across runs)")
	return cmd
}
