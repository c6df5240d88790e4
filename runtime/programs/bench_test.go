package programs

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// BenchmarkCompareAndDelete compares the typed facade (both modes) with a
// bare go-redis EVALSHA of the same script on one private server, so the
// facade's own overhead (argument marshalling, reply validation, typed
// decode) is visible as the difference.
func BenchmarkCompareAndDelete(b *testing.B) {
	s := redistest.StartStandalone(b)
	ctx := context.Background()
	cat := mustCatalog(b)
	client := standaloneClient(b, s)
	k := vectorKeys(b, testBuilder(b), "bench", 1)[0]
	p, _ := cat.Program("compare-and-delete-v1")
	require.NoError(b, LoadScripts(ctx, cat, s.Admin()))
	require.NoError(b, Deploy(ctx, cat, s.Admin()))
	owner := []byte("owner-token-0123456789")

	b.Run("bare-evalsha", func(b *testing.B) {
		wire := []string{k.Redis()}
		b.ReportAllocs()
		for b.Loop() {
			if err := client.EvalSha(ctx, p.SHA1(), wire, owner).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, client)
		require.NoError(b, err)
		b.Run(string(mode), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, err := e.CompareAndDelete(ctx, k, owner)
				if err != nil || r.Status != CompareAndDeleteAbsent {
					b.Fatal(r.Status, err)
				}
			}
		})
	}
}
