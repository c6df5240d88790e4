package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caphost/caphost/policy"
)

// FuzzLoad feeds arbitrary bytes through parse, env overrides, decoding and
// validation: it must never panic, and every failure must be a
// *policy.ValidationError with at least one problem.
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"valid", "invalid", "multi"} {
		files, _ := filepath.Glob(filepath.Join(fixtures, dir, "*.yaml"))
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte("redis: [1, 2]\ncapabilities: 3\n"))
	f.Add([]byte("capabilities: {cache: {provider: redis, redis-role: 7}}\n"))
	f.Add([]byte("redis: {keys: {hmac: {versions: {x: 1, 99999999999: 2}}}}\ncapabilities: {cache: {provider: redis, redis-role: cache}}"))
	base := filepath.Join(fixtures, "valid")
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		defer func() {
			if el := time.Since(start); el > 5*time.Second {
				t.Fatalf("slow input (%s): %q", el, data)
			}
		}()
		o := options{lookup: testEnv(map[string]string{"CAPHOST_REDIS__ROLES__CACHE__DEPLOYMENT": "cache-main"})}
		cfg, err := load(context.Background(), data, "fuzz", base, o)
		if err == nil {
			if cfg == nil {
				t.Fatal("nil config without error")
			}
			if verr := cfg.Redis.Validate(); verr != nil {
				t.Fatalf("loaded config fails policy: %v", verr)
			}
			if verr := policy.ValidateGuests(cfg.Guests, cfg.Security); verr != nil {
				t.Fatalf("loaded guests fail policy: %v", verr)
			}
			return
		}
		var verr *policy.ValidationError
		if !errors.As(err, &verr) || len(verr.Problems) == 0 {
			t.Fatalf("unexpected error type: %v", err)
		}
	})
}
