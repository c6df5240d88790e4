package programs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

// Concurrent submits queued behind a busy flight leave as one pipeline;
// each intent is still judged on its own: of two submits of one intent in
// the same pipeline (and the same notify-submit-v3 call) exactly one
// appends (SUBMITTED) and the other is DUPLICATE, and every stream holds
// exactly one entry.
func TestBatcherNotifySubmit(t *testing.T) {
	eachBatcherMode(t, func(t *testing.T, mode policy.ProgramMode, s *redistest.Server, g *gate, b *Batcher) {
		ctx := context.Background()
		bld := testBuilder(t)
		type intentKeys struct{ stream, record keys.Key }
		const intents = 10
		var ks []intentKeys
		req := func(i int) NotifySubmitRequest {
			id := sha256.Sum256([]byte(strconv.Itoa(i)))
			pd := sha256.Sum256([]byte("plan-" + strconv.Itoa(i)))
			return NotifySubmitRequest{IntentID: hex.EncodeToString(id[:]), Plan: []byte("plan-" + strconv.Itoa(i)),
				PlanDigest: hex.EncodeToString(pd[:]), Retention: time.Minute, MaxLen: 1000}
		}
		for i := range intents + 1 {
			st, _, rec := notifyShardKeys(t, bld, "batch-"+string(mode)+"-"+strconv.Itoa(i))
			ks = append(ks, intentKeys{st, rec})
		}
		// Warm (loads the script), then hold the only flight.
		r, err := b.NotifySubmit(ctx, ks[intents].stream, ks[intents].record, req(intents))
		require.NoError(t, err)
		require.Equal(t, NotifySubmitted, r.Status)
		g.take()
		release, paused := g.holdNextCommand()
		type res struct {
			i   int
			r   NotifySubmitResult
			err error
		}
		out := make(chan res, 2*intents+1)
		goSubmit := func(i int) {
			go func() {
				r, err := b.NotifySubmit(ctx, ks[i].stream, ks[i].record, req(i))
				out <- res{i, r, err}
			}()
		}
		goSubmit(intents) // the held one: a duplicate of the warm-up
		<-paused
		for i := range intents {
			goSubmit(i)
			goSubmit(i)
		}
		waitQueued(t, b, 2*intents)
		release()
		submitted, duplicate := map[int]int{}, map[int]int{}
		for range 2*intents + 1 {
			x := <-out
			require.NoError(t, x.err)
			require.Equal(t, NotifyPending, x.r.State)
			switch x.r.Status {
			case NotifySubmitted:
				submitted[x.i]++
			case NotifyDuplicate:
				duplicate[x.i]++
			default:
				t.Fatalf("intent %d: %s", x.i, x.r.Status)
			}
		}
		for i := range intents {
			assert.Equal(t, 1, submitted[i], "intent %d appended once", i)
			assert.Equal(t, 1, duplicate[i], "intent %d: the other submit is a duplicate", i)
			n, err := s.Admin().XLen(ctx, ks[i].stream.Redis()).Result()
			require.NoError(t, err)
			assert.Equal(t, int64(1), n, "intent %d: one stream entry", i)
		}
		assert.Equal(t, 1, duplicate[intents])
		// The two submits of an intent share its stream, so they share one
		// notify-submit-v3 call: ten calls in one pipeline.
		_, pipes := g.take()
		assert.Equal(t, []int{intents}, pipes, "the queued submits went out as one pipeline")
	})
}
