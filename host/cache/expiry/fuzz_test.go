package expiry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/caphost/caphost/host/cache/expiry"
)

// FuzzPlan: any input either fails with a valid typed Reason or yields a
// plan inside the bounds: Min ≤ soft ≤ hard ≤ the configured hard TTL, each
// at most ttl×Spread (+0.5 ppm of rounding, +1 ms) short of its TTL unless held
// at Min, and PX = hard + Grace in whole ms.
func FuzzPlan(f *testing.F) {
	f.Add("region-items@r7", []byte("item:1"), int64(1767225600000), int64(30_000), int64(300_000), int64(0), 0.2, int64(1000))
	f.Add("r", []byte{}, int64(0), int64(0), int64(1), int64(0), 0.0, int64(1))
	f.Add("r", []byte("k"), int64(-1), int64(5), int64(4), int64(1), 0.99999999, int64(1))
	f.Add("", []byte("k"), int64(1), int64(1), int64(1), int64(0), -0.5, int64(0))
	f.Fuzz(func(t *testing.T, rev string, key []byte, writtenMs, softMs, hardMs, extraNs int64, spread float64, minMs int64) {
		// Durations in ms reach past validation; extraNs probes whole-ms checks.
		p := expiry.Policy{Revision: rev, Spread: spread, Min: time.Duration(minMs) * time.Millisecond}
		soft, hard := time.Duration(softMs)*time.Millisecond, time.Duration(hardMs)*time.Millisecond+time.Duration(extraNs)
		pl, err := p.PlanBytes(key, time.UnixMilli(writtenMs), soft, hard)
		if err != nil {
			var e *expiry.Error
			if !errors.As(err, &e) || !e.Reason.Valid() || !errors.Is(err, expiry.ErrInvalid) {
				t.Fatalf("untyped refusal: %v", err)
			}
			return
		}
		j, err := p.JitterBytes(key, hard)
		if err != nil {
			t.Fatalf("Plan accepted what Jitter refuses: %v", err)
		}
		h := pl.HardExpiresAt.Sub(pl.WrittenAt)
		// Spread is used to 6 decimals: up to 0.5 ppm of the TTL more.
		short := time.Duration(float64(hard)*spread) + hard/2_000_000 + time.Millisecond
		switch {
		case h != j:
			t.Fatalf("Plan's hard TTL %v differs from Jitter's %v", h, j)
		case h < p.Min || h > hard || (h < hard-short && h != p.Min):
			t.Fatalf("hard TTL %v outside bounds (ttl %v, spread %v, min %v)", h, hard, spread, p.Min)
		case pl.PhysicalTTL != h+expiry.Grace(h) || pl.PhysicalTTL%time.Millisecond != 0:
			t.Fatalf("PX %v does not follow the rule for %v", pl.PhysicalTTL, h)
		}
		if soft != 0 {
			s := pl.SoftExpiresAt.Sub(pl.WrittenAt)
			if s < p.Min || s > soft || s > h {
				t.Fatalf("soft TTL %v outside bounds (soft %v, hard %v)", s, soft, h)
			}
		} else if !pl.SoftExpiresAt.IsZero() {
			t.Fatal("soft expiry without a soft TTL")
		}
	})
}
