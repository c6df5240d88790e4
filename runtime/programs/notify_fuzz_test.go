package programs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzNotifyReplies: whatever a server answers within the manifest shape,
// the notify facades' checks return a result whose status is in the
// program's table and whose fields are within bounds, or a compatibility
// error — never a panic, never a final status with a non-final state.
func FuzzNotifyReplies(f *testing.F) {
	f.Add(uint8(1), int64(1), int64(1), int64(0), int64(60000), "1-0", "", "")
	f.Add(uint8(2), int64(3), int64(2), int64(1), int64(5), "", "", "")
	f.Add(uint8(1), int64(9), int64(-1), int64(2), int64(-5), "x", "y", "z")
	f.Fuzz(func(t *testing.T, status uint8, a, b, c, d int64, s1, s2, s3 string) {
		r := reply{status: int64(status), n: 6}
		r.ints[0], r.ints[1], r.ints[2], r.ints[3] = a, b, c, d
		r.raw[0], r.raw[3], r.raw[4], r.raw[5] = []byte(s1), []byte(s1), []byte(s2), []byte(s3)
		if sub, err := notifySubmitResult(&reply{status: r.status, ints: [maxResultFields]int64{0, a, b, c}, raw: [maxResultFields][]byte{[]byte(s1)}}); err == nil &&
			(sub.Status == NotifySubmitted || sub.Status == NotifyDuplicate || sub.Status == NotifyDuplicateOtherPlan) {
			require.NotEmpty(t, sub.EntryID)
			require.True(t, validNotifyState(int64(sub.State)))
			require.True(t, validAttempts(int64(sub.Attempts)))
		}
		for _, id := range []string{notifyClaimV1, notifyClaimV2} {
			cl, err := notifyClaimResult(id, &r)
			if err != nil {
				continue
			}
			require.True(t, validAttempts(int64(cl.Attempts)))
			if cl.Status == NotifyClaimAlreadyFinal || cl.Status == NotifyClaimExhausted || cl.Status == NotifyClaimInDoubt {
				require.True(t, cl.State.Final())
			}
			if cl.Status == NotifyClaimed {
				require.Equal(t, NotifyDelivering, cl.State)
				require.False(t, cl.Acked)
			}
			if cl.Status == NotifyClaimInDoubt {
				require.Equal(t, notifyClaimV2, id, "IN_DOUBT is v2's alone")
				require.Equal(t, NotifyIndeterminate, cl.State)
			}
			if id == notifyClaimV2 && cl.Status == NotifyClaimExhausted {
				require.Equal(t, NotifyFailed, cl.State, "v2 never exhausts a DELIVERING record")
			}
		}
		for _, id := range []string{notifyFinalizeV1, notifyFinalizeV2} {
			fi, err := notifyFinalizeResult(id, &r)
			if err != nil {
				continue
			}
			require.True(t, validAttempts(int64(fi.Attempts)))
			if fi.Status == NotifyFinalized || fi.Status == NotifyReconciled || fi.Status == NotifyFinalizeAlreadyFinal {
				require.True(t, fi.State.Final())
			}
			if fi.Status == NotifyReconciled && fi.State != NotifyDelivered {
				require.Equal(t, notifyFinalizeV2, id, "only v2 reconciles to anything but DELIVERED")
				require.Equal(t, NotifyFailed, fi.State)
			}
		}
		if q, err := notifyQuarantineResult(&r); err == nil {
			require.True(t, q.State == 0 || validNotifyState(int64(q.State)))
		}
		if in, err := notifyInspectResult(&r); err == nil && in.Status == NotifyFound {
			require.True(t, validNotifyState(int64(in.State)))
			require.Len(t, in.PlanDigest, 64)
			require.LessOrEqual(t, len(in.Receipts), MaxNotifyReceiptLogBytes)
		}
	})
}
